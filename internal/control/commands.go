package control

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"

	"github.com/littlebigbrain/lbb/internal/bases"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// ExecRequest is the body of POST /v1/sandboxes/{id}/commands.
type ExecRequest struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	// Stdin (text) or StdinBase64 (bytes) is the process's stdin; then end of file, unless
	// StdinOpen keeps it open for POST /v1/commands/{id}/stdin.
	Stdin       *string `json:"stdin,omitempty"`
	StdinBase64 string  `json:"stdin_base64,omitempty"`
	StdinOpen   bool    `json:"stdin_open,omitempty"`
	// WaitMs is how long the answer waits for the process to end (default 0: at once).
	WaitMs    *int64 `json:"wait_ms,omitempty"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	// Stream answers at once and holds the output, from its first byte, for this caller
	// (ReadHeld): the API streams it as the answer.
	Stream bool `json:"stream,omitempty"`
}

// RunInRequest is the body of POST /v1/sandboxes/{id}/run: run(input, config) in an
// existing sandbox, with its workspace as the working directory.
type RunInRequest struct {
	RunBody
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	WaitMs    *int64 `json:"wait_ms,omitempty"`
}

// Exec starts a process in a running sandbox (at most once for (graph, idemKey)) and
// answers its record: 200 when it ended within wait, else 202 with it running.
func (s *Service) Exec(ctx context.Context, c Caller, sandboxID string, req ExecRequest, idemKey, reqHash string) (Response, error) {
	// Without wait_ms a process answers at once: commands often run in the background. A
	// streamed one answers at once too; its output is the rest of the answer.
	if req.WaitMs == nil || req.Stream {
		req.WaitMs = new(int64)
	}
	wait, err := s.commandWait(req.WaitMs, req.TimeoutMs)
	if err != nil {
		return Response{}, err
	}
	if r, done, err := s.replayCommand(ctx, c, idemKey, reqHash, wait); done || err != nil {
		return r, err
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return Response{}, errdefs.InvalidArgument("argv needs at least the program to run, e.g. [\"python\", \"main.py\"]")
	}
	if err := validEnv(req.Env); err != nil {
		return Response{}, err
	}
	var stdin []byte
	switch {
	case req.Stdin != nil && req.StdinBase64 != "":
		return Response{}, errdefs.InvalidArgument("give stdin or stdin_base64, not both")
	case req.Stdin != nil:
		stdin = []byte(*req.Stdin)
	case req.StdinBase64 != "":
		if stdin, err = base64.StdEncoding.DecodeString(req.StdinBase64); err != nil {
			return Response{}, errdefs.InvalidArgument("stdin_base64 is not base64: %v", err)
		}
	}
	timeout, err := s.timeout(0, req.TimeoutMs)
	if err != nil {
		return Response{}, err
	}
	cmd := store.Command{ID: ids.New(ids.Command), Graph: c.Graph, SandboxID: sandboxID, Kind: store.KindProcess,
		Argv: req.Argv, Cwd: req.Cwd, StdinBytes: int64(len(stdin)), EnvNames: sortedKeys(req.Env),
		TimeoutMs: timeout.Milliseconds(), Status: store.CommandRunning, IdempotencyKey: idemKey,
		Origin: c.origin(nil)}
	spec := hostagent.ExecRequest{Argv: req.Argv, Cwd: req.Cwd, Timeout: timeout, Env: req.Env, StdinOpen: req.StdinOpen, Hold: req.Stream}
	if len(stdin) > 0 || req.Stdin != nil {
		spec.Stdin = append([]byte{}, stdin...)
	}
	return s.startCommand(ctx, c, sandboxID, cmd, spec, RouteExec, idemKey, reqHash, wait)
}

// RunIn calls run(input, config) in a running sandbox, next to its files. It answers like a
// one-call run.
func (s *Service) RunIn(ctx context.Context, c Caller, sandboxID string, req RunInRequest, idemKey, reqHash string) (Response, error) {
	wait, err := s.commandWait(req.WaitMs, req.TimeoutMs)
	if err != nil {
		return Response{}, err
	}
	if r, done, err := s.replayCommand(ctx, c, idemKey, reqHash, wait); done || err != nil {
		return r, err
	}
	sb, err := s.st.GetSandbox(ctx, c.Graph, sandboxID)
	if err != nil {
		return Response{}, err
	}
	r := req.RunBody
	if r.Egress != nil {
		return Response{}, errdefs.InvalidArgument("egress is the sandbox's, set when it is created")
	}
	if r.Code != "" && r.Template != "" {
		return Response{}, errdefs.InvalidArgument("run takes code or template, not both")
	}
	code, tplTimeout := r.Code, int64(0)
	var tplConfig json.RawMessage
	var ref *store.TemplateRef
	baseName := firstNonEmpty(r.Base, r.Language, sb.Base)
	if r.Template != "" {
		t, err := s.resolveTemplate(ctx, c.Graph, r.Template)
		if err != nil {
			return Response{}, err
		}
		if t.Image != nil && t.Layer != sb.Layer {
			return Response{}, errdefs.InvalidArgument("template %s@%d carries its own image; run it in a sandbox created from it, or as a one-call run", t.Name, t.Version)
		}
		code, tplConfig, tplTimeout, baseName = t.Code, t.Config, t.TimeoutMs, t.Base
		ref = &store.TemplateRef{ID: t.ID, Name: t.Name, Version: t.Version}
	}
	base, ok := bases.Lookup(baseName)
	if !ok {
		return Response{}, errdefs.InvalidArgument("unknown base %q: want lbb/python, lbb/node or lbb/shell (or language python, node or shell)", baseName)
	}
	if code == "" {
		return Response{}, errdefs.InvalidArgument("run needs code, or a template that has code")
	}
	input, err := jsonValue("input", r.Input)
	if err != nil {
		return Response{}, err
	}
	callConfig, err := jsonValue("config", r.Config)
	if err != nil {
		return Response{}, err
	}
	config, err := mergeConfig(tplConfig, callConfig)
	if err != nil {
		return Response{}, err
	}
	if err := validEnv(r.Env); err != nil {
		return Response{}, err
	}
	timeout, err := s.timeout(tplTimeout, req.TimeoutMs)
	if err != nil {
		return Response{}, err
	}
	cmd := store.Command{ID: ids.New(ids.Command), Graph: c.Graph, SandboxID: sandboxID, Kind: store.KindRun,
		Language: base.Language, Code: code, Input: input, Config: config, Template: ref, EnvNames: sortedKeys(r.Env),
		TimeoutMs: timeout.Milliseconds(), Status: store.CommandRunning, IdempotencyKey: idemKey,
		Origin: c.origin(nil)}
	spec := hostagent.ExecRequest{Run: &hostagent.RunCall{Language: base.Language, Code: code, Input: input, Config: config},
		Timeout: timeout, Env: r.Env}
	return s.startCommand(ctx, c, sandboxID, cmd, spec, RouteRunIn, idemKey, reqHash, wait)
}

// commandWait is how long a call that starts a command waits for it: wait_ms, or without it
// (a run) the command's timeout and 30 s more, within the server's cap.
func (s *Service) commandWait(waitMs *int64, timeoutMs int64) (time.Duration, error) {
	if waitMs != nil {
		return s.waitFor(waitMs)
	}
	t := s.cfg.DefaultTimeout
	if timeoutMs > 0 {
		t = time.Duration(timeoutMs) * time.Millisecond
	}
	return min(t+30*time.Second, s.cfg.MaxWait), nil
}

// replayCommand answers a call whose key is taken: done says it answered (or failed).
func (s *Service) replayCommand(ctx context.Context, c Caller, idemKey, reqHash string, wait time.Duration) (Response, bool, error) {
	if err := idempotency.Require(idemKey); err != nil {
		return Response{}, true, err
	}
	r, err := s.st.GetIdempotency(ctx, c.Graph, idemKey)
	if errdefs.IsNotFound(err) {
		return Response{}, false, nil
	} else if err != nil {
		return Response{}, true, err
	}
	resp, err := s.replay(ctx, c, r, reqHash, wait)
	return resp, true, err
}

// startCommand reserves the key and the command record, starts the command on the running
// sandbox and waits up to wait for it.
func (s *Service) startCommand(ctx context.Context, c Caller, sandboxID string, cmd store.Command, spec hostagent.ExecRequest,
	route, idemKey, reqHash string, wait time.Duration) (Response, error) {
	sb, hs, err := s.sandboxFor(ctx, c.Graph, sandboxID)
	if err != nil {
		return Response{}, err
	}
	if sb.OneCall {
		return Response{}, errdefs.Conflict("sandbox %s is a one-call run's; create a sandbox to run commands in", sandboxID)
	}
	if hs == nil || sb.Status != store.SandboxRunning {
		return Response{}, errdefs.Conflict("sandbox %s is %s; commands run in a running sandbox (resume a stopped one)", sandboxID, sb.Status)
	}
	if err := s.chargeRun(ctx, c.Key); err != nil {
		return Response{}, err
	}
	allow, err := s.chargeBudgets(ctx, c, cmd.Origin)
	if err != nil {
		return Response{}, err
	}
	if err := s.begin(); err != nil {
		s.uncharge(ctx, c, cmd.Origin)
		return Response{}, err
	}
	now := s.now()
	cmd.CreatedAt, cmd.StartedAt = now, &now
	endReserve := timing.Start(ctx, "reserve")
	resp, replayed, err := s.reserveCommand(ctx, c, cmd, route, idemKey, reqHash, wait)
	endReserve()
	if err != nil || replayed {
		s.runs.Done()
		s.uncharge(ctx, c, cmd.Origin)
		return resp, err
	}

	spec.SandboxID, spec.CommandID = sandboxID, cmd.ID
	spec.HeadBytes, spec.TailBytes = s.cfg.OutputHeadBytes, s.cfg.OutputTailBytes
	inf := &inflight{done: make(chan struct{}), sandbox: sandboxID}
	s.mu.Lock()
	s.inflight[cmd.ID] = inf
	s.mu.Unlock()
	s.metrics.running.Inc()
	audit, tm := pendingAudit(ctx), timing.From(ctx)
	rctx := timing.With(context.Background(), tm)
	endRun := timing.Start(rctx, "run")
	// Answer once the process runs, so that a kill or stdin that follows reaches it.
	var end *hostagent.CommandEnd
	// What the sandbox had used when the command started, for a budget's watch: the
	// command's usage is what it used while the command ran (the host measures that,
	// CommandEnd.VCPUMs, and this is read only for a budget).
	var base store.Usage
	if allow.limited() {
		if base, err = s.host.Usage(ctx, sandboxID); err != nil {
			base = store.Usage{}
		}
	}
	endStart := timing.Start(rctx, "start")
	err = s.host.Exec(ctx, spec)
	endStart()
	if err != nil {
		t := time.Now()
		end = &hostagent.CommandEnd{Status: store.CommandFailed, Error: err.Error(), Infrastructure: err.Error(), Started: t, Ended: t}
	}
	go func() {
		defer s.runs.Done()
		s.runCommand(rctx, cmd, end, inf, audit, endRun, meterFrom{allow: allow, base: base, memoryMiB: sb.Limits.MemoryMiB})
	}()
	return s.await(ctx, c.Graph, cmd.ID, wait, inf)
}

// reserveCommand writes cmd's record and reserves its key in one transaction; replayed says
// the key was taken (by this call's earlier try, or a concurrent one) and resp is its answer.
func (s *Service) reserveCommand(ctx context.Context, c Caller, cmd store.Command, route, idemKey, reqHash string,
	wait time.Duration) (resp Response, replayed bool, err error) {
	var existing *store.Idempotency
	err = s.st.WithTx(ctx, func(q store.Queries) error {
		r, err := q.GetIdempotency(ctx, c.Graph, idemKey)
		if err == nil {
			existing = &r
			return nil
		} else if !errdefs.IsNotFound(err) {
			return err
		}
		if err := q.CreateCommand(ctx, cmd); err != nil {
			return err
		}
		return q.CreateIdempotency(ctx, store.Idempotency{Graph: c.Graph, Key: idemKey, Route: route, RequestHash: reqHash,
			State: store.IdempotencyRunning, CommandID: cmd.ID, SandboxID: cmd.SandboxID, CreatedAt: *cmd.StartedAt})
	})
	if err != nil {
		if errdefs.IsConflict(err) {
			// Another call took the key between our read and insert: answer as its replay.
			if r, gerr := s.st.GetIdempotency(ctx, c.Graph, idemKey); gerr == nil {
				resp, err = s.replay(ctx, c, r, reqHash, wait)
				return resp, true, err
			}
		}
		return Response{}, false, err
	}
	if existing != nil {
		resp, err = s.replay(ctx, c, *existing, reqHash, wait)
		return resp, true, err
	}
	return Response{}, false, nil
}

// runCommand waits for a command's end and records it. The call's audit entry, when still
// pending, is written with the end (one commit). A command still running when the server
// ends its runs is killed.
func (s *Service) runCommand(ctx context.Context, cmd store.Command, end *hostagent.CommandEnd, inf *inflight, audit *PendingAudit, endRun func(), m meterFrom) {
	log := s.log.With("graph", cmd.Graph, "sandbox", cmd.SandboxID, "command", cmd.ID)
	overBudget := false
	if end == nil {
		unwatch := s.watchBudget(cmd.SandboxID, m.allow, &m.base, func() {
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.host.Signal(kctx, cmd.ID, "")
		})
		waited := make(chan struct{})
		go func() {
			select {
			case <-s.runCtx.Done():
				kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s.host.Signal(kctx, cmd.ID, "")
			case <-waited:
			}
		}()
		out, err := s.host.Wait(context.Background(), cmd.ID)
		close(waited)
		overBudget = unwatch()
		if err != nil {
			t := time.Now()
			out = hostagent.CommandEnd{Status: store.CommandLost, Error: err.Error(), Infrastructure: err.Error(), Started: t, Ended: t}
		}
		end = &out
	}
	out := *end
	if overBudget && out.Status == store.CommandKilled {
		out.Status, out.OK = store.CommandBudgetExceeded, false
		out.Error = "stopped: the command's budget ran out while it ran"
	}
	// CPU time from the sandbox's cgroup while the command ran; memory reserved over its
	// duration (below, once the sandbox's limits are read).
	used := store.Usage{}
	if out.VCPUMs != nil {
		used.VCPUMs = *out.VCPUMs
	} else if m.allow.limited() {
		if u, err := s.host.Usage(context.Background(), cmd.SandboxID); err == nil {
			used.VCPUMs = max(0, u.VCPUMs-m.base.VCPUMs)
		}
	}
	endRun()
	s.metrics.running.Dec()
	s.metrics.runs.WithLabelValues(out.Status).Inc()
	cmd.Status, cmd.OK, cmd.Result, cmd.Error = out.Status, out.OK, out.Result, out.Error
	cmd.ExitCode, cmd.Signal, cmd.Stdout, cmd.Stderr = out.ExitCode, out.Signal, out.Stdout, out.Stderr
	cmd.Egress = out.Egress
	if out.StdinBytes > 0 {
		cmd.StdinBytes = out.StdinBytes
	}
	if !out.Started.IsZero() {
		st := out.Started.UTC().Truncate(time.Millisecond)
		cmd.StartedAt = &st
	}
	fin := s.now()
	if !out.Ended.IsZero() {
		fin = out.Ended.UTC().Truncate(time.Millisecond)
	}
	cmd.FinishedAt = &fin
	switch {
	case !out.Started.IsZero() && !out.Ended.IsZero():
		// The duration measured, not the difference of the two times rounded down to the
		// millisecond, which can exceed it by one: a command's gib_ms (its memory over this
		// duration) must never exceed its sandbox's over the sandbox's life so far.
		cmd.DurationMs = out.Ended.Sub(out.Started).Milliseconds()
	case cmd.StartedAt != nil:
		cmd.DurationMs = fin.Sub(*cmd.StartedAt).Milliseconds()
	}
	if out.Infrastructure != "" {
		log.Warn("command ended by an infrastructure failure", "status", out.Status, "err", out.Infrastructure)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A run's answer renders its sandbox's record; a process's needs only the memory limit.
	sb := store.Sandbox{ID: cmd.SandboxID, Limits: store.Limits{MemoryMiB: m.memoryMiB}}
	if cmd.Kind == store.KindRun || m.memoryMiB == 0 {
		if got, err := s.st.GetSandbox(wctx, cmd.Graph, cmd.SandboxID); err == nil {
			sb = got
		}
	}
	used.GiBMs = float64(sb.Limits.MemoryMiB) / 1024 * float64(cmd.DurationMs)
	large := s.stageResult(wctx, &cmd)
	defer s.discard(large)
	answer := func() Response {
		if cmd.Kind == store.KindRun {
			return s.answerRun(cmd, sb)
		}
		resp, err := idempotency.JSON(idempotency.Done, cmd)
		if err != nil {
			log.Error("rendering a command", "err", err)
		}
		return resp
	}
	var resp Response
	endRecord := timing.Start(ctx, "record")
	err := s.st.WithTx(wctx, func(q store.Queries) error {
		s.keepResult(wctx, q, &cmd, large)
		if err := s.meter(wctx, q, &cmd, used); err != nil {
			return err
		}
		resp = answer()
		if err := q.UpdateCommand(wctx, cmd); err != nil {
			return err
		}
		r, ok, err := keyOfCommand(wctx, q, cmd.ID)
		if !ok {
			return err
		}
		return s.finishKey(wctx, q, r, resp, cmd.FinishedAt, audit, cmd.ID)
	})
	endRecord()
	if err != nil {
		log.Error("recording the end of a command", "err", err)
		resp = answer()
	}
	log.Info("command ended", "status", cmd.Status, "duration_ms", cmd.DurationMs)
	inf.resp = resp
	s.mu.Lock()
	delete(s.inflight, cmd.ID)
	s.mu.Unlock()
	close(inf.done)
}

// liveCommand answers the inflight entry of a command of a long-lived sandbox running here.
func (s *Service) liveCommand(id string) *inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inf := s.inflight[id]; inf != nil && inf.sandbox != "" {
		return inf
	}
	return nil
}

// KillCommand signals a running command's process group ("" is SIGKILL) and answers its
// record once it has ended, or after a few seconds. Killing a command that ended answers
// its record.
func (s *Service) KillCommand(ctx context.Context, graph, id, signal string) (store.Command, error) {
	cmd, err := s.st.GetCommand(ctx, graph, id)
	if err != nil || store.CommandDone(cmd.Status) {
		return cmd, err
	}
	inf := s.liveCommand(id)
	if inf == nil {
		return cmd, errdefs.Conflict("command %s is not running on this server", id)
	}
	if err := s.host.Signal(ctx, id, signal); err != nil {
		if !errdefs.IsNotFound(err) {
			return cmd, err
		}
		// It ended meanwhile: its record is on its way.
	}
	select {
	case <-inf.done:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return cmd, ctx.Err()
	}
	return s.st.GetCommand(ctx, graph, id)
}

// StdinResult is the answer to a stdin write.
type StdinResult struct {
	Command string `json:"command"`
	// Bytes is how many bytes this call wrote; Total how many the command's stdin got.
	Bytes  int64 `json:"bytes"`
	Total  int64 `json:"total"`
	Closed bool  `json:"closed"`
}

// WriteStdin streams r to a running command's stdin (one started with stdin_open), and
// closes it when close is set.
func (s *Service) WriteStdin(ctx context.Context, graph, id string, r io.Reader, close bool) (StdinResult, error) {
	cmd, err := s.st.GetCommand(ctx, graph, id)
	if err != nil {
		return StdinResult{}, err
	}
	res := StdinResult{Command: id}
	if store.CommandDone(cmd.Status) || s.liveCommand(id) == nil {
		return res, errdefs.Conflict("command %s is %s; stdin takes writes while it runs", id, cmd.Status)
	}
	w, err := s.host.WriteStdin(ctx, id, r, close)
	res.Bytes, res.Total, res.Closed = w.Bytes, w.Total, w.Closed
	if errdefs.IsNotFound(err) {
		return res, errdefs.Conflict("command %s has ended or its stdin is closed", id)
	}
	return res, err
}

// CommandOutput is what a reader of a command's output follows: a command running here
// (Live: ReadOutput follows its output), or else its record (head and tail) alone.
type CommandOutput struct {
	Command store.Command
	// Live says the command runs in this server's host agent.
	Live bool
	// Done is closed when the command has ended and has its record (nil unless Live).
	Done <-chan struct{}
}

// CommandOutput finds a command's output.
func (s *Service) CommandOutput(ctx context.Context, graph, id string) (CommandOutput, error) {
	inf := s.liveCommand(id)
	cmd, err := s.st.GetCommand(ctx, graph, id)
	if err != nil {
		return CommandOutput{}, err
	}
	out := CommandOutput{Command: cmd}
	if inf != nil && !store.CommandDone(cmd.Status) {
		out.Live, out.Done = true, inf.done
	}
	return out, nil
}

// ReadOutput is a follower's cursor on the output of a command running here (stream "stdout"
// or "stderr"), as hostagent.Host.ReadOutput.
func (s *Service) ReadOutput(ctx context.Context, commandID, stream string, off int64, max int) (int64, []byte, error) {
	return s.host.ReadOutput(ctx, commandID, stream, off, max)
}

// ReadHeld takes the held output of a command started with stream, from the offsets its
// reader has taken, as hostagent.Host.ReadHeld.
func (s *Service) ReadHeld(ctx context.Context, commandID string, stdout, stderr int64, max int) (output.Held, error) {
	return s.host.ReadHeld(ctx, hostagent.HeldRead{CommandID: commandID, Stdout: stdout, Stderr: stderr, Max: max})
}

// ReleaseHeld lets go of a command's held output: its reader went away, and the process must
// not wait for it.
func (s *Service) ReleaseHeld(commandID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.host.ReadHeld(ctx, hostagent.HeldRead{CommandID: commandID, Release: true}); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		s.log.Warn("letting go of a command's held output", "command", commandID, "err", err)
	}
}

// meterFrom is what a command is metered from: what its budgets had left when it started
// and what its sandbox had used then.
type meterFrom struct {
	allow allowance
	base  store.Usage
	// memoryMiB is its sandbox's memory limit (which does not change while the sandbox
	// runs), read when the command started; 0: read the sandbox's record at its end.
	memoryMiB int64
}
