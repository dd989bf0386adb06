// Package mux is a runtime.Driver that routes between several named drivers, so that one
// server can run each sandbox on the isolation it asks for: Create goes to the driver named by
// runtime.Spec.Runtime ("" is the default one), and every later call on that sandbox goes to
// the driver that holds it.
//
//	d, err := mux.New(mux.Options{Default: "ns", Drivers: map[string]runtime.Driver{"ns": nsd, "gvisor": gvd}})
//	d.Create(ctx, runtime.Spec{ID: "sbx_01", Image: img, Runtime: "gvisor"})
//	d.Start(ctx, "sbx_01") // on gvisor
//
// The id → driver map is kept in memory. After a restart an id it does not know is looked up
// in each driver's List, which is what every driver keeps on disk anyway.
package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// Options configure a Driver.
type Options struct {
	// Default names the driver of specs that name none; it must be in Drivers.
	Default string
	// Drivers are the drivers to route between, by the name specs use ("ns", "gvisor"). Each
	// must keep its sandboxes apart from the others' (its own state directory), so that its
	// List names only its own.
	Drivers map[string]runtime.Driver
}

// Driver routes between named drivers. It is safe for concurrent use.
type Driver struct {
	def     string
	drivers map[string]runtime.Driver
	names   []string // sorted

	mu    sync.Mutex
	owner map[string]string // sandbox id → driver name
	// made remembers which driver wrote a checkpoint directory, so that a fork restored from
	// it under a new id goes to that driver. The directory says so too (its runtimeFile),
	// for a fork after a restart or on another host (a checkpoint from the blob store).
	made map[string]string
}

var (
	_ runtime.Driver            = (*Driver)(nil)
	_ runtime.Freezer           = (*Driver)(nil)
	_ runtime.Checkpointer      = (*Driver)(nil)
	_ runtime.Prioritizer       = (*Driver)(nil)
	_ runtime.Renamer           = (*Driver)(nil)
	_ runtime.InterpreterForker = (*Driver)(nil)
)

// New returns a Driver over o.Drivers.
func New(o Options) (*Driver, error) {
	if _, ok := o.Drivers[o.Default]; !ok {
		return nil, fmt.Errorf("mux: the default driver %q is not among the drivers", o.Default)
	}
	d := &Driver{def: o.Default, drivers: make(map[string]runtime.Driver, len(o.Drivers)),
		owner: map[string]string{}, made: map[string]string{}}
	for name, drv := range o.Drivers {
		if name == "" || drv == nil {
			return nil, fmt.Errorf("mux: driver %q: a driver needs a name and a value", name)
		}
		d.drivers[name] = drv
		d.names = append(d.names, name)
	}
	sort.Strings(d.names)
	return d, nil
}

// Close closes the drivers that hold something of their own (an io.Closer: ns's spawn helper
// and zygotes), once nothing runs on them any more.
func (d *Driver) Close() error {
	var errs []error
	for _, name := range d.names {
		if c, ok := d.drivers[name].(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Name is the default driver's name: logs and checks that know one driver read as before.
func (d *Driver) Name() string { return d.drivers[d.def].Name() }

// Default names the driver of specs that name none.
func (d *Driver) Default() string { return d.def }

// Names lists the drivers routed between, sorted.
func (d *Driver) Names() []string { return slices.Clone(d.names) }

// Driver returns the driver of a name.
func (d *Driver) Driver(name string) (runtime.Driver, bool) {
	drv, ok := d.drivers[name]
	return drv, ok
}

// Requirements are the default driver's: the others were checked before they were added.
func (d *Driver) Requirements() []runtime.Requirement { return d.drivers[d.def].Requirements() }

// Create makes the sandbox on the driver spec.Runtime names.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) error {
	name := spec.Runtime
	if name == "" {
		name = d.def
	}
	drv, ok := d.drivers[name]
	if !ok {
		return errdefs.InvalidArgument("runtime %q: this host runs %v", spec.Runtime, d.names)
	}
	d.mu.Lock()
	if prev, ok := d.owner[spec.ID]; ok && prev != name {
		d.mu.Unlock()
		return errdefs.Conflict("sandbox %s already exists on runtime %q", spec.ID, prev)
	}
	d.owner[spec.ID] = name
	d.mu.Unlock()
	if err := drv.Create(ctx, spec); err != nil {
		// A failed Create undoes itself; what a crash left half-made, List still finds.
		if !errdefs.IsConflict(err) {
			d.forget(spec.ID)
		}
		return err
	}
	return nil
}

// Start starts the sandbox on its driver.
func (d *Driver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	_, drv, err := d.route(ctx, id)
	if err != nil {
		return nil, err
	}
	return drv.Start(ctx, id)
}

// Stop stops the sandbox on its driver.
func (d *Driver) Stop(ctx context.Context, id string) error {
	_, drv, err := d.route(ctx, id)
	if err != nil {
		return err
	}
	return drv.Stop(ctx, id)
}

// Destroy destroys the sandbox on its driver; an id no driver holds is no error.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	_, drv, err := d.route(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := drv.Destroy(ctx, id); err != nil {
		return err
	}
	d.forget(id)
	return nil
}

// List is the union of every driver's List. What it finds, it remembers.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	var out []string
	var errs []error
	found := map[string]string{}
	for _, name := range d.names {
		ids, err := d.drivers[name].List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("runtime %s: %w", name, err))
			continue
		}
		for _, id := range ids {
			if _, dup := found[id]; !dup {
				out = append(out, id)
			}
			found[id] = name
		}
	}
	d.mu.Lock()
	for id, name := range found {
		if _, ok := d.owner[id]; !ok {
			d.owner[id] = name
		}
	}
	d.mu.Unlock()
	sort.Strings(out)
	return out, errors.Join(errs...)
}

// Runtime names the driver that holds sandbox id; runtime.ErrNotFound when none does.
func (d *Driver) Runtime(id string) (string, error) {
	name, _, err := d.route(context.Background(), id)
	return name, err
}

// Checkpoint saves the sandbox into dir, when its driver can (runtime.Checkpointer); else an
// errdefs not_supported error.
func (d *Driver) Checkpoint(ctx context.Context, id, dir string) error {
	name, c, err := ability[runtime.Checkpointer](ctx, d, id, "checkpoints")
	if err != nil {
		return err
	}
	if err := c.Checkpoint(ctx, id, dir); err != nil {
		return err
	}
	d.mu.Lock()
	d.made[dir] = name
	d.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, runtimeFile), []byte(name+"\n"), 0o600); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return nil
}

// runtimeFile, in a checkpoint directory, names the driver that wrote it.
const runtimeFile = "lbb-runtime"

// Restore starts sandbox id from the checkpoint in dir. A sandbox a driver holds is restored
// by that driver; a new id (a fork) by the driver that wrote dir, or, when that is not known
// (a checkpoint from before a restart), by the one driver that can restore at all.
func (d *Driver) Restore(ctx context.Context, id, dir string) (runtime.Sandbox, error) {
	name, _, err := d.route(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		name, err = d.restorer(dir)
	}
	if err != nil {
		return nil, err
	}
	c, ok := d.drivers[name].(runtime.Checkpointer)
	if !ok {
		return nil, notSupported("checkpoints", id, name)
	}
	d.mu.Lock()
	if _, known := d.owner[id]; !known {
		d.owner[id] = name
	}
	d.mu.Unlock()
	sb, err := c.Restore(ctx, id, dir)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

func (d *Driver) restorer(dir string) (string, error) {
	d.mu.Lock()
	name, ok := d.made[dir]
	d.mu.Unlock()
	if ok {
		return name, nil
	}
	if b, err := os.ReadFile(filepath.Join(dir, runtimeFile)); err == nil {
		if name := strings.TrimSpace(string(b)); d.drivers[name] != nil {
			return name, nil
		}
	}
	var can []string
	for _, n := range d.names {
		if _, ok := d.drivers[n].(runtime.Checkpointer); ok {
			can = append(can, n)
		}
	}
	switch len(can) {
	case 1:
		return can[0], nil
	case 0:
		return "", errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported,
			"no runtime of this host (%v) restores checkpoints", d.names)
	}
	return "", errdefs.Conflict("checkpoint %s: which of the runtimes %v wrote it is not known", dir, can)
}

// route finds the driver that holds id: remembered from Create, else asked of each driver's
// List (a server restarted since it was made).
func (d *Driver) route(ctx context.Context, id string) (string, runtime.Driver, error) {
	d.mu.Lock()
	name, ok := d.owner[id]
	d.mu.Unlock()
	if ok {
		return name, d.drivers[name], nil
	}
	var errs []error
	for _, n := range d.names {
		ids, err := d.drivers[n].List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("runtime %s: %w", n, err))
			continue
		}
		if slices.Contains(ids, id) {
			d.mu.Lock()
			if prev, ok := d.owner[id]; ok {
				n = prev // a Create meanwhile
			} else {
				d.owner[id] = n
			}
			d.mu.Unlock()
			return n, d.drivers[n], nil
		}
	}
	if len(errs) > 0 {
		return "", nil, fmt.Errorf("finding the runtime of sandbox %s: %w", id, errors.Join(errs...))
	}
	return "", nil, errdefs.Wrap(errdefs.ClassNotFound, "", fmt.Errorf("sandbox %s: %w", id, runtime.ErrNotFound))
}

func (d *Driver) forget(id string) {
	d.mu.Lock()
	delete(d.owner, id)
	d.mu.Unlock()
}

func notSupported(what, id, name string) error {
	return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported,
		"%s: sandbox %s runs on %q, which does not support it", what, id, name)
}

// DiskFile answers the file of the sandbox's disk, when its driver keeps one
// (runtime.DiskFiler); else an errdefs not_supported error.
func (d *Driver) DiskFile(ctx context.Context, id string) (string, error) {
	_, f, err := ability[runtime.DiskFiler](ctx, d, id, "workspace archives")
	if err != nil {
		return "", err
	}
	return f.DiskFile(ctx, id)
}
