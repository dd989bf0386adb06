// Package runtime defines the contract between lbb's host layer and an isolation driver.
//
// The lifecycle words, for every driver:
//
//   - Create prepares a sandbox from an image: its state and its writable disk. No process runs.
//   - Start boots a created (or stopped) sandbox: namespaces, cgroups, mounts, and the guest
//     agent as PID 1. It returns once the agent answers on the one channel.
//   - Stop ends every process of the sandbox and unmounts it. Its disk stays, so a later Start
//     resumes with the same workspace. Stopping a sandbox that is not started is no error;
//     an id the driver has no state for is ErrNotFound.
//   - Destroy ends processes, unmounts, removes cgroups, state and disk. Nothing stays. It works
//     on a sandbox in any state, after a partial Create, when the agent is hung, and twice (an
//     unknown id is no error).
//
// Start of an unknown id is ErrNotFound; Create of an existing id, and Start of a sandbox whose
// agent still runs, fail. Drivers classify their errors with internal/errdefs.
//
// Example:
//
//	if err := d.Create(ctx, runtime.Spec{ID: "sbx_01", Image: img, Limits: lim}); err != nil { … }
//	sb, err := d.Start(ctx, "sbx_01")
//	client, err := agent.NewClient(sb.Conn())
//	…
//	d.Stop(ctx, "sbx_01")     // disk stays
//	d.Start(ctx, "sbx_01")    // same workspace
//	d.Destroy(ctx, "sbx_01")  // nothing stays
//
// Core code never imports a driver: cmd/ wires them.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Limits bounds what one sandbox may use. Zero means "the driver's default".
type Limits struct {
	MemoryMiB int64   `json:"memory_mib,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	Pids      int64   `json:"pids,omitempty"`
	DiskMiB   int64   `json:"disk_mib,omitempty"`
	TmpMiB    int64   `json:"tmp_mib,omitempty"`
}

// Or fills each field of l that is zero (or negative) from def: a sandbox's limits over its
// driver's defaults.
func (l Limits) Or(def Limits) Limits {
	if l.MemoryMiB <= 0 {
		l.MemoryMiB = def.MemoryMiB
	}
	if l.CPUs <= 0 {
		l.CPUs = def.CPUs
	}
	if l.Pids <= 0 {
		l.Pids = def.Pids
	}
	if l.DiskMiB <= 0 {
		l.DiskMiB = def.DiskMiB
	}
	if l.TmpMiB <= 0 {
		l.TmpMiB = def.TmpMiB
	}
	return l
}

// Spec describes a sandbox to create.
type Spec struct {
	// ID names the sandbox ("sbx_…"); drivers use it for state, cgroups and disks.
	ID string `json:"id"`
	// Image is the root filesystem directory, shared read-only by every sandbox.
	Image  string `json:"image"`
	Limits Limits `json:"limits"`
	// Hostname inside the sandbox; "sandbox" when empty.
	Hostname string `json:"hostname,omitempty"`
	// Runtime names the driver that holds the sandbox ("ns", "gvisor"), for a driver that
	// routes between several (internal/runtime/mux); "" is its default. A single driver
	// ignores it.
	Runtime string `json:"runtime,omitempty"`
	// WritableRoot makes a build sandbox (internal/layers): its processes may write anywhere
	// in its root, which is still the image under the sandbox's own writable layer, so that a
	// recipe's package managers can install into /usr. A driver that cannot says so at
	// Create. Every other confinement stays.
	WritableRoot bool `json:"writable_root,omitempty"`
	// Layer is a template layer's directory (internal/layers) to stack read-only over Image,
	// for a driver that stacks layers itself (LayerStacker: ns, microvm); "" is none. Another
	// driver (gvisor) is given base and layer already stacked in Image instead, and refuses
	// Layer.
	Layer string `json:"layer,omitempty"`
}

// Sandbox is a started sandbox.
type Sandbox interface {
	ID() string
	// Conn is the one channel to the guest agent. Nothing else crosses. Stop and Destroy
	// close it.
	Conn() net.Conn
	// Stats reads the sandbox's resource accounting.
	Stats(ctx context.Context) (Stats, error)
	// Done is closed when the sandbox's init process has exited (the agent died, or Stop).
	Done() <-chan struct{}
}

// Stats is a sandbox's resource accounting since it started.
type Stats struct {
	CPUNanos       uint64 `json:"cpu_ns"`
	MemoryBytes    uint64 `json:"memory_bytes"`
	MemoryMaxBytes uint64 `json:"memory_max_bytes"`
	// OOMKills counts processes the kernel killed for the sandbox's memory limit.
	OOMKills uint64 `json:"oom_kills"`
	Pids     uint64 `json:"pids"`
}

// Meter is an optional ability of a started Sandbox: its accounting without the process
// count (Stats with Pids zero), for a driver where counting processes costs far more than
// reading the cgroup (gvisor asks the Sentry through a runsc process). What a run meters
// (its CPU, memory and OOM kills, read before and after it) needs no process count.
type Meter interface {
	Usage(ctx context.Context) (Stats, error)
}

// UsageOf reads sb's accounting the cheapest way it can: Meter's Usage when sb has it, else
// Stats. Pids may be zero.
func UsageOf(ctx context.Context, sb Sandbox) (Stats, error) {
	if m, ok := sb.(Meter); ok {
		return m.Usage(ctx)
	}
	return sb.Stats(ctx)
}

// Driver creates and runs sandboxes. All methods are safe for concurrent use.
type Driver interface {
	Name() string
	// Requirements lists what the host must have; CheckRequirements runs them at start.
	Requirements() []Requirement
	Create(ctx context.Context, spec Spec) error
	Start(ctx context.Context, id string) (Sandbox, error)
	Stop(ctx context.Context, id string) error
	Destroy(ctx context.Context, id string) error
	// List names every sandbox the driver holds state for on this host, so that a restarted
	// server can reap what a crash left behind.
	List(ctx context.Context) ([]string, error)
}

// Freezer is an optional ability: park a started sandbox's processes and wake them again.
type Freezer interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// Prioritizer is an optional ability: weigh a sandbox's claim on contended CPU against the
// others'. A warm pool builds its slots at a low weight, so that building never slows the
// sandboxes that run work, and gives a slot the normal weight when it is claimed.
type Prioritizer interface {
	// SetCPUWeight sets the weight of sandbox id: 1..10000, DefaultCPUWeight the default.
	SetCPUWeight(ctx context.Context, id string, weight int) error
}

// CPU weights for Prioritizer.
const (
	DefaultCPUWeight    = 100
	BackgroundCPUWeight = 2
)

// Renamer is an optional ability: give a started sandbox another hostname, from the host (the
// agent inside cannot: it holds no capability). A warm pool renames a slot made under its
// default hostname for a claim that asks for another.
type Renamer interface {
	SetHostname(ctx context.Context, id, name string) error
}

// InitPIDer is an optional ability of a started Sandbox: the host pid of the process whose
// end is the sandbox's (the agent for ns, the Sentry for gvisor). Tests signal and measure it.
type InitPIDer interface {
	InitPID() int
}

// Checkpointer is an optional ability: save a started sandbox whole (memory, processes, the
// agent, the disk) and start it again from what was saved, as itself or as a new sandbox.
//
//	d.Checkpoint(ctx, "sbx_01", dir)                // sbx_01 stops; dir holds it
//	sb, err := d.Restore(ctx, "sbx_01", dir)        // resumed where it was
//	fork, err := d.Restore(ctx, "sbx_02", dir)      // a second one, from the same point
type Checkpointer interface {
	// Checkpoint saves started sandbox id into dir (missing or empty) and stops it: its
	// processes end and its channel closes, as after Stop. Its disk stays.
	Checkpoint(ctx context.Context, id, dir string) error
	// Restore starts sandbox id from the checkpoint in dir, its memory, processes and disk as
	// they were then. id is the checkpointed sandbox (stopped: its disk is replaced by the
	// checkpoint's) or a new id, which Restore creates with the checkpoint's image and limits
	// (a fork; dir may serve any number of them). The agent starts a new session on the
	// returned channel; calls that were in flight at the checkpoint, and processes streaming
	// to them, have ended.
	Restore(ctx context.Context, id, dir string) (Sandbox, error)
}

// Requirement is one thing a driver needs from its host.
type Requirement struct {
	Name  string
	Check func() error
}

// CheckRequirements runs every requirement of d and joins what fails into one clear error.
func CheckRequirements(d Driver) error {
	var errs []error
	for _, r := range d.Requirements() {
		if err := r.Check(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("runtime %q cannot run on this host: %w", d.Name(), errors.Join(errs...))
	}
	return nil
}

// ErrNotFound is returned for a sandbox id the driver has no state for.
var ErrNotFound = errors.New("sandbox not found")

// Sandbox user ids. Base images and sandbox disks are stored owned by host ids
// IDBase..IDBase+IDCount-1, an unprivileged range no host account uses (their root is host
// uid IDBase). Each sandbox's user namespace maps its ids 0..IDCount-1 onto a range of its own
// above it and sees those files through idmapped mounts onto that range, so that inside the
// image's files belong to its root; where the host cannot make idmapped mounts, it maps this
// shared range itself (see internal/runtime/hostids).
const (
	IDBase  uint32 = 1_000_000_000
	IDCount uint32 = 65536
)

// LayerExporter is an optional ability: copy what a stopped sandbox wrote over its image (its
// overlay's upper layer, whiteouts and opaque directories included, ids as disks store them)
// into dst, a directory that must not exist. A template build seals it as a read-only image
// layer (internal/images.Layers).
// InterpreterForker is a driver that can fork a pre-started interpreter into a started
// sandbox from a fork server holding the interpreter already loaded (the ns driver's zygote),
// instead of the sandbox's agent starting one. The caller asks the sandbox's agent to adopt
// it (agent.PrestartRequest.ZygoteSocket = req.Socket) at the same time. A Conflict with
// code not_supported says this sandbox cannot have one (a template layer, another language).
type InterpreterForker interface {
	ForkInterpreter(ctx context.Context, id string, req ForkRequest) error
}

// ForkRequest says which interpreter to fork and where the sandbox's agent waits for it.
type ForkRequest struct {
	// Language is the harness's language (python).
	Language string
	// Socket is the abstract unix socket name the agent listens on in the sandbox.
	Socket string
	// Imports are what the forked interpreter has loaded, as agent.PrestartRequest.Imports:
	// nil is the language's default (python: numpy and pandas), empty the harness alone (a
	// lean slot). The driver keeps a fork server for each set it is asked for.
	Imports []string
}

type LayerExporter interface {
	ExportLayer(ctx context.Context, id, dst string) error
}

// LayerStacker is an optional ability: the driver stacks a template layer over the image
// itself (Spec.Layer) — ns as a second lower directory of its overlay, idmapped as the image
// is; microvm as a second read-only disk — rather than taking a directory in which they are
// already stacked.
type LayerStacker interface {
	StacksLayers()
}

// DiskFiler is an optional ability: the file that holds a sandbox's disk — everything it
// wrote over its image — so that the host agent can archive a stopped sandbox's workspace to
// object storage and write it back, here or on another host (internal/diskarchive). The
// sandbox must be stopped while the file is read or replaced. ErrNotFound when this host
// has no state for id.
type DiskFiler interface {
	DiskFile(ctx context.Context, id string) (string, error)
}
