package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Long-lived sandboxes (Level 3) are addressed by their record id in the driver: Stop keeps
// their disk and a later Start resumes the same workspace. A create may take a started
// sandbox from a warm pool (SandboxSpec.Warm, the provider's Handover): the pool names it,
// and the caller names its record after it (Live.ID), so that the driver id is still the
// record's id.

// SandboxSpec is a long-lived sandbox to start.
type SandboxSpec struct {
	ID     string
	Image  string
	Limits runtime.Limits
	// Runtime names the driver to create it on (runtime.Spec.Runtime); "" is the default
	// one. A resumed sandbox starts on the driver that holds it.
	Runtime string
	// Create makes the sandbox (its disk) first; without it Start resumes a stopped one.
	Create bool
	// Warm lets Create take a ready sandbox from the provider's warm pool (Handover) instead
	// of making one: it then has the pool's id, which Live.ID says, not ID. ID is used when
	// the pool has none ready.
	Warm bool
	// Files are put into the workspace once it runs (a template's Files; only with Create).
	Files []WorkspaceFile
}

// Live is a started long-lived sandbox.
type Live struct {
	ID        string
	Sandbox   runtime.Sandbox
	Agent     *agent.Client
	StartedAt time.Time
	Limits    runtime.Limits

	h *Host
}

// Handover is a Provider's optional ability (a warm pool's): hand a started sandbox over
// for good. The sandbox is the caller's from then on, under the id the provider chose
// (Lease.Sandbox.ID()); the caller stops, starts and destroys it through the driver. Release
// destroys it. Handover answers nil, nil when it has none ready for spec.
type Handover interface {
	Handover(ctx context.Context, spec runtime.Spec) (*Lease, error)
}

// StartSandbox creates (with spec.Create) and starts a sandbox and connects to its agent.
// A failure undoes what it did: a sandbox it created is destroyed, one it resumed is stopped
// again with its disk kept.
func (h *Host) StartSandbox(ctx context.Context, spec SandboxSpec) (_ *Live, err error) {
	if spec.Create && spec.Warm {
		if live, err := h.handover(ctx, spec); live != nil || err != nil {
			return live, err
		}
	}
	var client *agent.Client
	started := false
	defer func() {
		if err == nil {
			return
		}
		if client != nil {
			client.Close()
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		switch {
		case spec.Create:
			if derr := h.driver.Destroy(cctx, spec.ID); derr != nil {
				err = errors.Join(err, fmt.Errorf("destroying sandbox %s: %w", spec.ID, derr))
			}
		case started:
			if serr := h.driver.Stop(cctx, spec.ID); serr != nil {
				err = errors.Join(err, fmt.Errorf("stopping sandbox %s: %w", spec.ID, serr))
			}
		}
	}()
	if spec.Create {
		if err := h.driver.Create(ctx, liveSpec(spec)); err != nil {
			return nil, fmt.Errorf("creating sandbox: %w", err)
		}
	}
	sb, err := h.driver.Start(ctx, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	started = true
	at := time.Now()
	client, err = agent.NewClient(sb.Conn())
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	if err := client.Ping(ctx); err != nil {
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	if spec.Create {
		if err := WriteFiles(ctx, client, spec.Files); err != nil {
			return nil, err
		}
	}
	return &Live{ID: spec.ID, Sandbox: sb, Agent: client, StartedAt: at, Limits: spec.Limits, h: h}, nil
}

// handover takes a started sandbox from the provider's warm pool and writes spec.Files into
// it; nil, nil when the provider has none.
func (h *Host) handover(ctx context.Context, spec SandboxSpec) (*Live, error) {
	ho, ok := h.provider.(Handover)
	if !ok {
		return nil, nil
	}
	// A long-lived sandbox runs no pre-started interpreter: it takes a bare slot.
	lease, err := ho.Handover(WithLanguage(ctx, ""), liveSpec(spec))
	if err != nil || lease == nil {
		return nil, err
	}
	id := lease.Sandbox.ID()
	if err := WriteFiles(ctx, lease.Agent, spec.Files); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("sandbox %s: %w", id, err), lease.Release(cctx))
	}
	return &Live{ID: id, Sandbox: lease.Sandbox, Agent: lease.Agent, StartedAt: lease.StartedAt, Limits: spec.Limits, h: h}, nil
}

// liveSpec is what the driver is asked to create for a long-lived sandbox.
func liveSpec(spec SandboxSpec) runtime.Spec {
	return runtime.Spec{ID: spec.ID, Image: spec.Image, Limits: spec.Limits, Runtime: spec.Runtime}
}

// StopSandbox ends every process of a sandbox and keeps its disk. It works on a sandbox a
// previous server process started (a crash left it running).
func (h *Host) StopSandbox(ctx context.Context, id string) error {
	if err := h.driver.Stop(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("stopping sandbox %s: %w", id, err)
	}
	return nil
}

// DestroySandbox ends a sandbox and removes its disk; an unknown one is no error.
func (h *Host) DestroySandbox(ctx context.Context, id string) error {
	if err := h.driver.Destroy(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	return nil
}

// Close closes the channel to the agent (the sandbox runs on until stopped).
func (l *Live) Close() error { return l.Agent.Close() }

// Usage is what the sandbox used from its start until now: CPU time and reserved memory.
func (l *Live) Usage(ctx context.Context) store.Usage {
	st, err := l.Sandbox.Stats(ctx)
	if err != nil {
		st = runtime.Stats{}
	}
	return l.h.usage(st.CPUNanos, l.Limits, l.StartedAt, time.Now())
}

// ExecSpec is one command in a long-lived sandbox: a process (Argv), or with Run a call of
// run(input, config).
type ExecSpec struct {
	CommandID string
	Argv      []string
	Env       map[string]string
	Cwd       string
	// Stdin is streamed to the process until it returns EOF; nil is /dev/null.
	Stdin io.Reader
	Run   *agent.RunRequest
	// Timeout ends the command when it passes.
	Timeout time.Duration
	// Secrets are masked in everything the command's output, result and error carry.
	Secrets []string
	// Stdout and Stderr receive the (masked) output; the caller may follow them live. Exec
	// closes them when the command ends.
	Stdout, Stderr *output.Capture
	// Killed reports whether the caller signalled the command.
	Killed func() bool
	// Started is called once the process runs (or could not start): signals reach it.
	Started func()
}

// Exec runs one command in the sandbox and returns how it ended once it has. Cancelling ctx
// ends it (status killed).
func (l *Live) Exec(ctx context.Context, spec ExecSpec) Outcome {
	log := l.h.log.With("sandbox", l.ID, "command", spec.CommandID)
	e := execution{stdin: spec.Stdin, timeout: spec.Timeout, limits: l.Limits, killed: spec.Killed, started: spec.Started}
	if spec.Run != nil {
		r := *spec.Run
		r.ID, r.Env, r.Cwd, r.TimeoutMs = spec.CommandID, spec.Env, spec.Cwd, spec.Timeout.Milliseconds()
		e.run = &r
	} else {
		e.exec = &agent.ExecRequest{ID: spec.CommandID, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd, TimeoutMs: spec.Timeout.Milliseconds()}
	}
	return l.h.execute(ctx, l.Sandbox, l.Agent, e, spec.Stdout, spec.Stderr, spec.Secrets, log)
}

// Signal signals a running command's process group ("" is SIGKILL).
func (l *Live) Signal(ctx context.Context, commandID, signal string) error {
	return l.Agent.Signal(ctx, commandID, signal)
}
