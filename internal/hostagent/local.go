package hostagent

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// Options configure a Local host agent.
type Options struct {
	Driver runtime.Driver
	// Pool is the warm pool one-call runs and (Warm) creates take sandboxes from; nil starts
	// every sandbox cold.
	Pool *pool.Pool
	// Rootfs is the base image's root filesystem directory; Image describes it.
	Rootfs string
	Image  Image
	// Default is the driver a sandbox that names none runs on; Offered and Unavailable are
	// what Info answers (Offered defaults to Default alone).
	Default     string
	Offered     []string
	Unavailable map[string]string
	// Blobs holds the bytes of template Files (File.SHA256).
	Blobs blobs.Store
	// DataDir holds checkpoints (<DataDir>/paused/<sandbox>) and snapshots
	// (<DataDir>/snapshots/<snapshot>).
	DataDir string
	// Guard decides and carries sandboxes' egress; nil makes one that permits nothing
	// non-public and resolves with the host's resolver.
	Guard *egress.Guard
	Log   *slog.Logger
	// HoldIdle is how long a held command's output waits for a reader before the hold is let
	// go (0: HoldIdle).
	HoldIdle time.Duration
}

// Local is the host agent in the server's own process.
type Local struct {
	driver   runtime.Driver
	provider pool.Provider
	pool     *pool.Pool
	rootfs   string
	info     Info
	blobs    blobs.Store
	dataDir  string
	// placing serializes restores of checkpoints from the blob store (placeCheckpoint): two
	// forks of one snapshot restore it once.
	placing sync.Mutex
	guard   *egress.Guard
	log     *slog.Logger
	// backstop is how long past a command's timeout the host waits for the agent to report it
	// before it gives up on it.
	backstop time.Duration
	holdIdle time.Duration
	// layers are the template layers built here (nil: no builds; see WithLayers).
	layers    *layers.Store
	layerOpts LayerOptions

	events chan Event

	mu        sync.Mutex
	runs      map[string]*oneCall // one-call runs' sandboxes, by sandbox id
	sandboxes map[string]*sandbox // long-lived sandboxes, by id
	commands  map[string]*command // commands of long-lived sandboxes, by id
}

var _ Host = (*Local)(nil)

// NewLocal returns a host agent on o.Driver.
func NewLocal(o Options) *Local {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Guard == nil {
		o.Guard = egress.NewGuard(egress.Options{Log: o.Log})
	}
	h := &Local{driver: o.Driver, pool: o.Pool, rootfs: o.Rootfs, blobs: o.Blobs, dataDir: o.DataDir, log: o.Log, guard: o.Guard,
		backstop: 10 * time.Second, holdIdle: cmp.Or(o.HoldIdle, HoldIdle), events: make(chan Event, 64),
		runs: map[string]*oneCall{}, sandboxes: map[string]*sandbox{}, commands: map[string]*command{}}
	h.provider = &pool.Cold{Driver: o.Driver, Log: o.Log}
	if o.Pool != nil {
		h.provider = o.Pool
	}
	if o.Default == "" && o.Driver != nil {
		o.Default = o.Driver.Name()
	}
	offered := slices.Clone(o.Offered)
	if !slices.Contains(offered, o.Default) {
		offered = append(offered, o.Default)
	}
	slices.Sort(offered)
	h.info = Info{Default: o.Default, Offered: offered, Unavailable: o.Unavailable, Image: o.Image,
		Boot: rand.Text(), Capacity: Capacity{CPUs: goruntime.NumCPU(), MemoryMiB: memTotalMiB()}}
	if sh, ok := o.Blobs.(blobs.Shared); ok {
		h.info.Blobs = sh.Location()
	}
	return h
}

// memTotalMiB is the machine's memory (0 when /proc/meminfo says nothing).
func memTotalMiB() int64 { return meminfoMiB("MemTotal:") }

// meminfoMiB answers a line of /proc/meminfo (name with its colon) in MiB; 0 when unknown.
func meminfoMiB(name string) int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
}

// Driver returns the driver the host agent runs sandboxes on.
func (h *Local) Driver() runtime.Driver { return h.driver }

// Info describes the machine and how many sandboxes it runs now.
func (h *Local) Info(context.Context) (Info, error) {
	info := h.info
	h.mu.Lock()
	info.Capacity.Sandboxes = len(h.runs) + len(h.sandboxes)
	h.mu.Unlock()
	info.Capacity.MemoryFreeMiB = meminfoMiB("MemAvailable:")
	var fs syscall.Statfs_t
	if h.dataDir != "" && syscall.Statfs(h.dataDir, &fs) == nil {
		info.Capacity.DiskFreeMiB = int64(fs.Bavail) * int64(fs.Bsize) >> 20
	}
	return info, nil
}

// Sandboxes lists every sandbox the driver holds or the host agent keeps state for.
func (h *Local) Sandboxes(ctx context.Context) ([]string, error) {
	held, err := h.driver.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("hostagent: listing sandboxes: %w", err)
	}
	h.mu.Lock()
	for id := range h.sandboxes {
		held = append(held, id)
	}
	h.mu.Unlock()
	slices.Sort(held)
	return slices.Compact(held), nil
}

// Reap destroys every sandbox the driver holds that keep does not name, but for the warm
// pool's slots, and removes the checkpoints and snapshots keep does not name (snapshot ids go
// in keep beside sandbox ids).
func (h *Local) Reap(ctx context.Context, keep []string) ([]string, error) {
	held, err := h.driver.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("hostagent: listing sandboxes: %w", err)
	}
	kept := map[string]bool{}
	for _, id := range keep {
		kept[id] = true
	}
	// A one-call run kept by its record's id may run in a warm slot, which the driver names
	// by the slot's id: kept too (another control plane's run, on a host they share). A
	// claim still acquiring is waited for, so that its slot is known.
	for _, id := range h.keptSlots(ctx, keep) {
		kept[id] = true
	}
	var reaped []string
	var errs []error
	for _, id := range held {
		// The warm pool's slots, parked or being built, are the host's own: no control
		// plane's record names them. lbb serve reaps before its pool starts (it has none
		// then); an lbb host serving several control planes is reaped by each while its pool
		// runs.
		if kept[id] || h.pool != nil && h.pool.Owns(id) {
			continue
		}
		if err := h.driver.Destroy(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, fmt.Errorf("destroying %s: %w", id, err))
			continue
		}
		h.forget(id)
		h.log.Info("reaped sandbox", "sandbox", id)
		reaped = append(reaped, id)
	}
	if h.dataDir != "" {
		// workspaces: the marks of archived disks (workspace.go).
		for _, dir := range []string{"paused", "snapshots", "workspaces"} {
			ents, _ := os.ReadDir(filepath.Join(h.dataDir, dir))
			for _, e := range ents {
				if !kept[e.Name()] {
					h.log.Warn("removing a checkpoint or snapshot nothing claims", "dir", filepath.Join(h.dataDir, dir, e.Name()))
					os.RemoveAll(filepath.Join(h.dataDir, dir, e.Name()))
				}
			}
		}
	}
	return reaped, errors.Join(errs...)
}

// keptSlots answers the driver's ids of the one-call runs' sandboxes that keep names by their
// records' ids, once their claims are done (for up to 30 s).
func (h *Local) keptSlots(ctx context.Context, keep []string) []string {
	h.mu.Lock()
	var ocs []*oneCall
	for _, id := range keep {
		if oc := h.runs[id]; oc != nil {
			ocs = append(ocs, oc)
		}
	}
	h.mu.Unlock()
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	var ids []string
	for _, oc := range ocs {
		select {
		case <-oc.done:
		case <-wait.C:
			return ids
		case <-ctx.Done():
			return ids
		}
		if oc.lease != nil {
			ids = append(ids, oc.lease.Sandbox.ID())
		}
	}
	return ids
}

// Events delivers what happened to sandboxes by themselves until ctx ends.
func (h *Local) Events(ctx context.Context) (<-chan Event, error) {
	out := make(chan Event)
	go func() {
		defer close(out)
		for {
			select {
			case e := <-h.events:
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (h *Local) emit(e Event) {
	e.At = time.Now().UTC()
	select {
	case h.events <- e:
	default:
		go func() { h.events <- e }()
	}
}

// notHere is the error for a sandbox the host agent holds no state for.
func notHere(id string) error { return errdefs.NotFound("sandbox %s is not on this host", id) }
