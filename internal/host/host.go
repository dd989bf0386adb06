package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// Provider hands out started sandboxes whose agent answers. The cold provider creates and
// starts one per call; a warm pool hands out one it started before.
type Provider interface {
	Acquire(ctx context.Context, spec runtime.Spec) (*Lease, error)
}

type languageKey struct{}

// WithLanguage tells the Provider what a claim made with ctx will run ("python", "node",
// "shell"), so that a pool can hand out a sandbox with that interpreter already started.
func WithLanguage(ctx context.Context, language string) context.Context {
	return context.WithValue(ctx, languageKey{}, language)
}

// LanguageOf is what WithLanguage said.
func LanguageOf(ctx context.Context) (string, bool) {
	l, ok := ctx.Value(languageKey{}).(string)
	return l, ok
}

// Lease is one started sandbox, held until Release, which destroys it.
type Lease struct {
	Sandbox runtime.Sandbox
	Agent   *agent.Client
	// StartedAt is when the sandbox started (for a pooled one: before it was claimed).
	StartedAt time.Time

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
func (c *Cold) Acquire(ctx context.Context, spec runtime.Spec) (_ *Lease, err error) {
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

// Host runs commands in sandboxes.
type Host struct {
	driver   runtime.Driver
	provider Provider
	log      *slog.Logger
	// backstop is how long past a command's timeout the host waits for the agent to report it
	// before it destroys the sandbox itself.
	backstop time.Duration
}

// Options configure a Host.
type Options struct {
	Driver runtime.Driver
	// Provider hands out sandboxes; nil means a Cold provider on Driver.
	Provider Provider
	Log      *slog.Logger
}

// New returns a Host.
func New(o Options) *Host {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Provider == nil {
		o.Provider = &Cold{Driver: o.Driver, Log: o.Log}
	}
	return &Host{driver: o.Driver, provider: o.Provider, log: o.Log, backstop: 10 * time.Second}
}

// Driver returns the driver the host runs on.
func (h *Host) Driver() runtime.Driver { return h.driver }

// Reap destroys every sandbox the driver holds that keep does not claim, and returns their
// ids. A restarted server calls it so that nothing a crash left behind stays running.
func (h *Host) Reap(ctx context.Context, keep func(id string) bool) ([]string, error) {
	held, err := h.driver.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: listing sandboxes: %w", err)
	}
	var reaped []string
	var errs []error
	for _, id := range held {
		if keep != nil && keep(id) {
			continue
		}
		if err := h.driver.Destroy(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, fmt.Errorf("destroying %s: %w", id, err))
			continue
		}
		h.log.Info("reaped sandbox", "sandbox", id)
		reaped = append(reaped, id)
	}
	return reaped, errors.Join(errs...)
}

// RunOnce runs spec in a sandbox of its own and returns as soon as the command has ended;
// the sandbox is destroyed after that, off the caller's path, and Outcome.Ended says when.
// Cancelling ctx ends the run (status killed, the sandbox ended by server_shutdown).
func (h *Host) RunOnce(ctx context.Context, spec RunSpec) Outcome {
	log := h.log.With("sandbox", spec.SandboxID, "command", spec.CommandID)
	secrets := Secrets(spec.Env)
	t0 := time.Now()
	out, lease := h.run(ctx, spec, log, secrets)
	out.Error = MaskString(out.Error, secrets)
	ended := make(chan Ending, 1)
	out.Ended = ended
	if lease == nil {
		out.Usage = h.usage(out.cpuNanos, spec.Limits, out.SandboxStarted, time.Now())
		ended <- Ending{At: time.Now(), Usage: out.Usage}
		return out
	}
	end := out.CommandEnded
	if end.IsZero() {
		end = time.Now()
	}
	out.Usage = h.usage(out.cpuNanos, spec.Limits, out.SandboxStarted, end)
	go func() {
		if spec.ReleaseAfter != nil {
			select {
			case <-spec.ReleaseAfter:
			case <-time.After(time.Minute):
			}
		}
		t1 := time.Now()
		err := lease.Release(context.Background())
		if err != nil {
			log.Error("destroying sandbox", "err", err)
		}
		at := time.Now()
		ended <- Ending{At: at, Usage: h.usage(out.cpuNanos, spec.Limits, out.SandboxStarted, at), Err: err}
		log.Debug("run timings", "acquire_ms", ms(out.SandboxStarted.Sub(t0)), "command_ms", ms(out.CommandEnded.Sub(out.CommandStarted)),
			"release_ms", ms(at.Sub(t1)))
	}()
	return out
}

// run acquires a sandbox and runs the command in it; it answers the lease to release, or
// nil when no sandbox was acquired.
func (h *Host) run(ctx context.Context, spec RunSpec, log *slog.Logger, secrets []string) (out Outcome, _ *Lease) {
	out.EndReason = store.EndRunFinished
	fail := func(status, reason string, err error) Outcome {
		out.Status, out.EndReason, out.Err, out.Error = status, reason, err, err.Error()
		return out
	}
	var lease *Lease
	var err error
	if spec.Claim != nil {
		lease, err = spec.Claim.wait(ctx)
	} else {
		lease, err = h.provider.Acquire(WithLanguage(ctx, spec.Language), runtimeSpec(spec))
	}
	if err != nil {
		if ctx.Err() != nil {
			return fail(store.CommandKilled, store.EndServerShutdown, fmt.Errorf("the server stopped before the sandbox started: %w", err)), nil
		}
		return fail(store.CommandFailed, store.EndFailed, err), nil
	}
	out.SandboxStarted = lease.StartedAt
	if err := WriteFiles(ctx, lease.Agent, spec.Files); err != nil {
		if ctx.Err() != nil {
			return fail(store.CommandKilled, store.EndServerShutdown, fmt.Errorf("the server stopped before the run started: %w", err)), lease
		}
		return fail(store.CommandFailed, store.EndFailed, err), lease
	}
	stdoutCap, stderrCap := output.NewCapture(spec.HeadBytes, spec.TailBytes), output.NewCapture(spec.HeadBytes, spec.TailBytes)
	defer timing.Start(ctx, "run")()
	res := h.execute(ctx, lease.Sandbox, lease.Agent, execution{run: ptr(agentRun(spec)), timeout: spec.Timeout, limits: spec.Limits},
		stdoutCap, stderrCap, secrets, log)
	res.SandboxStarted, res.EndReason = out.SandboxStarted, out.EndReason
	if res.Err != nil && res.Status == store.CommandFailed {
		res.EndReason = store.EndFailed
	}
	if res.Status == store.CommandKilled && ctx.Err() != nil {
		res.EndReason = store.EndServerShutdown
		res.Error = "the server stopped while the run was running"
	}
	return res, lease
}

func ptr[T any](v T) *T { return &v }

// WriteFiles puts files into a sandbox's workspace, streaming each.
func WriteFiles(ctx context.Context, c *agent.Client, files []WorkspaceFile) error {
	for _, f := range files {
		r, err := f.Open(ctx)
		if err != nil {
			return fmt.Errorf("copying %s into the workspace: %w", f.Path, err)
		}
		err = c.WriteFile(ctx, f.Path, 0, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("copying %s into the workspace: %w", f.Path, err)
		}
	}
	return nil
}

// execution is one process or run in a started sandbox.
type execution struct {
	run     *agent.RunRequest
	exec    *agent.ExecRequest
	stdin   io.Reader
	timeout time.Duration
	limits  runtime.Limits
	// killed reports whether the caller signalled the command (its end is then killed).
	killed func() bool
	// started is called once the agent has started the process (or said it cannot).
	started func()
}

// execute runs one process or run on a started sandbox's agent, copies its output (masked)
// into the captures and classifies how it ended. It closes the captures.
func (h *Host) execute(ctx context.Context, sb runtime.Sandbox, ag *agent.Client, e execution, stdoutCap, stderrCap *output.Capture,
	secrets []string, log *slog.Logger) (out Outcome) {
	fail := func(status string, err error) Outcome {
		out.Status, out.Err, out.Error = status, err, err.Error()
		return out
	}
	defer func() {
		stdoutCap.Close()
		stderrCap.Close()
		out.Stdout, out.Stderr = kept(stdoutCap), kept(stderrCap)
		out.Error = MaskString(out.Error, secrets)
		out.Result = MaskJSON(out.Result, secrets)
	}()
	before, err := sb.Stats(ctx)
	if err != nil {
		log.Warn("reading sandbox stats", "err", err)
	}
	stdout, stderr := newMaskWriter(stdoutCap, secrets), newMaskWriter(stderrCap, secrets)

	// The agent enforces the timeout; the backstop covers an agent that cannot.
	runCtx, cancel := context.WithTimeout(ctx, e.timeout+h.backstop)
	defer cancel()
	out.CommandStarted = time.Now()
	var p *agent.Process
	if e.run != nil {
		p, err = ag.Run(runCtx, *e.run)
	} else {
		p, err = ag.Exec(runCtx, *e.exec, e.stdin)
	}
	if e.started != nil {
		e.started()
	}
	var exit agentExit
	if err == nil {
		exit, err = p.Wait(stdout, stderr)
	}
	out.CommandEnded = time.Now()
	flush(stdout)
	flush(stderr)

	statsCtx, cancelStats := context.WithTimeout(context.Background(), 5*time.Second)
	after, serr := sb.Stats(statsCtx)
	cancelStats()
	if serr != nil {
		log.Warn("reading sandbox stats", "err", serr)
	}
	out.cpuNanos = after.CPUNanos
	oom := serr == nil && after.OOMKills > before.OOMKills
	killed := e.killed != nil && e.killed()

	switch {
	case err != nil && ctx.Err() != nil:
		return fail(store.CommandKilled, fmt.Errorf("the command was ended before it finished: %w", context.Cause(ctx)))
	case err != nil && oom:
		// The kernel killed the sandbox's own init for memory: the command is what used it.
		out.Status, out.Error = store.CommandOOM, "the sandbox ran out of memory"
		return out
	case err != nil && runCtx.Err() != nil:
		out.Status, out.Error = store.CommandTimedOut, fmt.Sprintf("the command passed its timeout of %s", e.timeout)
		return out
	case err != nil:
		return fail(store.CommandFailed, fmt.Errorf("the sandbox broke off the command: %w", err))
	}
	out.OK, out.Result, out.Error, out.Signal = exit.OK && exit.ExitCode == 0, exit.Result, exit.Error, exit.Signal
	if e.run == nil {
		out.OK = exit.ExitCode == 0 && exit.StartError == ""
	}
	code := exit.ExitCode
	out.ExitCode = &code
	switch {
	case exit.StartError != "":
		out.Status, out.Error, out.ExitCode, out.OK = store.CommandFailed, exit.StartError, nil, false
	case exit.TimedOut:
		out.Status, out.OK = store.CommandTimedOut, false
		if out.Error == "" {
			out.Error = fmt.Sprintf("the command passed its timeout of %s", e.timeout)
		}
	case killed && exit.Signal != "":
		out.Status, out.OK = store.CommandKilled, false
		if out.Error == "" {
			out.Error = "killed by " + exit.Signal
		}
	case oom && (exit.Signal == "SIGKILL" || !out.OK):
		out.Status, out.OK = store.CommandOOM, false
		if out.Error == "" || exit.Signal == "SIGKILL" {
			out.Error = fmt.Sprintf("the command ran out of memory (limit %d MiB)", e.limits.MemoryMiB)
		}
	case exit.DiskFull && !out.OK:
		out.Status = store.CommandDiskFull
		if out.Error == "" {
			out.Error = fmt.Sprintf("the workspace disk is full (limit %d MiB)", e.limits.DiskMiB)
		}
	case out.OK:
		out.Status = store.CommandSucceeded
	default:
		out.Status = store.CommandFailed
	}
	return out
}

// usage is CPU time used, and memory reserved over the sandbox's life from start to end.
func (h *Host) usage(cpuNanos uint64, l runtime.Limits, start, end time.Time) store.Usage {
	u := store.Usage{VCPUMs: float64(cpuNanos) / 1e6}
	if !start.IsZero() {
		u.GiBMs = float64(l.MemoryMiB) / 1024 * float64(end.Sub(start).Milliseconds())
	}
	return u
}

func kept(c *output.Capture) store.Output {
	return store.Output{Head: c.Head(), Tail: c.Tail(), Bytes: c.Bytes()}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
