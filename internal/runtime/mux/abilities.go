package mux

import (
	"context"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// ability answers the driver of sandbox id as an A (an optional ability, such as
// runtime.Freezer), and its name; an errdefs not_supported error when it is not one.
func ability[A any](ctx context.Context, d *Driver, id, what string) (string, A, error) {
	var zero A
	name, drv, err := d.route(ctx, id)
	if err != nil {
		return name, zero, err
	}
	a, ok := drv.(A)
	if !ok {
		return name, zero, notSupported(what, id, name)
	}
	return name, a, nil
}

// Freeze parks the sandbox's processes, when its driver can (runtime.Freezer); else an
// errdefs not_supported error.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	_, f, err := ability[runtime.Freezer](ctx, d, id, "freezing")
	if err != nil {
		return err
	}
	return f.Freeze(ctx, id)
}

// Thaw wakes a frozen sandbox (see Freeze).
func (d *Driver) Thaw(ctx context.Context, id string) error {
	_, f, err := ability[runtime.Freezer](ctx, d, id, "thawing")
	if err != nil {
		return err
	}
	return f.Thaw(ctx, id)
}

// SetCPUWeight weighs the sandbox's claim on CPU, when its driver can (runtime.Prioritizer);
// else an errdefs not_supported error.
func (d *Driver) SetCPUWeight(ctx context.Context, id string, weight int) error {
	_, p, err := ability[runtime.Prioritizer](ctx, d, id, "weighing CPU")
	if err != nil {
		return err
	}
	return p.SetCPUWeight(ctx, id, weight)
}

// SetHostname renames the sandbox, when its driver can (runtime.Renamer); else an errdefs
// not_supported error.
func (d *Driver) SetHostname(ctx context.Context, id, name string) error {
	_, r, err := ability[runtime.Renamer](ctx, d, id, "renaming")
	if err != nil {
		return err
	}
	return r.SetHostname(ctx, id, name)
}

// ForkInterpreter forks a pre-started interpreter into the sandbox from its driver's fork
// server, when its driver has one (runtime.InterpreterForker); else an errdefs
// not_supported error.
func (d *Driver) ForkInterpreter(ctx context.Context, id string, req runtime.ForkRequest) error {
	_, f, err := ability[runtime.InterpreterForker](ctx, d, id, "forking an interpreter into")
	if err != nil {
		return err
	}
	return f.ForkInterpreter(ctx, id, req)
}
