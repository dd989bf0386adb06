package pool

import (
	"context"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// claimedSandbox is a slot as its lease shows it: its accounting starts at the claim, so
// that the CPU the pool spent building it (an interpreter importing pandas: most of a
// second) is not the claimant's. Peak memory cannot be reset and stays the slot's.
type claimedSandbox struct {
	runtime.Sandbox
	base runtime.Stats
}

func (c *claimedSandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	st, err := c.Sandbox.Stats(ctx)
	st.CPUNanos = sub(st.CPUNanos, c.base.CPUNanos)
	st.OOMKills = sub(st.OOMKills, c.base.OOMKills)
	return st, err
}

// Usage is Stats without the process count where the underlying sandbox reads that cheaper
// (runtime.Meter), its CPU likewise counted from the claim.
func (c *claimedSandbox) Usage(ctx context.Context) (runtime.Stats, error) {
	st, err := runtime.UsageOf(ctx, c.Sandbox)
	st.CPUNanos = sub(st.CPUNanos, c.base.CPUNanos)
	st.OOMKills = sub(st.OOMKills, c.base.OOMKills)
	return st, err
}

// InitPID is the underlying sandbox's, or 0 when its driver does not tell.
func (c *claimedSandbox) InitPID() int {
	if p, ok := c.Sandbox.(runtime.InitPIDer); ok {
		return p.InitPID()
	}
	return 0
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// initPIDer is runtime.InitPIDer, as the pool's tests name it.
type initPIDer = runtime.InitPIDer
