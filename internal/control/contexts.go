package control

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/codeint"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Code contexts: a stateful interpreter in a long-lived sandbox (a Jupyter kernel for
// Python), fed one cell at a time. A context's driver (internal/codeint) runs as a command of
// the sandbox that no record names, with its stdin open and its output held for this
// service; every cell is a command record of kind code. Contexts live in this server's memory
// and end with their sandbox. A pause freezes their interpreters and a snapshot (gvisor)
// carries them on, state kept; a fork without a snapshot gets copies of them (forked_from).
// A cell sent to a context whose interpreter ended (the sandbox was stopped and resumed)
// starts it again and says so (context_restarted).

// ContextRequest is the body of POST /v1/sandboxes/{id}/contexts.
type ContextRequest struct {
	Language string            `json:"language,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// CodeContext is a context as the API shows it.
type CodeContext struct {
	ID       string   `json:"id"`
	Sandbox  string   `json:"sandbox"`
	Language string   `json:"language"`
	Cwd      string   `json:"cwd,omitempty"`
	EnvNames []string `json:"env_names,omitempty"`
	// Status is ready, busy (a cell runs) or ended (its interpreter ended with the
	// sandbox's processes; the next cell starts it again).
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	// Restarts counts the interpreters started after the first.
	Restarts int `json:"restarts"`
	// ForkedFrom names, in a fork, the context of its source this one is a copy of (its
	// interpreter with the same state at the fork).
	ForkedFrom string `json:"forked_from,omitempty"`
}

// CodeRequest is the body of POST /v1/sandboxes/{id}/code.
type CodeRequest struct {
	Code string `json:"code"`
	// Context names the context; without it, the sandbox's default context of Language
	// (python when empty), started on first use.
	Context   string `json:"context,omitempty"`
	Language  string `json:"language,omitempty"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	Stream    bool   `json:"stream,omitempty"`
}

// CodeOutput is one result or display bundle of a cell: MIME type → value (text; base64 for
// images; JSON for application/json). Files names the Files of the graph that keep its images.
type CodeOutput struct {
	Type           string                     `json:"type"`
	Data           map[string]json.RawMessage `json:"data"`
	ExecutionCount *int                       `json:"execution_count,omitempty"`
	Files          map[string]string          `json:"files,omitempty"`
}

// CodeError is a cell's exception.
type CodeError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// CodeResult is the answer of a cell.
type CodeResult struct {
	Command          string       `json:"command"`
	Context          string       `json:"context"`
	Sandbox          string       `json:"sandbox"`
	Status           string       `json:"status"`
	ExecutionCount   *int         `json:"execution_count"`
	Stdout           string       `json:"stdout"`
	Stderr           string       `json:"stderr"`
	Results          []CodeOutput `json:"results"`
	Error            *CodeError   `json:"error,omitempty"`
	DurationMs       int64        `json:"duration_ms"`
	ContextRestarted bool         `json:"context_restarted,omitempty"`
}

// codeRecord is what a cell's command record keeps as its result: the bundles with their
// images replaced by the Files that keep them.
type codeRecord struct {
	Context        string       `json:"context"`
	ExecutionCount *int         `json:"execution_count"`
	Results        []CodeOutput `json:"results,omitempty"`
	Error          *CodeError   `json:"error,omitempty"`
}

// maxCodeFiles bounds the images one cell keeps as Files.
const maxCodeFiles = 16

// codeContext is a context running here.
type codeContext struct {
	CodeContext
	graph string
	env   map[string]string

	// run is held by the cell running (one at a time) and by restarts.
	run    sync.Mutex
	driver string // the id of the driver's command
	stdout int64  // offsets of the driver's held output taken so far
	stderr int64
	lines  codeint.Lines
	ended  chan struct{} // closed when the driver's command ended
}

func (cc *codeContext) alive() bool {
	select {
	case <-cc.ended:
		return false
	default:
		return true
	}
}

func (cc *codeContext) view() CodeContext {
	v := cc.CodeContext
	if !cc.run.TryLock() {
		v.Status = "busy"
		if !cc.alive() {
			v.Status = "ended"
		}
		return v
	}
	defer cc.run.Unlock()
	v.Status = "ready"
	if !cc.alive() {
		v.Status = "ended"
	}
	return v
}

// CreateContext starts a context in a running sandbox and answers once its interpreter is
// ready.
func (s *Service) CreateContext(ctx context.Context, c Caller, sandboxID string, req ContextRequest) (CodeContext, error) {
	if req.Language == "" {
		req.Language = "python"
	}
	req.Language = codeint.Canonical(req.Language)
	if _, err := codeint.Argv(req.Language); err != nil {
		return CodeContext{}, errdefs.InvalidArgument("%v", err)
	}
	if err := validEnv(req.Env); err != nil {
		return CodeContext{}, err
	}
	if _, err := s.runningSandbox(ctx, c.Graph, sandboxID); err != nil {
		return CodeContext{}, err
	}
	cc := &codeContext{CodeContext: CodeContext{ID: ids.New(ids.Context), Sandbox: sandboxID, Language: req.Language,
		Cwd: req.Cwd, EnvNames: sortedKeys(req.Env), CreatedAt: s.now()}, graph: c.Graph, env: req.Env}
	cc.run.Lock()
	defer cc.run.Unlock()
	if err := s.startDriver(ctx, cc); err != nil {
		return CodeContext{}, err
	}
	s.cmu.Lock()
	s.contexts[cc.ID] = cc
	s.cmu.Unlock()
	v := cc.CodeContext
	v.Status = "ready"
	return v, nil
}

// prestartContext starts the default context of language in a sandbox that just started
// (base lbb/code-interpreter), in the background: its first cell waits for it rather than
// starting it. With driver, the sandbox came from the warm pool with its interpreter running
// as that command (hostagent.Sandbox.Kernel), ready already: the context takes it on.
func (s *Service) prestartContext(graph, sandboxID, language, driver string) {
	cc := &codeContext{CodeContext: CodeContext{ID: ids.New(ids.Context), Sandbox: sandboxID, Language: language,
		CreatedAt: s.now()}, graph: graph, ended: make(chan struct{}), driver: driver}
	if driver == "" {
		close(cc.ended)
	}
	cc.run.Lock()
	s.cmu.Lock()
	s.contexts[cc.ID] = cc
	s.cmu.Unlock()
	go func() {
		defer cc.run.Unlock()
		ctx, cancel := context.WithTimeout(s.runCtx, 2*time.Minute)
		defer cancel()
		start := s.startDriver
		if driver != "" {
			start = s.awaitDriver
		}
		if err := start(ctx, cc); err != nil {
			// Its first cell starts it again, and says why if it cannot.
			s.log.Warn("pre-starting a code context", "sandbox", sandboxID, "context", cc.ID, "err", err)
		}
	}()
}

// runningSandbox reads a long-lived sandbox that runs here.
func (s *Service) runningSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	sb, hs, err := s.sandboxFor(ctx, graph, id)
	if err != nil {
		return sb, err
	}
	if sb.OneCall {
		return sb, errdefs.Conflict("sandbox %s is a one-call run's; create a sandbox to run code contexts in", id)
	}
	if hs == nil || sb.Status != store.SandboxRunning {
		return sb, errdefs.Conflict("sandbox %s is %s; code runs in a running sandbox (resume a stopped one)", id, sb.Status)
	}
	return sb, nil
}

// startDriver starts cc's interpreter and waits for it to be ready. cc.run is held.
func (s *Service) startDriver(ctx context.Context, cc *codeContext) error {
	argv, err := codeint.Argv(cc.Language)
	if err != nil {
		return errdefs.InvalidArgument("%v", err)
	}
	cc.driver = ids.New(ids.Command)
	cc.stdout, cc.stderr, cc.lines = 0, 0, codeint.Lines{}
	cc.ended = make(chan struct{})
	spec := hostagent.ExecRequest{SandboxID: cc.Sandbox, CommandID: cc.driver, Argv: argv, Cwd: cc.Cwd, Env: cc.env,
		Timeout: driverTimeout, StdinOpen: true, Hold: true, HeadBytes: 4096, TailBytes: 4096}
	if err := s.host.Exec(ctx, spec); err != nil {
		close(cc.ended)
		return fmt.Errorf("starting the %s interpreter: %w", cc.Language, err)
	}
	return s.awaitDriver(ctx, cc)
}

// awaitDriver watches the driver cc.driver that runs, and waits for it to be ready. cc.run
// is held.
func (s *Service) awaitDriver(ctx context.Context, cc *codeContext) error {
	s.watchDriver(cc)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
	defer cancel()
	for {
		evs, err := s.driverEvents(rctx, cc)
		for _, ev := range evs {
			switch ev.Type {
			case codeint.EventReady:
				return nil
			case codeint.EventFatal:
				s.killDriver(cc)
				return errdefs.Unavailable("the %s interpreter did not start: %s", cc.Language, ev.Value)
			}
		}
		if err != nil {
			s.killDriver(cc)
			return errdefs.Unavailable("the %s interpreter did not start: %v", cc.Language, err)
		}
	}
}

// watchDriver closes cc.ended when its driver's command ends.
func (s *Service) watchDriver(cc *codeContext) {
	ended, driver := cc.ended, cc.driver
	go func() {
		end, err := s.host.Wait(context.Background(), driver)
		if err == nil && end.Status != store.CommandSucceeded && end.Status != store.CommandKilled {
			s.log.Info("a code context's interpreter ended", "context", cc.ID, "sandbox", cc.Sandbox, "status", end.Status, "stderr", end.Stderr.Tail)
		}
		close(ended)
	}()
}

// driverTimeout is a context's driver's timeout: it lives as long as the sandbox; the guest
// agent wants some timeout.
const driverTimeout = 365 * 24 * time.Hour

// errDriverEnded says a context's interpreter ended (with its sandbox's processes).
var errDriverEnded = errors.New("the context's interpreter ended")

// driverEvents waits for the next events of cc's driver. cc.run is held.
func (s *Service) driverEvents(ctx context.Context, cc *codeContext) ([]codeint.Event, error) {
	held, err := s.host.ReadHeld(ctx, hostagent.HeldRead{CommandID: cc.driver, Stdout: cc.stdout, Stderr: cc.stderr})
	if errdefs.IsNotFound(err) {
		return nil, errDriverEnded
	} else if err != nil {
		return nil, err
	}
	var evs []codeint.Event
	for _, p := range held.Pieces {
		end := p.Offset + int64(len(p.Data))
		if p.Stream == "stdout" {
			cc.stdout = max(cc.stdout, end)
			evs = append(evs, cc.lines.Feed(p.Data)...)
		} else {
			cc.stderr = max(cc.stderr, end)
		}
	}
	if len(held.Pieces) == 0 && (held.Ended || held.Released) {
		return evs, errDriverEnded
	}
	return evs, nil
}

func (s *Service) killDriver(cc *codeContext) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.host.Signal(ctx, cc.driver, ""); err != nil && !errdefs.IsNotFound(err) {
		s.log.Warn("ending a code context's interpreter", "context", cc.ID, "err", err)
	}
	select {
	case <-cc.ended:
	case <-ctx.Done():
	}
}

// lookupContext finds a context of the graph's sandbox.
func (s *Service) lookupContext(graph, sandboxID, id string) (*codeContext, error) {
	s.cmu.Lock()
	cc := s.contexts[id]
	s.cmu.Unlock()
	if cc == nil || cc.graph != graph || cc.Sandbox != sandboxID {
		return nil, errdefs.NotFound("context %s not found in sandbox %s", id, sandboxID)
	}
	return cc, nil
}

// ListContexts lists a sandbox's contexts, oldest first.
func (s *Service) ListContexts(ctx context.Context, graph, sandboxID string) ([]CodeContext, error) {
	if _, _, err := s.sandboxFor(ctx, graph, sandboxID); err != nil {
		return nil, err
	}
	s.cmu.Lock()
	var ccs []*codeContext
	for _, cc := range s.contexts {
		if cc.graph == graph && cc.Sandbox == sandboxID {
			ccs = append(ccs, cc)
		}
	}
	s.cmu.Unlock()
	out := make([]CodeContext, 0, len(ccs))
	for _, cc := range ccs {
		out = append(out, cc.view())
	}
	slices.SortFunc(out, func(a, b CodeContext) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RestartContext starts a context's interpreter afresh: its state is gone. It waits for a
// running cell to end (interrupt it with a timeout).
func (s *Service) RestartContext(ctx context.Context, graph, sandboxID, id string) (CodeContext, error) {
	cc, err := s.lookupContext(graph, sandboxID, id)
	if err != nil {
		return CodeContext{}, err
	}
	if _, err := s.runningSandbox(ctx, graph, sandboxID); err != nil {
		return CodeContext{}, err
	}
	s.killDriver(cc)
	cc.run.Lock()
	defer cc.run.Unlock()
	s.killDriver(cc)
	if err := s.startDriver(ctx, cc); err != nil {
		return CodeContext{}, err
	}
	cc.Restarts++
	v := cc.CodeContext
	v.Status = "ready"
	return v, nil
}

// DeleteContext ends a context.
func (s *Service) DeleteContext(ctx context.Context, graph, sandboxID, id string) (CodeContext, error) {
	cc, err := s.lookupContext(graph, sandboxID, id)
	if err != nil {
		return CodeContext{}, err
	}
	s.cmu.Lock()
	delete(s.contexts, id)
	s.cmu.Unlock()
	s.killDriver(cc)
	v := cc.CodeContext
	v.Status = "ended"
	return v, nil
}

// holdContexts holds the run of every context of a sandbox while a pause, snapshot or fork
// is made (what), so that no cell starts meanwhile, and answers them with release. Their
// interpreters are commands like any other: a pause freezes them and a snapshot carries them
// on, so each context keeps its state; a fork without a snapshot gets copies of them (see
// adoptContext). A cell running answers commands_running: its answer would wait out the
// pause or be split by the move.
func (s *Service) holdContexts(sandboxID, what string) (release func(), held []*codeContext, err error) {
	s.cmu.Lock()
	var ccs []*codeContext
	for _, cc := range s.contexts {
		if cc.Sandbox == sandboxID {
			ccs = append(ccs, cc)
		}
	}
	s.cmu.Unlock()
	slices.SortFunc(ccs, func(a, b *codeContext) int { return strings.Compare(a.ID, b.ID) })
	release = func() {
		for _, cc := range held {
			cc.run.Unlock()
		}
	}
	for _, cc := range ccs {
		if !cc.run.TryLock() {
			release()
			return func() {}, nil, errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
				"sandbox %s has a code cell running in context %s; wait for it, then %s", sandboxID, cc.ID, what)
		}
		held = append(held, cc)
	}
	return release, held, nil
}

// forkedDrivers answers, for a fork of a sandbox whose contexts are held, the copies of their
// interpreters the fork carries on (their output held, as a context's driver's is), keyed by
// the fork's command id.
func forkedDrivers(held []*codeContext) map[string]*codeContext {
	out := map[string]*codeContext{}
	for _, cc := range held {
		if cc.alive() {
			out[ids.New(ids.Command)] = cc
		}
	}
	return out
}

// adoptContext records context src's copy in fork sandboxID, whose interpreter runs on as the
// fork's command driver: the same variables, a context of its own from now on.
func (s *Service) adoptContext(sandboxID string, src *codeContext, driver string) {
	cc := &codeContext{CodeContext: CodeContext{ID: ids.New(ids.Context), Sandbox: sandboxID, Language: src.Language,
		Cwd: src.Cwd, EnvNames: src.EnvNames, CreatedAt: s.now(), ForkedFrom: src.ID}, graph: src.graph, env: src.env,
		driver: driver, ended: make(chan struct{})}
	s.watchDriver(cc)
	s.cmu.Lock()
	s.contexts[cc.ID] = cc
	s.cmu.Unlock()
}

// forgetContexts drops the contexts of a sandbox that ended.
func (s *Service) forgetContexts(sandboxID string) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	for id, cc := range s.contexts {
		if cc.Sandbox == sandboxID {
			delete(s.contexts, id)
		}
	}
}

// defaultContext is the sandbox's context of language that a cell naming none runs in.
func (s *Service) defaultContext(ctx context.Context, c Caller, sandboxID, language string) (*codeContext, error) {
	if language == "" {
		language = "python"
	}
	language = codeint.Canonical(language)
	s.cmu.Lock()
	var found *codeContext
	for _, cc := range s.contexts {
		if cc.graph == c.Graph && cc.Sandbox == sandboxID && cc.Language == language && cc.env == nil && cc.Cwd == "" &&
			(found == nil || cc.ID < found.ID) {
			found = cc
		}
	}
	s.cmu.Unlock()
	if found != nil {
		return found, nil
	}
	v, err := s.CreateContext(ctx, c, sandboxID, ContextRequest{Language: language})
	if err != nil {
		return nil, err
	}
	return s.lookupContext(c.Graph, sandboxID, v.ID)
}

// RunCode runs one cell in a context (at most once for (graph, idemKey)) and answers its
// result; on, when set, gets every event of the cell as it comes (a stream's answer).
func (s *Service) RunCode(ctx context.Context, c Caller, sandboxID string, req CodeRequest, idemKey, reqHash string,
	on func(codeint.Event)) (Response, error) {
	timeout, err := s.timeout(0, req.TimeoutMs)
	if err != nil {
		return Response{}, err
	}
	wait := min(timeout+30*time.Second, s.cfg.MaxWait)
	if r, done, err := s.replayCommand(ctx, c, idemKey, reqHash, wait); done || err != nil {
		return r, err
	}
	if strings.TrimSpace(req.Code) == "" {
		return Response{}, errdefs.InvalidArgument("code is empty")
	}
	sb, err := s.runningSandbox(ctx, c.Graph, sandboxID)
	if err != nil {
		return Response{}, err
	}
	var cc *codeContext
	if req.Context != "" {
		if cc, err = s.lookupContext(c.Graph, sandboxID, req.Context); err != nil {
			return Response{}, err
		}
		if req.Language != "" && codeint.Canonical(req.Language) != cc.Language {
			return Response{}, errdefs.InvalidArgument("context %s runs %s, not %s", cc.ID, cc.Language, req.Language)
		}
	} else if cc, err = s.defaultContext(ctx, c, sandboxID, req.Language); err != nil {
		return Response{}, err
	}
	if err := s.chargeRun(ctx, c.Key); err != nil {
		return Response{}, err
	}
	// A cell counts as a run of its grant's and workflow run's budgets, and is metered like a
	// command: the sandbox's CPU while it ran, its memory over its duration.
	origin := c.origin(nil)
	if _, err := s.chargeBudgets(ctx, c, origin); err != nil {
		return Response{}, err
	}
	if err := s.begin(); err != nil {
		s.uncharge(ctx, c, origin)
		return Response{}, err
	}
	defer s.runs.Done()
	now := s.now()
	cmd := store.Command{ID: ids.New(ids.Command), Graph: c.Graph, SandboxID: sandboxID, Kind: store.KindCode,
		Language: cc.Language, Code: req.Code, Cwd: cc.Cwd, EnvNames: cc.EnvNames, TimeoutMs: timeout.Milliseconds(),
		Status: store.CommandRunning, IdempotencyKey: idemKey, Origin: origin, CreatedAt: now, StartedAt: &now}
	if resp, replayed, err := s.reserveCommand(ctx, c, cmd, RouteCode, idemKey, reqHash, wait); err != nil || replayed {
		s.uncharge(ctx, c, origin)
		return resp, err
	}
	inf := &inflight{done: make(chan struct{}), sandbox: sandboxID}
	s.mu.Lock()
	s.inflight[cmd.ID] = inf
	s.mu.Unlock()
	s.metrics.running.Inc()
	defer s.metrics.running.Dec()

	// The cell runs to its end, also when the caller goes away: its record must say how.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+60*time.Second)
	defer cancel()
	base, err := s.host.Usage(rctx, sandboxID)
	if err != nil {
		base = store.Usage{}
	}
	res := s.cell(rctx, cc, cmd.ID, req.Code, timeout, on)
	res.Command, res.Context, res.Sandbox = cmd.ID, cc.ID, sandboxID
	used := store.Usage{GiBMs: float64(sb.Limits.MemoryMiB) / 1024 * float64(res.DurationMs)}
	if u, err := s.host.Usage(rctx, sandboxID); err == nil {
		used.VCPUMs = max(0, u.VCPUMs-base.VCPUMs)
	}
	resp := s.finishCell(rctx, pendingAudit(ctx), cmd, &res, used)
	inf.resp = resp
	s.mu.Lock()
	delete(s.inflight, cmd.ID)
	s.mu.Unlock()
	close(inf.done)
	return resp, nil
}

// cell runs code in cc and collects its events.
func (s *Service) cell(ctx context.Context, cc *codeContext, cellID, code string, timeout time.Duration, on func(codeint.Event)) CodeResult {
	stdout := output.NewCapture(s.cfg.OutputHeadBytes, s.cfg.OutputTailBytes)
	stderr := output.NewCapture(s.cfg.OutputHeadBytes, s.cfg.OutputTailBytes)
	res := CodeResult{Status: store.CommandRunning, Results: []CodeOutput{}}
	started := time.Now()
	emit := func(ev codeint.Event) {
		if on != nil {
			on(ev)
		}
	}
	cc.run.Lock()
	defer cc.run.Unlock()
	fail := func(status, msg string) CodeResult {
		res.Status = status
		res.Error = &CodeError{Name: "ContextError", Value: msg, Traceback: []string{}}
		emit(codeint.Event{Type: codeint.EventError, Name: res.Error.Name, Value: msg})
		res.Stdout, res.Stderr = stdout.Head()+stdout.Tail(), stderr.Head()+stderr.Tail()
		res.DurationMs = time.Since(started).Milliseconds()
		return res
	}
	if !cc.alive() {
		// The sandbox's processes ended (a stop and resume): a fresh interpreter.
		if err := s.startDriver(ctx, cc); err != nil {
			return fail(store.CommandFailed, err.Error())
		}
		cc.Restarts++
		res.ContextRestarted = true
	}
	line := codeint.Request{ID: cellID, Code: code, TimeoutMs: timeout.Milliseconds()}.Line()
	if _, err := s.host.WriteStdin(ctx, cc.driver, bytes.NewReader(line), false); err != nil {
		return fail(store.CommandLost, fmt.Sprintf("writing the cell to the interpreter: %v", err))
	}
	for {
		evs, err := s.driverEvents(ctx, cc)
		for _, ev := range evs {
			if ev.ID != cellID {
				continue
			}
			switch ev.Type {
			case codeint.EventStdout:
				stdout.Write([]byte(ev.Text))
			case codeint.EventStderr:
				stderr.Write([]byte(ev.Text))
			case codeint.EventResult, codeint.EventDisplay:
				res.Results = append(res.Results, CodeOutput{Type: ev.Type, Data: ev.Data, ExecutionCount: ev.ExecutionCount})
			case codeint.EventError:
				if ev.Traceback == nil {
					ev.Traceback = []string{}
				}
				res.Error = &CodeError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
			case codeint.EventEnd:
				res.ExecutionCount = ev.ExecutionCount
				switch ev.Status {
				case "ok":
					res.Status = store.CommandSucceeded
				case "timeout":
					res.Status = store.CommandTimedOut
				default:
					res.Status = store.CommandFailed
				}
				res.Stdout, res.Stderr = stdout.Head()+stdout.Tail(), stderr.Head()+stderr.Tail()
				res.DurationMs = time.Since(started).Milliseconds()
				// end goes out with the record's fields (the API adds them).
				return res
			}
			emit(ev)
		}
		if err != nil {
			if errors.Is(err, errDriverEnded) {
				return fail(store.CommandFailed, "the context's interpreter ended while the cell ran (the sandbox stopped, or it ran out of memory); the next cell starts a fresh one")
			}
			// No end in time: the interpreter is stuck; a fresh one next time.
			s.killDriver(cc)
			return fail(store.CommandTimedOut, fmt.Sprintf("the interpreter did not answer: %v; the context restarts with the next cell", err))
		}
	}
}

// finishCell records a cell's end (its images as Files of the graph) and what it used, and
// answers it.
func (s *Service) finishCell(ctx context.Context, audit *PendingAudit, cmd store.Command, res *CodeResult, used store.Usage) Response {
	log := s.log.With("graph", cmd.Graph, "sandbox", cmd.SandboxID, "command", cmd.ID)
	fin := s.now()
	cmd.FinishedAt = &fin
	cmd.DurationMs = res.DurationMs
	cmd.Status, cmd.OK = res.Status, res.Status == store.CommandSucceeded
	cmd.Stdout = store.Output{Head: res.Stdout, Bytes: int64(len(res.Stdout))}
	cmd.Stderr = store.Output{Head: res.Stderr, Bytes: int64(len(res.Stderr))}
	if res.Error != nil {
		cmd.Error = res.Error.Name + ": " + res.Error.Value
	}
	// Images go to Files of the graph (at most maxCodeFiles a cell); the record keeps their ids.
	type image struct {
		out, mime string
		idx       int
		st        *blobs.Staged
	}
	var staged []image
	bs, bsErr := s.blobStore()
	rec := codeRecord{Context: res.Context, ExecutionCount: res.ExecutionCount, Error: res.Error}
	for i, o := range res.Results {
		ro := CodeOutput{Type: o.Type, ExecutionCount: o.ExecutionCount, Data: map[string]json.RawMessage{}}
		for _, mt := range codeint.MIMETypes(o.Data) {
			v := o.Data[mt]
			if !strings.HasPrefix(mt, "image/") || bsErr != nil || len(staged) >= maxCodeFiles {
				if len(v) <= 64<<10 || !strings.HasPrefix(mt, "image/") {
					ro.Data[mt] = v
				}
				continue
			}
			var text string
			if json.Unmarshal(v, &text) != nil {
				continue
			}
			b := []byte(text)
			if mt != "image/svg+xml" {
				if d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text)); err == nil {
					b = d
				}
			}
			st, err := bs.Stage(ctx, bytes.NewReader(b), s.cfg.MaxFileBytes)
			if err != nil {
				log.Warn("keeping a cell's image", "err", err)
				continue
			}
			staged = append(staged, image{mime: mt, idx: i, st: st})
		}
		rec.Results = append(rec.Results, ro)
	}
	defer func() {
		for _, im := range staged {
			s.discard(im.st)
		}
	}()
	var resp Response
	err := s.st.WithTx(ctx, func(q store.Queries) error {
		for n, im := range staged {
			ext := map[string]string{"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg", "image/gif": "gif"}[im.mime]
			f := store.File{ID: ids.New(ids.File), Graph: cmd.Graph, SHA256: im.st.SHA256, Size: im.st.Size,
				Name:   fmt.Sprintf("%s-%d.%s", cmd.ID, n+1, cmp.Or(ext, "bin")),
				Origin: store.FileOrigin{Kind: store.FileFromResult, Command: cmd.ID, Sandbox: cmd.SandboxID, Key: cmd.Origin.Key}, CreatedAt: s.now()}
			if err := s.createFile(ctx, q, bs, f, im.st); err != nil {
				log.Warn("keeping a cell's image as a File", "err", err)
				continue
			}
			staged[n].st = nil
			for _, o := range []*CodeOutput{&rec.Results[im.idx], &res.Results[im.idx]} {
				if o.Files == nil {
					o.Files = map[string]string{}
				}
				o.Files[im.mime] = f.ID
			}
		}
		var err error
		if cmd.Result, err = json.Marshal(rec); err != nil {
			return err
		}
		if int64(len(cmd.Result)) > s.cfg.MaxResultBytes {
			cmd.Result, cmd.ResultTruncated, cmd.ResultBytes = nil, true, int64(len(cmd.Result))
		}
		body, err := json.Marshal(res)
		if err != nil {
			return err
		}
		resp = Response{Outcome: idempotency.Done, Body: body}
		if err := s.meter(ctx, q, &cmd, used); err != nil {
			return err
		}
		if err := q.UpdateCommand(ctx, cmd); err != nil {
			return err
		}
		r, ok, err := keyOfCommand(ctx, q, cmd.ID)
		if !ok {
			return err
		}
		return s.finishKey(ctx, q, r, resp, cmd.FinishedAt, audit, cmd.ID)
	})
	if err != nil {
		log.Error("recording the end of a cell", "err", err)
		body, _ := json.Marshal(res)
		resp = Response{Outcome: idempotency.Done, Body: body}
	}
	s.metrics.runs.WithLabelValues(cmd.Status).Inc()
	log.Info("cell ended", "status", cmd.Status, "duration_ms", cmd.DurationMs)
	return resp
}
