package hostagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// oneCall is the sandbox of a one-call run: claimed (acquiring in the background), then run
// in, then held until Release destroys it.
type oneCall struct {
	id     string
	limits runtime.Limits
	log    *slog.Logger
	// done is closed once the sandbox is acquired (lease) or failed to be (err).
	done  chan struct{}
	lease *pool.Lease
	err   error

	// set by Run
	ran      bool
	started  time.Time
	cpuNanos uint64
	release  *time.Timer
}

// Claim starts acquiring req's sandbox in the background.
func (h *Local) Claim(ctx context.Context, req RunRequest) error {
	oc := h.newOneCall(req)
	h.mu.Lock()
	if _, ok := h.runs[req.SandboxID]; ok {
		h.mu.Unlock()
		return nil
	}
	h.runs[req.SandboxID] = oc
	h.mu.Unlock()
	go func() {
		defer close(oc.done)
		defer timing.Start(ctx, "claim")()
		var preq pool.Request
		if preq, oc.err = h.poolRequest(req); oc.err == nil {
			oc.lease, oc.err = h.provider.Acquire(ctx, preq)
		}
	}()
	return nil
}

func (h *Local) newOneCall(req RunRequest) *oneCall {
	return &oneCall{id: req.SandboxID, limits: req.Limits, done: make(chan struct{}), log: h.log.With("sandbox", req.SandboxID)}
}

func (h *Local) poolRequest(req RunRequest) (pool.Request, error) {
	// A layer's image matches no slot of the base's keys: its runs ask the pool for keys of
	// their own (warmLayer), and start cold until demand has a slot built.
	image, layer, err := h.image(req.Layer, req.Runtime)
	preq := pool.Request{Spec: runtime.Spec{ID: req.SandboxID, Image: image, Layer: layer, Limits: req.Limits, Runtime: req.Runtime},
		Language: req.Language, Flavour: pool.FlavourFor(req.Language, req.Code)}
	if err == nil && req.Layer != "" {
		h.warmLayer(req.Layer, preq)
	}
	return preq, err
}

// Unclaim destroys a claimed sandbox once it is acquired; it returns at once.
func (h *Local) Unclaim(ctx context.Context, sandboxID string) error {
	h.mu.Lock()
	oc := h.runs[sandboxID]
	delete(h.runs, sandboxID)
	h.mu.Unlock()
	if oc == nil {
		return nil
	}
	go func() {
		<-oc.done
		if oc.lease == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := oc.lease.Release(ctx); err != nil {
			oc.log.Error("destroying an unused claimed sandbox", "err", err)
		}
	}()
	return nil
}

// Run runs req in its claimed sandbox, or acquires one, and answers once the command has
// ended. Cancelling ctx ends the run (status killed, end reason server_shutdown). The
// sandbox is held until Release (at most a minute).
func (h *Local) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	log := h.log.With("sandbox", req.SandboxID, "command", req.CommandID)
	secrets := Secrets(req.Env)
	h.mu.Lock()
	oc := h.runs[req.SandboxID]
	if oc == nil {
		oc = h.newOneCall(req)
		h.runs[req.SandboxID] = oc
		h.mu.Unlock()
		func() {
			defer close(oc.done)
			var preq pool.Request
			if preq, oc.err = h.poolRequest(req); oc.err == nil {
				oc.lease, oc.err = h.provider.Acquire(ctx, preq)
			}
		}()
	} else {
		h.mu.Unlock()
	}
	res := h.runIn(ctx, oc, req, log, secrets)
	res.Error = MaskString(res.Error, secrets)
	res.Infrastructure = MaskString(res.Infrastructure, secrets)
	h.mu.Lock()
	oc.ran = true
	oc.started, oc.cpuNanos = res.SandboxStarted, res.cpuNanos
	oc.release = time.AfterFunc(time.Minute, func() { h.Release(context.Background(), req.SandboxID) })
	h.mu.Unlock()
	end := res.Ended
	if end.IsZero() {
		end = time.Now()
	}
	res.Usage = usage(res.cpuNanos, req.Limits, res.SandboxStarted, end)
	res.Usage.Egress = res.Egress
	return res.RunResult, nil
}

type runOutcome struct {
	RunResult
	cpuNanos uint64
}

// runIn waits for the sandbox and runs the command in it.
func (h *Local) runIn(ctx context.Context, oc *oneCall, req RunRequest, log *slog.Logger, secrets []string) (out runOutcome) {
	out.EndReason = store.EndRunFinished
	fail := func(status, reason string, err error) runOutcome {
		out.Status, out.EndReason, out.Infrastructure, out.Error = status, reason, err.Error(), err.Error()
		return out
	}
	var err error
	select {
	case <-oc.done:
		err = oc.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fail(store.CommandKilled, store.EndServerShutdown, fmt.Errorf("the server stopped before the sandbox started: %w", err))
		}
		return fail(store.CommandFailed, store.EndFailed, err)
	}
	lease := oc.lease
	out.SandboxStarted = lease.StartedAt
	if err := h.writeFiles(ctx, lease.Agent, req.Files); err != nil {
		if ctx.Err() != nil {
			return fail(store.CommandKilled, store.EndServerShutdown, fmt.Errorf("the server stopped before the run started: %w", err))
		}
		return fail(store.CommandFailed, store.EndFailed, err)
	}
	esb, err := h.newEgress(req.SandboxID, req.Egress)
	if err != nil {
		return fail(store.CommandFailed, store.EndFailed, err)
	}
	ectx, closeEgress := context.WithCancel(ctx)
	defer closeEgress()
	if _, err := h.openEgress(ectx, lease.Agent, esb, req.Egress); err != nil {
		return fail(store.CommandFailed, store.EndFailed, err)
	}
	stdoutCap, stderrCap := output.NewCapture(req.HeadBytes, req.TailBytes), output.NewCapture(req.HeadBytes, req.TailBytes)
	defer timing.Start(ctx, "run")()
	run := agent.RunRequest{ID: req.CommandID, Language: req.Language, Code: req.Code, Script: req.Script, Input: req.Input,
		Config: req.Config, Env: req.Env, TimeoutMs: req.Timeout.Milliseconds()}
	res := h.execute(ctx, lease.Sandbox, lease.Agent, execution{run: &run, timeout: req.Timeout, limits: req.Limits, egress: esb},
		stdoutCap, stderrCap, secrets, log)
	out.CommandEnd, out.cpuNanos = res.CommandEnd, res.cpuNanos
	out.CommandUsage = usage(res.cmdCPUNanos, req.Limits, res.Started, res.Ended)
	if res.err != nil && res.Status == store.CommandFailed {
		out.EndReason = store.EndFailed
	}
	if !out.OK && out.EndReason == store.EndRunFinished && out.Egress != nil && out.Egress.QuotaExceeded {
		out.EndReason = store.EndEgressQuota
	}
	if res.Status == store.CommandKilled && ctx.Err() != nil {
		out.EndReason = store.EndServerShutdown
		out.Error = "the server stopped while the run was running"
	}
	return out
}

// Release destroys a one-call run's sandbox and says how its life ended.
func (h *Local) Release(ctx context.Context, sandboxID string) (Ending, error) {
	h.mu.Lock()
	oc := h.runs[sandboxID]
	delete(h.runs, sandboxID)
	h.mu.Unlock()
	if oc == nil {
		return Ending{At: time.Now()}, nil
	}
	if oc.release != nil {
		oc.release.Stop()
	}
	<-oc.done
	var e Ending
	if oc.lease != nil {
		if err := oc.lease.Release(ctx); err != nil {
			oc.log.Error("destroying sandbox", "err", err)
			e.Error = err.Error()
		}
	}
	e.At = time.Now()
	e.Usage = usage(oc.cpuNanos, oc.limits, oc.started, e.At)
	return e, nil
}

// writeFiles puts template Files into a sandbox's workspace, streaming each from the blobs.
func (h *Local) writeFiles(ctx context.Context, c *agent.Client, files []File) error {
	for _, f := range files {
		if err := h.writeFile(ctx, c, f); err != nil {
			return fmt.Errorf("copying %s into the workspace: %w", f.Path, err)
		}
	}
	return nil
}

func (h *Local) writeFile(ctx context.Context, c *agent.Client, f File) error {
	if h.blobs == nil {
		return fmt.Errorf("this host has no blob store")
	}
	r, _, err := h.blobs.Open(ctx, f.SHA256)
	if err != nil {
		return err
	}
	defer r.Close()
	return c.WriteFile(ctx, f.Path, 0, r)
}

// execute runs one process or run on a started sandbox's agent, copies its output (masked)
// into the captures and classifies how it ended. It closes the captures.
func (h *Local) execute(ctx context.Context, sb runtime.Sandbox, ag *agent.Client, e execution, stdoutCap, stderrCap *output.Capture,
	secrets []string, log *slog.Logger) (out outcome) {
	var egressBefore store.EgressUsage
	if e.egress != nil {
		egressBefore = e.egress.Usage()
	}
	defer func() {
		stdoutCap.Close()
		stderrCap.Close()
		if e.hold != nil {
			e.hold.Close()
		}
		out.Stdout, out.Stderr = kept(stdoutCap), kept(stderrCap)
		out.Egress = lifeEgress(e.egress, egressBefore)
		out.Error = MaskString(out.Error, secrets)
		out.Result = MaskJSON(out.Result, secrets)
		if out.err != nil {
			out.Infrastructure = MaskString(out.err.Error(), secrets)
		}
	}()
	// Usage, not Stats: the process count is not metered, and on gvisor it costs a runsc
	// process on each side of the run.
	tctx := timing.With(ctx, e.timings)
	endStats := timing.Start(tctx, "stats")
	before, berr := runtime.UsageOf(ctx, sb)
	endStats()
	if berr != nil {
		log.Warn("reading sandbox stats", "err", berr)
	}
	var outW, errW io.Writer = stdoutCap, stderrCap
	if e.hold != nil {
		// The capture first: followers and the record see the bytes while the hold waits.
		outW, errW = io.MultiWriter(stdoutCap, e.hold.Writer(output.Stdout)), io.MultiWriter(stderrCap, e.hold.Writer(output.Stderr))
	}
	stdout, stderr := newMaskWriter(outW, secrets), newMaskWriter(errW, secrets)

	// The agent enforces the timeout; the backstop covers an agent that cannot.
	// Its clock stops while the sandbox is paused, as the agent's does.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	backstops := e.backstops
	if backstops == nil {
		backstops = &agent.Deadlines{}
	}
	defer backstops.Stop(backstops.Start(e.timeout+h.backstop, cancel))
	if e.hold != nil {
		// A sandbox that stops, or a command past its backstop, waits for no reader; what is
		// held stays for the reader (LetGo, not Release: output is never lost).
		defer context.AfterFunc(runCtx, e.hold.LetGo)()
	}
	out.Started = time.Now()
	// agent: from the request to the guest agent until it says the process runs (or could
	// not start).
	endAgent := timing.Start(tctx, "agent")
	var p *agent.Process
	var err error
	switch {
	case e.kernel != nil:
	case e.attachTo != "":
		p, err = ag.Attach(runCtx, e.attachTo, agent.AttachRequest{FromNow: true}, e.stdin)
	case e.run != nil:
		p, err = ag.Run(runCtx, *e.run)
	default:
		p, err = ag.Exec(runCtx, *e.exec, e.stdin)
	}
	endAgent()
	if e.started != nil {
		e.started()
	}
	var exit agent.Exit
	if err == nil {
		// Counted as they come from the agent: an attach after a move says where it is.
		cout, cerr := &countingWriter{stdout, new(atomic.Int64)}, &countingWriter{stderr, new(atomic.Int64)}
		for {
			if p == nil {
				exit, err = e.kernel.Wait(cout, cerr)
			} else {
				exit, err = p.Wait(cout, cerr)
			}
			if err == nil || e.reattach == nil || runCtx.Err() != nil {
				break
			}
			next, stdin := e.reattach(runCtx)
			if next == nil {
				break
			}
			p, err = next.Attach(runCtx, e.procID(), agent.AttachRequest{Stdout: cout.n.Load(), Stderr: cerr.n.Load()}, stdin)
			if err != nil {
				err = fmt.Errorf("attaching to the command's stream after a snapshot: %w", err)
				break
			}
			log.Debug("the command's stream moved to the sandbox's new channel", "stdout", cout.n.Load(), "stderr", cerr.n.Load())
		}
	}
	out.Ended = time.Now()
	flush(stdout)
	flush(stderr)

	statsCtx, cancelStats := context.WithTimeout(context.Background(), 5*time.Second)
	endStats = timing.Start(tctx, "stats")
	after, serr := runtime.UsageOf(statsCtx, sb)
	endStats()
	cancelStats()
	if serr != nil {
		log.Warn("reading sandbox stats", "err", serr)
	}
	out.cpuNanos = after.CPUNanos
	if serr == nil && after.CPUNanos >= before.CPUNanos {
		out.cmdCPUNanos = after.CPUNanos - before.CPUNanos
		if berr == nil {
			cpu := float64(out.cmdCPUNanos) / 1e6
			out.VCPUMs = &cpu
		}
	}
	oom := serr == nil && after.OOMKills > before.OOMKills
	killed := e.killed != nil && e.killed()

	switch {
	case err != nil && ctx.Err() != nil:
		return out.fail(store.CommandKilled, fmt.Errorf("the command was ended before it finished: %w", context.Cause(ctx)))
	case err != nil && oom:
		// The kernel killed the sandbox's own init for memory: the command is what used it.
		out.Status, out.Error = store.CommandOOM, "the sandbox ran out of memory"
		return out
	case err != nil && runCtx.Err() != nil:
		out.Status, out.Error = store.CommandTimedOut, fmt.Sprintf("the command passed its timeout of %s", e.timeout)
		return out
	case err != nil:
		return out.fail(store.CommandFailed, fmt.Errorf("the sandbox broke off the command: %w", err))
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
func usage(cpuNanos uint64, l runtime.Limits, start, end time.Time) store.Usage {
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
