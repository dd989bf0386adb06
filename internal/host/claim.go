package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// Claim is a sandbox acquired ahead of its run: the control plane starts it while it makes
// the run's idempotency reservation durable, so that thawing a warm slot and binding its
// identity overlap that commit instead of following it. No code runs in a claimed sandbox
// until RunOnce is handed the claim; Cancel destroys it unused.
type Claim struct {
	done  chan struct{}
	lease *Lease
	err   error
	log   *slog.Logger
}

// Claim starts acquiring the sandbox spec will run in, in the background. The caller must
// either pass it to RunOnce (RunSpec.Claim) or Cancel it.
func (h *Host) Claim(ctx context.Context, spec RunSpec) *Claim {
	c := &Claim{done: make(chan struct{}), log: h.log.With("sandbox", spec.SandboxID)}
	go func() {
		defer close(c.done)
		defer timing.Start(ctx, "claim")()
		c.lease, c.err = h.provider.Acquire(WithLanguage(ctx, spec.Language), runtimeSpec(spec))
	}()
	return c
}

// wait answers the acquired lease, or why there is none.
func (c *Claim) wait(ctx context.Context) (*Lease, error) {
	select {
	case <-c.done:
		return c.lease, c.err
	case <-ctx.Done():
		go c.Cancel()
		return nil, ctx.Err()
	}
}

// Cancel destroys the claimed sandbox once it is acquired; it returns at once.
func (c *Claim) Cancel() {
	go func() {
		<-c.done
		if c.lease == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.lease.Release(ctx); err != nil {
			c.log.Error("destroying an unused claimed sandbox", "err", err)
		}
	}()
}

func runtimeSpec(spec RunSpec) runtime.Spec {
	return runtime.Spec{ID: spec.SandboxID, Image: spec.Image, Limits: spec.Limits, Runtime: spec.Runtime}
}
