package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/bases"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// CreateRequest is the body of POST /v1/sandboxes. With Run it is a Level 1 one-call run.
type CreateRequest struct {
	Run       *RunBody          `json:"run,omitempty"`
	Template  string            `json:"template,omitempty"`
	Base      string            `json:"base,omitempty"`
	Limits    *store.Limits     `json:"limits,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	WaitMs    *int64            `json:"wait_ms,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Origin    *OriginBody       `json:"origin,omitempty"`
	// ExpiresInSeconds bounds a long-lived sandbox (Level 3).
	ExpiresInSeconds int64 `json:"expires_in_seconds,omitempty"`
	// Isolation names the driver ("ns", "gvisor"); run.isolation wins over it.
	Isolation string `json:"isolation,omitempty"`
	// Egress is the route out (run.egress wins over it); API what code inside may call of
	// the API (long-lived sandboxes); Git a public repository cloned into the workspace
	// (long-lived sandboxes).
	Egress *store.Egress   `json:"egress,omitempty"`
	API    *APIGrantBody   `json:"api,omitempty"`
	Git    *store.GitClone `json:"git,omitempty"`
	// Session names the sandbox for the caller (long-lived sandboxes): the first call creates
	// it, later ones resume it or answer it running. Size picks preset limits (Sizes), which
	// explicit Limits override field by field.
	Session string `json:"session,omitempty"`
	Size    string `json:"size,omitempty"`
}

// RunBody is one run(input, config): code or a template, and what to call it with.
type RunBody struct {
	Code string `json:"code,omitempty"`
	// Script is a plain program of its language, run once (python3 -c, node -e, bash -c):
	// the answer's exit_code, stdout and stderr are its outcome; no run(input, config).
	Script   string            `json:"script,omitempty"`
	Template string            `json:"template,omitempty"`
	Input    json.RawMessage   `json:"input,omitempty"`
	Config   json.RawMessage   `json:"config,omitempty"`
	Base     string            `json:"base,omitempty"`
	Language string            `json:"language,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Isolation names the driver the run's sandbox runs on.
	Isolation string `json:"isolation,omitempty"`
	// Egress is the run's route out.
	Egress *store.Egress `json:"egress,omitempty"`
}

// OriginBody names the workflow step that made a call.
type OriginBody struct {
	Workflow string `json:"workflow,omitempty"`
	Run      string `json:"run,omitempty"`
	Step     string `json:"step,omitempty"`
	Attempt  string `json:"attempt,omitempty"`
}

// RunResult is the answer to a one-call run, and what its idempotency key replays.
type RunResult struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	// ResultTruncated: the result was larger than the server's --max-result-bytes; the File
	// ResultFile holds it (GET /v1/files/{id}/content), ResultBytes long.
	ResultTruncated bool               `json:"result_truncated,omitempty"`
	ResultBytes     int64              `json:"result_bytes,omitempty"`
	ResultFile      string             `json:"result_file,omitempty"`
	Error           string             `json:"error,omitempty"`
	Command         string             `json:"command"`
	Sandbox         string             `json:"sandbox"`
	Status          string             `json:"status"`
	ExitCode        *int               `json:"exit_code"`
	Signal          string             `json:"signal,omitempty"`
	DurationMs      int64              `json:"duration_ms"`
	Stdout          store.Output       `json:"stdout"`
	Stderr          store.Output       `json:"stderr"`
	Base            string             `json:"base"`
	Template        *store.TemplateRef `json:"template,omitempty"`
	Limits          store.Limits       `json:"limits"`
	Isolation       string             `json:"isolation,omitempty"`
	Egress          *store.Egress      `json:"egress,omitempty"`
	TimeoutMs       int64              `json:"timeout_ms"`
	Usage           store.Usage        `json:"usage"`
	// Origin is who and what the run ran for; Budget what its budgets had left after it.
	Origin     store.Origin      `json:"origin"`
	Budget     *store.BudgetLeft `json:"budget,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
}

// RouteCreateSandbox is the route idempotency keys of one-call runs belong to.
const RouteCreateSandbox = "POST /v1/sandboxes"

// plan is a validated run, ready to reserve.
type plan struct {
	sandbox  store.Sandbox
	command  store.Command
	env      map[string]string
	timeout  time.Duration
	wait     time.Duration
	idemKey  string
	reqHash  string
	language string
	files    []hostagent.File
	// claimed says the host agent acquires the sandbox while the reservation commits.
	claimed bool
	// audit is the call's audit entry, written with the run's end when still pending then.
	audit *PendingAudit
	// timings are the call's phases (its Server-Timing header), or nil.
	timings *timing.Timings
	// allow is what the run's budgets had left when it started.
	allow allowance
	// slot is the run's place in admission: a run slot, or a place in the queue for one.
	slot *ticket
}

// inflight is a run or command this process is executing.
type inflight struct {
	done chan struct{}
	resp Response
	// sandbox is the long-lived sandbox a command runs in ("" for a one-call run).
	sandbox string
}

// Run runs code once for (graph, idemKey): the first call reserves the key durably and runs;
// a call with the same key and request hash replays the stored answer (or waits for it);
// a different request with the key is rejected.
func (s *Service) Run(ctx context.Context, c Caller, req CreateRequest, idemKey, reqHash string) (Response, error) {
	if err := idempotency.Require(idemKey); err != nil {
		return Response{}, err
	}
	wait, err := s.waitFor(req.WaitMs)
	if err != nil {
		return Response{}, err
	}
	// A replay needs no valid plan: look the key up first, so that a retry of an answered
	// call gets its answer even if templates or limits changed since.
	if r, err := s.st.GetIdempotency(ctx, c.Graph, idemKey); err == nil {
		return s.replay(ctx, c, r, reqHash, wait)
	} else if !errdefs.IsNotFound(err) {
		return Response{}, err
	}
	endPlan := timing.Start(ctx, "plan")
	p, err := s.plan(ctx, c, req)
	endPlan()
	if err != nil {
		return Response{}, err
	}
	p.timings = timing.From(ctx)
	if req.WaitMs == nil {
		// Without wait_ms a call waits for its run to end, whatever its timeout.
		wait = min(p.timeout+30*time.Second, s.cfg.MaxWait)
	}
	p.idemKey, p.reqHash, p.wait = idemKey, reqHash, wait
	if err := s.chargeRun(ctx, c.Key); err != nil {
		return Response{}, err
	}
	if p.allow, err = s.chargeBudgets(ctx, c, p.command.Origin); err != nil {
		return Response{}, err
	}
	p.audit = pendingAudit(ctx)
	p.command.IdempotencyKey = idemKey
	// A run past the host's capacity waits for a slot (in execute, once reserved); past the
	// queue's bound it is refused before anything is reserved.
	if p.slot, err = s.slots.enter(c.Graph, c.Key.ID); err != nil {
		s.uncharge(ctx, c, p.command.Origin)
		return Response{}, err
	}
	if err := s.begin(); err != nil {
		s.uncharge(ctx, c, p.command.Origin)
		p.slot.release()
		return Response{}, err
	}
	// The sandbox is claimed while the reservation commits; no code runs in it before the
	// reservation is durable (launch runs it only after). A queued run claims none ahead:
	// its sandbox is made when its turn comes.
	if p.slot.Granted() {
		if err := s.host.Claim(timing.With(s.runCtx, p.timings), s.runSpec(p)); err != nil {
			s.log.Warn("claiming a run's sandbox ahead", "sandbox", p.sandbox.ID, "err", err)
		} else {
			p.claimed = true
			p.sandbox.Host = s.hostOf(p.sandbox.ID)
		}
	}
	endReserve := timing.Start(ctx, "reserve")
	existing, err := s.reserve(ctx, p)
	endReserve()
	if err != nil || existing != nil {
		if p.claimed {
			s.host.Unclaim(context.WithoutCancel(ctx), p.sandbox.ID)
		}
		s.uncharge(ctx, c, p.command.Origin)
		p.slot.release()
		s.runs.Done()
		if err != nil {
			return Response{}, err
		}
		return s.replay(ctx, c, *existing, reqHash, wait)
	}
	inf := s.launch(p)
	return s.await(ctx, c.Graph, p.command.ID, wait, inf)
}

func (s *Service) waitFor(ms *int64) (time.Duration, error) {
	if ms == nil {
		return s.cfg.DefaultWait, nil
	}
	if *ms < 0 {
		return 0, errdefs.InvalidArgument("wait_ms must not be negative")
	}
	return min(time.Duration(*ms)*time.Millisecond, s.cfg.MaxWait), nil
}

// reserve writes the idempotency key, the sandbox and the command in one transaction,
// before any code runs. It answers the existing reservation when the key is taken.
func (s *Service) reserve(ctx context.Context, p *plan) (*store.Idempotency, error) {
	for attempt := 0; ; attempt++ {
		var existing *store.Idempotency
		err := s.st.WithTx(ctx, func(q store.Queries) error {
			r := idempotency.Reservation(p.sandbox.Graph, p.idemKey, RouteCreateSandbox, p.reqHash, p.command.CreatedAt)
			r.CommandID, r.SandboxID = p.command.ID, p.sandbox.ID
			var err error
			if existing, err = idempotency.Reserve(ctx, q, r); err != nil || existing != nil {
				return err
			}
			if err := s.checkCap(ctx, q, p.sandbox.Graph, true, true); err != nil {
				return err
			}
			if err := q.CreateSandbox(ctx, p.sandbox); err != nil {
				return err
			}
			return q.CreateCommand(ctx, p.command)
		})
		// Another process may reserve the key between our read and insert.
		if errdefs.IsConflict(err) && attempt < 3 {
			continue
		}
		return existing, err
	}
}

// replay answers a call whose key is already reserved.
func (s *Service) replay(ctx context.Context, c Caller, r store.Idempotency, reqHash string, wait time.Duration) (Response, error) {
	if _, done, err := idempotency.Answer(r, reqHash); done || err != nil {
		if done {
			resp := s.storedAnswer(ctx, r)
			resp.Replayed = true
			return resp, nil
		}
		return Response{}, err
	}
	s.mu.Lock()
	inf := s.inflight[r.CommandID]
	s.mu.Unlock()
	resp, err := s.await(ctx, c.Graph, r.CommandID, wait, inf)
	resp.Replayed = true
	return resp, err
}

// await waits up to wait for a command's run to end: its final answer, or 202 with the
// command still running.
func (s *Service) await(ctx context.Context, graph, commandID string, wait time.Duration, inf *inflight) (Response, error) {
	if inf != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-inf.done:
			return inf.resp, nil
		case <-t.C:
		case <-ctx.Done():
			return Response{}, ctx.Err()
		}
	} else if err := s.pollDone(ctx, graph, commandID, wait); err != nil {
		return Response{}, err
	}
	// Finished meanwhile (in another process, or between the timer and here)?
	if r, err := s.st.GetIdempotencyByCommand(ctx, commandID); err == nil && r.State == store.IdempotencyDone {
		return s.storedAnswer(ctx, r), nil
	}
	cmd, err := s.st.GetCommand(ctx, graph, commandID)
	if err != nil {
		return Response{}, err
	}
	if cmd.Kind == store.KindProcess || cmd.Kind == store.KindCode {
		body, err := json.Marshal(cmd)
		return Response{Outcome: idempotency.Accepted, Body: body}, err
	}
	sb, err := s.st.GetSandbox(ctx, graph, cmd.SandboxID)
	if err != nil {
		return Response{}, err
	}
	body, err := json.Marshal(render(cmd, sb))
	return Response{Outcome: idempotency.Accepted, Body: body}, err
}

// pollDone waits until a command another process runs is done, or wait passes.
func (s *Service) pollDone(ctx context.Context, graph, commandID string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		cmd, err := s.st.GetCommand(ctx, graph, commandID)
		if err != nil {
			return err
		}
		if store.CommandDone(cmd.Status) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		select {
		case <-time.After(min(left, 100*time.Millisecond)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// launch starts executing a reserved run.
func (s *Service) launch(p *plan) *inflight {
	inf := &inflight{done: make(chan struct{})}
	s.mu.Lock()
	s.inflight[p.command.ID] = inf
	s.oneCalls[p.sandbox.ID] = owner{p.sandbox.Graph, p.sandbox.Origin.Key}
	s.mu.Unlock()
	s.metrics.running.Inc()
	go func() {
		defer s.runs.Done()
		s.execute(p, inf)
	}()
	return inf
}

func (s *Service) execute(p *plan, inf *inflight) {
	log := s.log.With("graph", p.sandbox.Graph, "sandbox", p.sandbox.ID, "command", p.command.ID)
	endQueue := timing.Start(timing.With(s.runCtx, p.timings), "queue")
	queued := time.Now()
	// A server that stops while the run waits ends it as it ends a running one: host.Run
	// answers killed at once for the cancelled context.
	_ = p.slot.wait(s.runCtx)
	endQueue()
	s.metrics.queueWait.Observe(time.Since(queued).Seconds())
	t0 := time.Now()
	rctx, stopRun := context.WithCancelCause(s.runCtx)
	unwatch := s.watchBudget(p.sandbox.ID, p.allow, nil, func() { stopRun(errBudget) })
	out, err := s.host.Run(timing.With(rctx, p.timings), s.runSpec(p))
	// The slot is free once the code has ended: the sandbox's teardown, below, is cheap
	// beside a run and overlaps the next one.
	p.slot.release()
	overBudget := unwatch()
	stopRun(nil)
	if overBudget && s.runCtx.Err() == nil {
		out.Status, out.OK, out.EndReason = store.CommandBudgetExceeded, false, store.EndBudgetExceeded
		out.Error, out.Infrastructure = "stopped: the run's budget ran out while it ran", ""
	}
	if err != nil && errdefs.CodeOf(err) == hostagent.CodeHostLost {
		// Its host (of a fleet) broke off or is lost: the code may have run there, so the run
		// is lost, and its key answers that, never running it again.
		out = hostagent.RunResult{EndReason: store.EndHostLost,
			CommandEnd: hostagent.CommandEnd{Status: store.CommandLost, Error: "the host running this command was lost; it was not run again: " + err.Error(), Infrastructure: err.Error()}}
	} else if err != nil {
		// The host agent could not say how the run ended (one in another process is gone).
		out = hostagent.RunResult{EndReason: store.EndFailed,
			CommandEnd: hostagent.CommandEnd{Status: store.CommandFailed, Error: err.Error(), Infrastructure: err.Error()}}
	}
	s.metrics.runs.WithLabelValues(out.Status).Inc()
	s.metrics.runDuration.WithLabelValues(out.Status).Observe(time.Since(t0).Seconds())
	if out.Infrastructure != "" {
		log.Warn("run ended by an infrastructure failure", "status", out.Status, "err", out.Infrastructure)
	}

	// The run's end is recorded and answered while the host destroys the sandbox: the
	// sandbox's life (and its usage) ends with the run, since nothing runs in it after.
	cmd, sb := p.command, p.sandbox
	if h := s.hostOf(sb.ID); h != "" {
		sb.Host = h // a run claimed nothing ahead: placed when it ran
	}
	applyOutcome(&cmd, &sb, out)
	endSandbox(&sb, out)
	// The records must be written even when the server is stopping.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	large := s.stageResult(ctx, &cmd)
	defer s.discard(large)
	var resp Response
	endRecord := timing.Start(timing.With(ctx, p.timings), "record")
	err = s.st.WithTx(ctx, func(q store.Queries) error {
		s.keepResult(ctx, q, &cmd, large)
		if err := s.meter(ctx, q, &cmd, out.CommandUsage); err != nil {
			return err
		}
		resp = s.answerRun(cmd, sb)
		if err := q.UpdateCommand(ctx, cmd); err != nil {
			return err
		}
		if err := q.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		r, err := q.GetIdempotency(ctx, sb.Graph, p.idemKey)
		if err != nil {
			return err
		}
		return s.finishKey(ctx, q, r, resp, cmd.FinishedAt, p.audit, cmd.ID)
	})
	endRecord()
	if err != nil {
		// The records stay running; the next start marks them lost.
		log.Error("recording the end of a run", "err", err)
		resp = s.answerRun(cmd, sb)
	}
	log.Info("run ended", "status", cmd.Status, "duration_ms", cmd.DurationMs, "ok", cmd.OK)
	inf.resp = resp
	s.mu.Lock()
	delete(s.inflight, p.command.ID)
	s.mu.Unlock()
	close(inf.done)

	// The sandbox is destroyed once the run is recorded and answered, so that its teardown
	// does not compete with them.
	end, err := s.host.Release(ctx, p.sandbox.ID)
	if err != nil {
		end.Error = err.Error()
	}
	// Its refusals' events may still be on their way.
	time.AfterFunc(time.Minute, func() {
		s.mu.Lock()
		delete(s.oneCalls, p.sandbox.ID)
		s.mu.Unlock()
	})
	s.metrics.running.Dec()
	if end.Error != "" {
		sb.Error = strings.TrimPrefix(sb.Error+"; ", "; ") + "destroying: " + end.Error
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			log.Error("recording a failed destroy", "err", err)
		}
	}
}

// runSpec is what the host agent needs to run p.
func (s *Service) runSpec(p *plan) hostagent.RunRequest {
	return hostagent.RunRequest{
		SandboxID: p.sandbox.ID, CommandID: p.command.ID,
		Limits:   runtimeLimits(p.sandbox.Limits),
		Runtime:  p.sandbox.Isolation,
		Language: p.language, Code: p.command.Code, Script: p.command.Kind == store.KindScript, Input: p.command.Input, Config: p.command.Config,
		Env: p.env, Timeout: p.timeout, HeadBytes: s.cfg.OutputHeadBytes, TailBytes: s.cfg.OutputTailBytes,
		Files: p.files, Egress: hostEgress(p.sandbox), Layer: p.sandbox.Layer,
	}
}

// applyOutcome writes how a run's command ended into its records; the sandbox is still up.
func applyOutcome(cmd *store.Command, sb *store.Sandbox, out hostagent.RunResult) {
	cmd.Status, cmd.OK, cmd.Result, cmd.Error = out.Status, out.OK, out.Result, out.Error
	cmd.ExitCode, cmd.Signal, cmd.Stdout, cmd.Stderr = out.ExitCode, out.Signal, out.Stdout, out.Stderr
	cmd.Egress = out.Egress
	now := time.Now().UTC().Truncate(time.Millisecond)
	if !out.Started.IsZero() {
		st := out.Started.UTC().Truncate(time.Millisecond)
		fin := out.Ended.UTC().Truncate(time.Millisecond)
		cmd.StartedAt, cmd.FinishedAt = &st, &fin
		cmd.DurationMs = out.Ended.Sub(out.Started).Milliseconds()
	} else {
		cmd.FinishedAt = &now
	}
	if !out.SandboxStarted.IsZero() {
		st := out.SandboxStarted.UTC().Truncate(time.Millisecond)
		sb.StartedAt = &st
	}
	sb.Usage = out.Usage
}

// endSandbox ends a run's sandbox record with its run.
func endSandbox(sb *store.Sandbox, out hostagent.RunResult) {
	at := out.Ended
	if at.IsZero() {
		at = time.Now()
	}
	at = at.UTC().Truncate(time.Millisecond)
	sb.EndedAt, sb.EndReason = &at, out.EndReason
	sb.Status = store.SandboxDestroyed
	if out.EndReason == store.EndHostLost {
		sb.Error = out.Infrastructure
	}
	if out.EndReason == store.EndFailed {
		sb.Status = store.SandboxFailed
		if out.Infrastructure != "" {
			sb.Error = out.Infrastructure
		}
	}
}

// render is the answer for a run's records.
func render(cmd store.Command, sb store.Sandbox) RunResult {
	usage := sb.Usage
	if cmd.Usage != nil && !sb.OneCall {
		usage = *cmd.Usage // a run in a long-lived sandbox: its own share
	}
	return RunResult{
		OK: cmd.OK, Result: cmd.Result, Error: cmd.Error, Command: cmd.ID, Sandbox: sb.ID, Status: cmd.Status,
		ResultTruncated: cmd.ResultTruncated, ResultBytes: cmd.ResultBytes, ResultFile: cmd.ResultFile,
		ExitCode: cmd.ExitCode, Signal: cmd.Signal, DurationMs: cmd.DurationMs, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		Base: sb.Base, Template: cmd.Template, Limits: sb.Limits, Isolation: sb.Isolation, Egress: sb.Egress, TimeoutMs: cmd.TimeoutMs, Usage: usage,
		Origin: cmd.Origin, Budget: cmd.Budget, CreatedAt: cmd.CreatedAt, StartedAt: cmd.StartedAt, FinishedAt: cmd.FinishedAt,
	}
}

// plan validates a one-call run and resolves its template, base, limits and config.
func (s *Service) plan(ctx context.Context, c Caller, req CreateRequest) (*plan, error) {
	if req.Run == nil {
		return nil, errdefs.InvalidArgument("a one-call run needs run")
	}
	r := req.Run
	if req.ExpiresInSeconds != 0 {
		return nil, errdefs.InvalidArgument("expires_in_seconds is for long-lived sandboxes; a one-call run ends with its run")
	}
	if r.Code != "" && r.Template != "" {
		return nil, errdefs.InvalidArgument("run takes code or template, not both")
	}
	if r.Script != "" && (r.Code != "" || r.Template != "" || req.Template != "" || r.Input != nil || r.Config != nil) {
		return nil, errdefs.InvalidArgument("run.script is a whole program: give it alone (no code, template, input or config)")
	}
	if req.Template != "" && r.Template == "" && r.Code == "" && r.Script == "" {
		r.Template = req.Template
	}
	baseName := firstNonEmpty(r.Base, r.Language, req.Base)
	var tpl *store.Template
	if r.Template != "" {
		if b, ok := bases.Lookup(r.Template); ok {
			baseName = b.Name // a base named as a template
		} else {
			// A version still building its image is waited for within wait_ms.
			var wait time.Duration
			if req.WaitMs != nil {
				wait = time.Duration(*req.WaitMs) * time.Millisecond
			}
			t, err := s.usableTemplate(ctx, c.Graph, r.Template, wait)
			if err != nil {
				return nil, err
			}
			if baseName != "" {
				if b, ok := bases.Lookup(baseName); !ok || b.Name != t.Base {
					return nil, errdefs.InvalidArgument("template %s runs on %s; drop base and language from the call", r.Template, t.Base)
				}
			}
			tpl, baseName = &t, t.Base
		}
	}
	if baseName == "" {
		baseName = "lbb/python"
	}
	base, ok := bases.Lookup(baseName)
	if !ok {
		return nil, errdefs.InvalidArgument("unknown base %q: want lbb/python, lbb/node or lbb/shell (or language python, node or shell)", baseName)
	}
	code, kind := r.Code, store.KindRun
	if tpl != nil {
		code = tpl.Code
	}
	if r.Script != "" {
		code, kind = r.Script, store.KindScript
	}
	if code == "" {
		return nil, errdefs.InvalidArgument("run needs code, or a template that has code")
	}
	input, err := jsonValue("run.input", r.Input)
	if err != nil {
		return nil, err
	}
	callConfig, err := jsonValue("run.config", r.Config)
	if err != nil {
		return nil, err
	}
	var tplConfig json.RawMessage
	var tplLimits *store.Limits
	var tplTimeout int64
	var tplIsolation string
	var ref *store.TemplateRef
	var files []hostagent.File
	if tpl != nil {
		tplConfig, tplLimits, tplTimeout, tplIsolation = tpl.Config, &tpl.Limits, tpl.TimeoutMs, tpl.Isolation
		ref = &store.TemplateRef{ID: tpl.ID, Name: tpl.Name, Version: tpl.Version}
		if files, err = s.templateFiles(ctx, c.Graph, tpl.Files); err != nil {
			return nil, err
		}
	}
	config, err := mergeConfig(tplConfig, callConfig)
	if err != nil {
		return nil, err
	}
	if req.Session != "" {
		return nil, errdefs.InvalidArgument("session names a long-lived sandbox: drop run from the call, or session")
	}
	sized, _, err := sizeLimits(req.Size)
	if err != nil {
		return nil, err
	}
	limits, err := s.limits(tplLimits, sized, req.Limits)
	if err != nil {
		return nil, err
	}
	timeout, err := s.timeout(tplTimeout, req.TimeoutMs)
	if err != nil {
		return nil, err
	}
	isolation, err := s.runIsolation(req, tplIsolation)
	if err != nil {
		return nil, err
	}
	if req.API != nil || req.Git != nil {
		return nil, errdefs.InvalidArgument("api and git are for long-lived sandboxes (create one without run)")
	}
	callEgress := req.Egress
	if r.Egress != nil {
		if callEgress != nil && !reflect.DeepEqual(callEgress, r.Egress) {
			return nil, errdefs.InvalidArgument("run.egress and egress differ; give one")
		}
		callEgress = r.Egress
	}
	var tplEgress *store.Egress
	if tpl != nil {
		tplEgress = tpl.Egress
	}
	eg, err := s.resolveEgress(callEgress, tplEgress)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, m := range []map[string]string{req.Env, r.Env} {
		for k, v := range m {
			if !validEnvName(k) {
				return nil, errdefs.InvalidArgument("env name %q is not a valid variable name", k)
			}
			env[k] = v
		}
	}
	origin := c.origin(req.Origin)
	now := s.now()
	sbID, cmdID := ids.New(ids.Sandbox), ids.New(ids.Command)
	envNames := sortedKeys(env)
	return &plan{
		sandbox: store.Sandbox{ID: sbID, Graph: c.Graph, Status: store.SandboxRunning, OneCall: true, Base: base.Name,
			Image: s.image.ID, Template: ref, Limits: limits, Isolation: isolation, EnvNames: envNames, Metadata: req.Metadata,
			Origin: origin, CreatedAt: now, Egress: eg, Layer: layerOf(tpl)},
		command: store.Command{ID: cmdID, Graph: c.Graph, SandboxID: sbID, Kind: kind, Language: base.Language,
			Code: code, Input: input, Config: config, Template: ref, EnvNames: envNames, TimeoutMs: timeout.Milliseconds(),
			Status: store.CommandRunning, Origin: origin, CreatedAt: now},
		env: env, timeout: timeout, language: base.Language, files: files,
	}, nil
}

func (s *Service) limits(over ...*store.Limits) (store.Limits, error) {
	l := store.Limits{MemoryMiB: s.cfg.Defaults.MemoryMiB, CPUs: s.cfg.Defaults.CPUs, Pids: s.cfg.Defaults.Pids, DiskMiB: s.cfg.Defaults.DiskMiB}
	for _, o := range over {
		if o == nil {
			continue
		}
		if o.MemoryMiB != 0 {
			l.MemoryMiB = o.MemoryMiB
		}
		if o.CPUs != 0 {
			l.CPUs = o.CPUs
		}
		if o.Pids != 0 {
			l.Pids = o.Pids
		}
		if o.DiskMiB != 0 {
			l.DiskMiB = o.DiskMiB
		}
	}
	return l, s.checkLimits(l)
}

func (s *Service) checkLimits(l store.Limits) error {
	for _, c := range []struct {
		name   string
		v, max float64
		min    float64
	}{
		{"memory_mib", float64(l.MemoryMiB), float64(s.cfg.Max.MemoryMiB), 16},
		{"cpus", l.CPUs, s.cfg.Max.CPUs, 0.01},
		{"pids", float64(l.Pids), float64(s.cfg.Max.Pids), 8},
		{"disk_mib", float64(l.DiskMiB), float64(s.cfg.Max.DiskMiB), 1},
	} {
		if c.v > c.max {
			return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeLimitExceeded,
				"limits.%s %v is above this server's cap of %v", c.name, c.v, c.max)
		}
		if c.v < c.min {
			return errdefs.InvalidArgument("limits.%s %v is below the least a sandbox can run with (%v)", c.name, c.v, c.min)
		}
	}
	return nil
}

func (s *Service) timeout(tplMs, callMs int64) (time.Duration, error) {
	ms := firstPositive(callMs, tplMs)
	if callMs < 0 || tplMs < 0 {
		return 0, errdefs.InvalidArgument("timeout_ms must not be negative")
	}
	if ms == 0 {
		return s.cfg.DefaultTimeout, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if d > s.cfg.MaxTimeout {
		return 0, errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeLimitExceeded,
			"timeout_ms %d is above this server's cap of %d", ms, s.cfg.MaxTimeout.Milliseconds())
	}
	return d, nil
}

// resolveTemplate finds "name" (newest version), "name@N" or a template id.
func (s *Service) resolveTemplate(ctx context.Context, graph, ref string) (store.Template, error) {
	name, version, err := ParseTemplateRef(ref)
	if err != nil {
		return store.Template{}, err
	}
	return s.st.GetTemplate(ctx, graph, name, version)
}

// ParseTemplateRef splits "name@N" into its name and version (0: newest).
func ParseTemplateRef(ref string) (string, int, error) {
	name, v, pinned := strings.Cut(ref, "@")
	if !pinned {
		return ref, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return "", 0, errdefs.InvalidArgument("template %q: the version after @ must be a number from 1", ref)
	}
	return name, n, nil
}

// jsonValue checks that raw is one JSON value; absent stays nil.
func jsonValue(field string, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, errdefs.InvalidArgument("%s is not valid JSON", field)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, errdefs.InvalidArgument("%s: %v", field, err)
	}
	if b.String() == "null" {
		return nil, nil
	}
	return b.Bytes(), nil
}

// mergeConfig lays the call's config over the template's: objects merge key by key, at every
// depth; anything else in the call replaces. The result is an object when neither is given.
func mergeConfig(under, over json.RawMessage) (json.RawMessage, error) {
	var u, o any
	if len(under) > 0 {
		if err := json.Unmarshal(under, &u); err != nil {
			return nil, fmt.Errorf("template config: %w", err)
		}
	}
	if len(over) > 0 {
		if err := decodeNumber(over, &o); err != nil {
			return nil, errdefs.InvalidArgument("run.config: %v", err)
		}
	}
	var merged any
	switch {
	case u == nil && o == nil:
		return json.RawMessage(`{}`), nil
	case u == nil:
		merged = o
	case o == nil:
		merged = u
	default:
		merged = deepMerge(u, o)
	}
	return json.Marshal(merged)
}

func decodeNumber(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
}

func deepMerge(under, over any) any {
	um, ok1 := under.(map[string]any)
	om, ok2 := over.(map[string]any)
	if !ok1 || !ok2 {
		return over
	}
	out := make(map[string]any, len(um)+len(om))
	for k, v := range um {
		out[k] = v
	}
	for k, v := range om {
		if prev, ok := out[k]; ok {
			out[k] = deepMerge(prev, v)
		} else {
			out[k] = v
		}
	}
	return out
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func firstPositive(vs ...int64) int64 {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
