package mux

import (
	"context"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// SetCPUWeight weighs the sandbox's claim on CPU, when its driver can
// (runtime.Prioritizer); else an errdefs not_supported error.
func (d *Driver) SetCPUWeight(ctx context.Context, id string, weight int) error {
	name, drv, err := d.route(ctx, id)
	if err != nil {
		return err
	}
	p, ok := drv.(runtime.Prioritizer)
	if !ok {
		return notSupported("weighing CPU", id, name)
	}
	return p.SetCPUWeight(ctx, id, weight)
}
