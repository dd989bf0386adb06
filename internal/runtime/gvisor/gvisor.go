//go:build linux

// Package gvisor is the runtime driver that gives each sandbox a kernel of its own on hosts
// without usable KVM: gVisor's runsc, whose Sentry is a kernel in user space that takes every
// system call of the sandbox's processes, so that none of them reaches the host kernel.
//
// A sandbox is, on the host:
//
//	<StateDir>/<id>/             0710 to the sandbox's root's group: no other host user enters
//	<StateDir>/<id>/state.json   the Spec, limits resolved, and the agent's token
//	<StateDir>/<id>/ids.json     its own range of host ids (hostids), claimed at Create
//	<StateDir>/<id>/disk.img     its disk: a sparse ext4 file, its size the workspace quota
//	<StateDir>/<id>/disk/        disk.img loop-mounted while started: workspace/, home/, vartmp/
//	<StateDir>/<id>/rootfs/      while started, the image through an idmapped mount onto the
//	<StateDir>/<id>/layer/       sandbox's range (the OCI root), and its disk likewise (the
//	                             bind mounts' sources)
//	<StateDir>/<id>/lbb/         what is mounted read-only at /.lbb: the agent, the seccomp
//	                             filter, and chan/, where the host listens for the agent
//	<StateDir>/<id>/bundle/      the OCI bundle runsc runs (config.json)
//	<StateDir>/.runsc/           runsc's own state (--root): an entry per started sandbox
//	<cgroup>/<CgroupParent>/<id> its cgroups, made and removed by runsc (cgroupsPath)
//
// beside <StateDir>/.templates (formatted disks), <StateDir>/.agent (the agent binary) and
// <StateDir>/.seccomp (the agent's seccomp filter).
//
// Inside: the image is the root, read-only; /workspace, /root and /var/tmp are the sandbox's
// disk; /tmp, /dev/shm and /run are the Sentry's memory (tmpfs, bounded); no network device
// but lo (--network=none); the user namespace maps ids 0..65535 onto the sandbox's own host
// range (the shared one where the host makes no idmapped mounts), so the image's files belong
// to the sandbox's root and what it writes lands as such; the gofer, the one host process that
// opens its files, runs as that root. The agent is PID 1 with no_new_privs and CAP_SETUID
// alone, as a real uid of its own (see "What gVisor does differently"). Limits: memory and CPU through the
// sandbox's cgroup (the Sentry's own memory counts: the limit is what the sandbox costs the
// host), processes through RLIMIT_NPROC inside (a host pids limit would starve the Sentry of
// threads: it crashes with "newosproc"), the disk by its size.
//
// # The channel
//
// runsc offers three ways to give the agent one stream to the host: a descriptor passed to
// the container's init (run --pass-fd, or its stdin), or a unix socket of the host's that the
// agent connects to through a mounted directory (--host-uds=open). A passed descriptor is the
// simplest and unforgeable, but it cannot be replaced: `runsc restore` has no --pass-fd (a
// passed descriptor other than stdio makes a restore panic: "no host FD available"), and a
// restored stdin would carry on the old session, HTTP/2 state and all, which the new host
// side cannot join and a fork cannot share. So the agent connects (lbb-agent --connect, see
// cmd/lbb-agent/connect.go): to /.lbb/chan/agent.sock at boot and again whenever the
// connection ends. runsc cuts host socket connections when it saves a sandbox, so a restored
// sandbox, or each of its forks, opens a fresh session on its own host's socket while its
// processes run on. The socket is reachable by the sandbox's processes too: the agent's
// first line is a token only it has (its environment, which nothing it starts inherits, and
// which /proc/1 does not show: the agent makes itself non-dumpable); the host listens only
// while it waits for the agent and drops any other caller. Nothing else crosses: the mounts
// hold no other socket.
//
// # What gVisor does differently
//
// The Sentry is the boundary, and some Linux behaviours the hostile suite relies on differ:
//   - The init of a PID namespace is not immune to a SIGKILL from inside, exec needs read
//     permission, and a non-readable executable does not make a process non-dumpable. So the
//     agent makes itself non-dumpable (connect mode), and loads the ns driver's seccomp filter
//     (internal/runtime/seccomp), which drops signals to PID 1 (see seccomp.go). runsc's OCI
//     seccomp answers EPERM only, which would break clone3's fallback. The agent's link in
//     /.lbb goes once it runs (hideAgent). A signal to one of the agent's thread ids reaches
//     the agent too, and no filter knows those ids: the agent runs as real uid agentUID
//     (effective 0) and starts its processes as root, so the kernel's permission check
//     refuses every signal they send it.
//   - The i386 system calls (int 0x80) do not exist in gVisor: they fail with ENOSYS and no
//     filter sees them.
//   - /sys has no class/net: an empty, read-only /sys/class/net/lo is mounted.
//   - The memory cgroup holds the Sentry, whose memory file holds every process's pages: the
//     kernel's OOM killer would kill the whole sandbox. The driver turns it off for the
//     sandbox's cgroup and kills processes inside itself (oom.go).
//   - The Sentry runs with --directfs=false: it opens no host file itself, the gofer does; it
//     holds no host directory (the suite looks) and its own host seccomp filter is tighter.
package gvisor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/spawn"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// Config configures the driver. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// StateDir holds one directory per sandbox (default /var/lib/lbb/gvisor).
	StateDir string
	// Runsc is the runsc binary (default DefaultRunsc; scripts/install-runsc.sh installs it).
	Runsc string
	// AgentPath is the static lbb-agent binary on the host.
	AgentPath string
	// CgroupParent is the cgroup under which runsc makes each sandbox's (default "lbb-gvisor").
	CgroupParent string
	// Limits fills the zero fields of a Spec's limits.
	Limits runtime.Limits
	// NoFile is the sandbox's RLIMIT_NOFILE (default 4096).
	NoFile uint64
	// Platform is runsc's platform (default "systrap"; "kvm" needs a KVM that boots).
	Platform string
	// DebugLogDir, when set, gets runsc's debug logs, in a directory per sandbox.
	DebugLogDir string
	// IDRegistry is the host-wide registry of sandbox host id ranges (default
	// hostids.DefaultDir); every driver of the host must share it.
	IDRegistry string
	Logger     *slog.Logger
}

// DefaultRunsc is where scripts/install-runsc.sh puts runsc.
const DefaultRunsc = "/usr/local/lib/lbb/runsc"

// DefaultConfig is the configuration the zero fields of a Config take.
func DefaultConfig() Config {
	return Config{
		StateDir:     "/var/lib/lbb/gvisor",
		Runsc:        DefaultRunsc,
		CgroupParent: "lbb-gvisor",
		Limits:       runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024, TmpMiB: 64},
		NoFile:       4096,
		Platform:     "systrap",
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// Driver is the gvisor runtime driver.
type Driver struct {
	cfg Config

	filesMu sync.Mutex
	agent   driverkit.AgentCopy
	seccomp string // the filter's file, made once

	sbs driverkit.Sandboxes[*sandbox]
}

var (
	_ runtime.Driver       = (*Driver)(nil)
	_ runtime.Freezer      = (*Driver)(nil)
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Prioritizer  = (*Driver)(nil)
	_ runtime.InitPIDer    = (*sandbox)(nil)
	_ runtime.Meter        = (*sandbox)(nil)
)

// New returns a driver for cfg. It checks nothing: runtime.CheckRequirements does.
func New(cfg Config) *Driver {
	def := DefaultConfig()
	cfg.StateDir = cmp.Or(cfg.StateDir, def.StateDir)
	cfg.Runsc = cmp.Or(cfg.Runsc, def.Runsc)
	cfg.CgroupParent = cmp.Or(cfg.CgroupParent, def.CgroupParent)
	cfg.Limits = cfg.Limits.Or(def.Limits)
	cfg.NoFile = cmp.Or(cfg.NoFile, def.NoFile)
	cfg.Platform = cmp.Or(cfg.Platform, def.Platform)
	cfg.Logger = cmp.Or(cfg.Logger, def.Logger)
	d := &Driver{cfg: cfg}
	d.sbs = driverkit.Sandboxes[*sandbox]{Dir: cfg.StateDir, Halt: d.stop, Held: d.hasRunscState, Log: cfg.Logger,
		IDs: &hostids.Registry{Dir: cfg.IDRegistry}, IDMap: idmap.Check}
	return d
}

// Name is "gvisor".
func (d *Driver) Name() string { return "gvisor" }

// Config is the driver's configuration, defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

func (d *Driver) dir(id string) string { return d.sbs.Path(id) }

// state is what the driver keeps of a sandbox between calls (and processes).
type state struct {
	Spec runtime.Spec `json:"spec"`
	// Token is the secret the agent opens each connection with. A fork inherits it with the
	// agent's memory.
	Token string `json:"token"`
}

// Create makes the sandbox's state directory and its disk. No process runs.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) error {
	if spec.WritableRoot {
		return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeNotSupported, "%s cannot make a build sandbox (a writable root): builds run on ns", d.Name())
	}
	if spec.Layer != "" {
		return errdefs.InvalidArgument("%s takes a template layer stacked in its image, not in Spec.Layer", d.Name())
	}
	st, err := d.newState(spec)
	if err != nil {
		return err
	}
	unlock := d.sbs.Lock(spec.ID)
	defer unlock()
	return d.create(ctx, st, "")
}

func (d *Driver) newState(spec runtime.Spec) (state, error) {
	spec, err := driverkit.CheckSpec(spec, d.cfg.Limits)
	if err != nil {
		return state{}, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return state{}, err
	}
	return state{Spec: spec, Token: hex.EncodeToString(tok)}, nil
}

// create makes the state directory and the disk: a fresh one, or a copy of disk when set.
func (d *Driver) create(ctx context.Context, st state, disk string) error {
	return d.sbs.Create(ctx, st.Spec.ID, driverkit.Layout{
		Disk:      disk,
		DiskMiB:   st.Spec.Limits.DiskMiB,
		Dirs:      []string{"disk", "bundle"},
		DirMode:   0o700,
		StateFile: "state.json",
		State:     st,
	})
}

func readState(path, id string) (state, error) {
	var st state
	return st, driverkit.ReadJSON(path, id, &st)
}

func (d *Driver) readState(id string) (state, error) {
	return readState(filepath.Join(d.dir(id), "state.json"), id)
}

// agentReadyTimeout bounds how long Start waits for a started agent to connect and speak.
const agentReadyTimeout = 30 * time.Second

// Start boots the sandbox and returns once the agent speaks on the channel.
func (d *Driver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	return d.boot(ctx, id, "")
}

// boot starts sandbox id afresh, or from the checkpoint in memDir when it is set.
func (d *Driver) boot(ctx context.Context, id, memDir string) (runtime.Sandbox, error) {
	return d.sbs.Start(ctx, id, func() (*sandbox, error) {
		st, err := d.readState(id)
		if err != nil {
			return nil, err
		}
		return d.start(ctx, st, memDir)
	})
}

func (d *Driver) start(ctx context.Context, st state, memDir string) (*sandbox, error) {
	spec := st.Spec
	id, dir := spec.ID, d.dir(spec.ID)
	diskDir := d.sbs.RunPath(id, "disk")
	var u undo.Stack
	if err := u.Step("leftovers", func() error {
		// A previous process of this driver may have died with the sandbox started.
		ctx, cancel := driverkit.UndoContext()
		defer cancel()
		return d.cleanup(ctx, id)
	}, nil); err != nil {
		return nil, err
	}
	var ident driverkit.Identity
	if err := u.Step("host ids", func() (err error) { ident, err = d.sbs.Identity(id, spec.Image); return err }, nil); err != nil {
		return nil, err
	}
	root := int(ident.Mapped.Base) // the sandbox's root on the host
	if _, _, err := d.sbs.MountDisk(ctx, &u, id); err != nil {
		return nil, err
	}
	if err := u.Step("disk layout", func() error { return prepareDisk(diskDir, spec.Image) }, nil); err != nil {
		return nil, err
	}
	views, err := d.sbs.MountViews(&u, id, spec.Image, "", ident)
	if err != nil {
		return nil, err
	}
	if err := u.Step("/.lbb", func() error { return d.prepareLbbDir(dir, root) }, nil); err != nil {
		return nil, err
	}
	var ln *net.UnixListener
	if err := u.Step("listen", func() (err error) { ln, err = listenAgent(filepath.Join(dir, "lbb", "chan"), root); return err },
		func() error { return ln.Close() }); err != nil {
		return nil, err
	}
	if err := u.Step("bundle", func() error {
		return driverkit.WriteJSON(filepath.Join(dir, "bundle", "config.json"), d.ociSpec(st, dir, ident, views))
	}, nil); err != nil {
		return nil, err
	}
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, errors.Join(err, u.Undo())
	}
	defer logW.Close()
	var cmd *exec.Cmd
	exited := make(chan struct{})
	if err := u.Step("runsc", func() error {
		// runsc's state is root's alone (runsc would make its directory 0711).
		if err := os.MkdirAll(d.runscRoot(), 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d.runscRoot(), 0o700); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(dir, "sentry.pid"))
		args := []string{"run", "--bundle", filepath.Join(dir, "bundle"), "--pid-file", filepath.Join(dir, "sentry.pid"), id}
		if memDir != "" {
			args = []string{"restore", "--image-path", memDir, "--bundle", filepath.Join(dir, "bundle"),
				"--pid-file", filepath.Join(dir, "sentry.pid"), id}
		}
		cmd = d.runscCmd(id, args...)
		// runsc passes its stdio to the sandbox's init: the agent's stderr is its log.
		cmd.Stdout, cmd.Stderr = logW, logW
		cmd.SysProcAttr = &syscall.SysProcAttr{
			// Attached (no --detach), runsc ties the Sentry and the gofer to itself, and
			// itself to this process: the sandbox dies with the server, as ns's do. A
			// restarted server reaps what is left (List, then Destroy).
			Pdeathsig: syscall.SIGKILL,
			Setpgid:   true,
		}
		if err := spawn.Start(cmd); err != nil {
			return err
		}
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		return nil
	}, func() error {
		// runsc first: one that has not started the sandbox yet would wait for it, and it
		// takes the Sentry and the gofer with it (they die with it: attached).
		_ = cmd.Process.Kill()
		<-exited
		ctx, cancel := driverkit.UndoContext()
		defer cancel()
		return d.cleanup(ctx, id)
	}); err != nil {
		logR.Close()
		return nil, err
	}
	logW.Close()
	go driverkit.LogAgent(d.cfg.Logger.With("sandbox", id), logR)

	var conn net.Conn
	if err := u.Step("agent connects", func() error {
		wctx, cancel := context.WithTimeout(ctx, agentReadyTimeout)
		defer cancel()
		var err error
		conn, err = acceptAgent(wctx, ln, st.Token, exited)
		if err != nil {
			return err
		}
		ln.Close()
		_ = os.Remove(filepath.Join(dir, "lbb", "chan", agentSocket))
		if err := agent.WaitReady(wctx, conn); err != nil {
			conn.Close()
			return err
		}
		if err := hideAgent(dir); err != nil {
			conn.Close()
			return err
		}
		return nil
	}, nil); err != nil {
		return nil, err
	}
	sb := &sandbox{d: d, id: id, conn: conn, cmd: cmd, done: exited}
	if err := u.Step("memory guard", func() (err error) {
		sb.guard, err = d.guardMemory(id, spec.Limits.MemoryMiB<<20)
		return err
	}, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if err := u.Step("sentry pid", func() (err error) {
		// runsc wrote it before it started the agent.
		b, err := os.ReadFile(filepath.Join(dir, "sentry.pid"))
		if err == nil {
			_, err = fmt.Sscan(string(b), &sb.pid)
		}
		return err
	}, nil); err != nil {
		conn.Close()
		sb.guard.stop()
		return nil, err
	}
	u.Release()
	d.cfg.Logger.Debug("sandbox started", append([]any{"sandbox", id, "pid", sb.pid}, u.Times...)...)
	return sb, nil
}

// Stop ends every process of the sandbox and unmounts its disk; the disk stays.
func (d *Driver) Stop(ctx context.Context, id string) error { return d.sbs.Stop(ctx, id) }

// stop works from whatever is there: a sandbox this driver started, one a previous process
// started (runsc's state and the mount are found by name), or one that never started.
func (d *Driver) stop(ctx context.Context, id string) error {
	sb, _ := d.sbs.Take(id)
	var errs []error
	if sb != nil {
		sb.guard.stop()
		sb.conn.Close()
	}
	if err := d.cleanup(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if sb != nil {
		select {
		case <-sb.done:
		case <-time.After(5 * time.Second):
			// runsc itself hangs on: its sandbox is gone, so it may go too.
			_ = syscall.Kill(-sb.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-sb.done:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("wait for runsc: %w", ctx.Err()))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	d.cfg.Logger.Debug("sandbox stopped", "sandbox", id)
	return nil
}

// cleanup kills the sandbox's Sentry and gofer, removes runsc's state and the cgroups, and
// unmounts the disk. It works in any state, also when nothing runs.
func (d *Driver) cleanup(ctx context.Context, id string) error {
	var errs []error
	dir := d.dir(id)
	if err := d.thawLeftApp(ctx, id); err != nil {
		errs = append(errs, err)
	}
	// Kill by pid first: a stopped or hung Sentry does not answer runsc's requests. runsc
	// itself (run or restore, attached) is their parent: left alive, it reaps them and ends.
	procs := d.processes(id)
	var killed []int
	for _, p := range procs {
		if p.kind != runscCLI {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			killed = append(killed, p.pid)
		}
	}
	if err := waitReaped(ctx, killed, func() {
		for _, p := range procs {
			if p.kind == runscCLI {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}); err != nil {
		errs = append(errs, err)
	}
	if d.hasRunscState(id) {
		if out, err := d.runsc(ctx, id, "delete", "--force", id); err != nil && d.hasRunscState(id) {
			errs = append(errs, fmt.Errorf("runsc delete: %w: %s", err, out))
		}
	}
	// What is left has nothing more to do: a runsc that had not started the sandbox yet (it
	// would wait for it), or one whose children are gone.
	if err := waitGone(ctx, func() bool {
		procs := d.processes(id)
		for _, p := range procs {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		return len(procs) == 0
	}); err != nil {
		errs = append(errs, fmt.Errorf("processes %v: %w", d.processes(id), err))
	} else if err := d.removeOrphanRunscFiles(id); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, d.cfg.CgroupParent, id); err != nil {
		errs = append(errs, err)
	}
	if err := d.sbs.UnmountDisk(ctx, id); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(filepath.Join(dir, "lbb", "chan", agentSocket))
	return errors.Join(errs...)
}

// waitReaped waits until the processes pids are gone, zombies included: their parent (runsc)
// reaps them, or, when it is dead, the host's init. After a while it calls impatient (once).
func waitReaped(ctx context.Context, pids []int, impatient func()) error {
	t0 := time.Now()
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		var left []int
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if impatient != nil && time.Since(t0) > 3*time.Second {
			impatient()
			impatient = nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v not reaped: %w", left, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// waitGone polls cond until it holds.
func waitGone(ctx context.Context, cond func() bool) error {
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	return nil
}

// Destroy stops the sandbox and removes its state and disk. A missing sandbox is no error.
func (d *Driver) Destroy(ctx context.Context, id string) error { return d.sbs.Destroy(ctx, id) }

// List names every sandbox with a state directory, started or not.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.sbs.List() }

// Freeze parks every process of a started sandbox (runsc pause: the Sentry stops its tasks).
func (d *Driver) Freeze(ctx context.Context, id string) error {
	return d.pause(ctx, id, "pause")
}

// Thaw wakes a frozen sandbox.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	return d.pause(ctx, id, "resume")
}

func (d *Driver) pause(ctx context.Context, id, verb string) error {
	if _, err := d.sbs.Started(id); err != nil {
		return err
	}
	if out, err := d.runsc(ctx, id, verb, id); err != nil {
		return fmt.Errorf("runsc %s %s: %w: %s", verb, id, err, out)
	}
	return nil
}

// sandbox is a started sandbox.
type sandbox struct {
	d     *Driver
	id    string
	conn  net.Conn
	cmd   *exec.Cmd // runsc run (or restore), attached
	pid   int       // the Sentry
	guard *memGuard
	done  chan struct{}
}

func (s *sandbox) ID() string            { return s.id }
func (s *sandbox) Conn() net.Conn        { return s.conn }
func (s *sandbox) Done() <-chan struct{} { return s.done }

// InitPID is the host pid of the Sentry: the sandbox's kernel, and every process inside it.
// PID 1 inside (the agent) has no host process of its own; stopping or killing the Sentry
// does to the agent what stopping or killing it would.
func (s *sandbox) InitPID() int { return s.pid }

func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	st, err := s.Usage(ctx)
	if err != nil {
		return st, err
	}
	// Processes are counted inside: the host sees the Sentry's threads. Asking the Sentry
	// takes a runsc process (10–40 ms), which Usage, what a run meters, goes without.
	ev, err := s.d.events(ctx, s.id)
	if err != nil {
		return st, err
	}
	st.Pids = ev.Data.Pids.Current
	return st, nil
}

// Usage is the sandbox's accounting from its cgroup alone, without the process count
// (runtime.Meter): what a run reads before and after it, at no runsc process's cost.
func (s *sandbox) Usage(ctx context.Context) (runtime.Stats, error) {
	st, err := cgroupStats(s.d.cfg.CgroupParent, s.id)
	if err != nil {
		return st, err
	}
	st.OOMKills += s.guard.killed()
	return st, nil
}

// Leftovers lists what of sandbox id is on the host: its state directory, mounts under it,
// runsc's state, cgroups, processes and loop devices on its disk. After Destroy it is empty.
func (d *Driver) Leftovers(id string) []string {
	out := d.sbs.Leftovers(id, cgroupPaths(d.cfg.CgroupParent, id))
	if d.hasRunscState(id) {
		out = append(out, "runsc state of "+id)
	}
	if pids := d.processes(id); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	return out
}

// HostIDs answers who started sandbox id is on the host: its gofer's identity, the one host
// process that opens its files. (The Sentry runs as nobody, in a user namespace of its own;
// both namespaces are runsc's, owned by the host's root.)
func (d *Driver) HostIDs(id string) (driverkit.HostIDs, error) {
	for _, p := range d.processes(id) {
		if p.kind == gofer {
			return driverkit.ProcessIDs(p.pid)
		}
	}
	return driverkit.HostIDs{}, fmt.Errorf("sandbox %s has no gofer", id)
}

// The host processes of a sandbox.
const (
	runscCLI = iota // runsc run or restore, attached: the parent of the others
	sentry
	gofer
)

type hostProc struct{ pid, kind int }

// processes lists the host processes of sandbox id: runsc's, the Sentry's and the gofer's,
// all of which name its bundle. (The Sentry's stubs die with it.)
func (d *Driver) processes(id string) []hostProc {
	bundle := filepath.Join(d.dir(id), "bundle")
	ents, _ := os.ReadDir("/proc")
	var out []hostProc
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a == "--bundle="+bundle || (a == "--bundle" && i+1 < len(args) && args[i+1] == bundle) {
				kind := runscCLI
				switch filepath.Base(args[0]) {
				case "runsc-sandbox":
					kind = sentry
				case "runsc-gofer":
					kind = gofer
				}
				out = append(out, hostProc{pid, kind})
				break
			}
		}
	}
	return out
}

// DiskFile answers the file of the sandbox's disk (runtime.DiskFiler).
func (d *Driver) DiskFile(ctx context.Context, id string) (string, error) { return d.sbs.DiskFile(id) }
