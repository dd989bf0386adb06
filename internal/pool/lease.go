package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// Request is a claim: the sandbox to start and what it will run. Language is
// agent.LangPython or agent.LangNode (or an alias) for a slot with that interpreter
// pre-started; anything else ("", shell) takes a bare slot.
type Request struct {
	Spec     runtime.Spec
	Language string
	// Kernel names the kernel (Key.Kernel) a long-lived sandbox wants running (Handover):
	// a slot of its key first, then a bare one (whose Lease has no Kernel).
	Kernel string
	// Flavour is the flavour of slot the code runs best in (FlavourFor): a hint only.
	Flavour string
}

// Provider hands out started sandboxes whose agent answers. Cold creates and starts one per
// call; a Pool hands out one it started before.
type Provider interface {
	Acquire(ctx context.Context, req Request) (*Lease, error)
}

// Lease is one started sandbox, held until Release, which destroys it.
type Lease struct {
	Sandbox runtime.Sandbox
	Agent   *agent.Client
	// StartedAt is when the sandbox started (for a pooled one: its claim).
	StartedAt time.Time
	// Kernel is the kernel the slot runs for its claimant (Request.Kernel), or nil.
	Kernel *Running

	once    sync.Once
	release func(ctx context.Context) error
	err     error
}

// NewLease makes a lease whose Release calls release once.
func NewLease(sb runtime.Sandbox, c *agent.Client, startedAt time.Time, release func(ctx context.Context) error) *Lease {
	return &Lease{Sandbox: sb, Agent: c, StartedAt: startedAt, release: release}
}

// Release destroys the sandbox; calling it again returns the first result.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() { l.err = l.release(ctx) })
	return l.err
}

// Cold is the Provider without a pool: each Acquire creates and starts a sandbox.
type Cold struct {
	Driver runtime.Driver
	Log    *slog.Logger
}

// Acquire creates, starts and connects to a sandbox; a failure at any step destroys what the
// steps before made.
func (c *Cold) Acquire(ctx context.Context, req Request) (_ *Lease, err error) {
	spec := req.Spec
	destroy := func(ctx context.Context) error {
		if err := c.Driver.Destroy(ctx, spec.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("destroying sandbox %s: %w", spec.ID, err)
		}
		return nil
	}
	var client *agent.Client
	defer func() {
		if err != nil {
			if client != nil {
				client.Close()
			}
			err = errors.Join(err, destroy(context.Background()))
		}
	}()
	if err := c.Driver.Create(ctx, spec); err != nil {
		return nil, fmt.Errorf("creating sandbox: %w", err)
	}
	sb, err := c.Driver.Start(ctx, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	started := time.Now()
	client, err = agent.NewClient(sb.Conn())
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	if err := client.Ping(ctx); err != nil {
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	return NewLease(sb, client, started, func(ctx context.Context) error {
		return errors.Join(client.Close(), destroy(ctx))
	}), nil
}
