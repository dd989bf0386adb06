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
// their disk and a later Start resumes the same workspace, which a pooled slot (an id of its
// own, destroyed on release) cannot do. They start cold.

// SandboxSpec is a long-lived sandbox to start.
type SandboxSpec struct {
	ID     string
	Image  string
	Limits runtime.Limits
	// Create makes the sandbox (its disk) first; without it Start resumes a stopped one.
	Create bool
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

// StartSandbox creates (with spec.Create) and starts a sandbox and connects to its agent.
// A failure undoes what it did: a sandbox it created is destroyed, one it resumed is stopped
// again with its disk kept.
func (h *Host) StartSandbox(ctx context.Context, spec SandboxSpec) (_ *Live, err error) {
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
		if err := h.driver.Create(ctx, runtime.Spec{ID: spec.ID, Image: spec.Image, Limits: spec.Limits}); err != nil {
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
