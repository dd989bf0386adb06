package control

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// terminalHangup is how long a hung-up terminal may take to end before it is killed.
const terminalHangup = 5 * time.Second

// TerminalRequest opens a terminal in a running sandbox.
type TerminalRequest struct {
	// Argv is what runs on the terminal; default a login shell (bash -l).
	Argv []string
	Env  map[string]string
	Cwd  string
	// Cols and Rows are its size; default 80×24.
	Cols, Rows uint16
	// Term is its TERM; default xterm-256color.
	Term string
}

// terminals are the terminals running here and who is attached to each.
type terminals struct {
	mu sync.Mutex
	m  map[string]*terminal
}

type terminal struct {
	graph    string
	sandbox  string
	attached int
	grace    *time.Timer
	// sent is how much of the output was delivered to an attached client: the host agent
	// holds what follows (hostagent.ExecRequest.Hold) for the next one.
	sent int64
	// reader is the attach whose socket takes the held output: the latest one.
	reader   uint64
	attaches uint64
}

// OpenTerminal starts a command of kind terminal in a running sandbox and answers its
// record. The caller attaches (AttachTerminal) and follows its output (ReadOutput, stdout).
// A terminal lives as long as the server's maximum command timeout at most, and ends with
// its sandbox.
func (s *Service) OpenTerminal(ctx context.Context, c Caller, sandboxID string, req TerminalRequest) (store.Command, error) {
	if len(req.Argv) == 0 {
		req.Argv = []string{"bash", "-l"}
	}
	if req.Argv[0] == "" {
		return store.Command{}, errdefs.InvalidArgument("argv needs at least the program to run")
	}
	if req.Cols == 0 {
		req.Cols = 80
	}
	if req.Rows == 0 {
		req.Rows = 24
	}
	if err := validEnv(req.Env); err != nil {
		return store.Command{}, err
	}
	env := req.Env
	if req.Term != "" {
		env = map[string]string{}
		for k, v := range req.Env {
			env[k] = v
		}
		env["TERM"] = req.Term
	}
	sb, hs, err := s.sandboxFor(ctx, c.Graph, sandboxID)
	if err != nil {
		return store.Command{}, err
	}
	if sb.OneCall {
		return store.Command{}, errdefs.Conflict("sandbox %s is a one-call run's; create a sandbox to open terminals in", sandboxID)
	}
	if hs == nil || sb.Status != store.SandboxRunning {
		return store.Command{}, errdefs.Conflict("sandbox %s is %s; terminals open in a running sandbox (resume a stopped one)", sandboxID, sb.Status)
	}
	if err := s.chargeRun(ctx, c.Key); err != nil {
		return store.Command{}, err
	}
	// A terminal is a command: its grant's and workflow run's budgets count it and meter it.
	origin := c.origin(nil)
	allow, err := s.chargeBudgets(ctx, c, origin)
	if err != nil {
		return store.Command{}, err
	}
	if err := s.begin(); err != nil {
		s.uncharge(ctx, c, origin)
		return store.Command{}, err
	}
	now := s.now()
	timeout := s.cfg.MaxTimeout
	cmd := store.Command{ID: ids.New(ids.Command), Graph: c.Graph, SandboxID: sandboxID, Kind: store.KindTerminal,
		Argv: req.Argv, Cwd: req.Cwd, EnvNames: sortedKeys(env), TimeoutMs: timeout.Milliseconds(),
		Status: store.CommandRunning, Origin: origin, CreatedAt: now, StartedAt: &now}
	if err := s.st.WithTx(ctx, func(q store.Queries) error { return q.CreateCommand(ctx, cmd) }); err != nil {
		s.runs.Done()
		s.uncharge(ctx, c, origin)
		return store.Command{}, err
	}
	spec := hostagent.ExecRequest{SandboxID: sandboxID, CommandID: cmd.ID, Argv: req.Argv, Cwd: req.Cwd, Env: env,
		Timeout: timeout, StdinOpen: true, Pty: &hostagent.PtySize{Cols: req.Cols, Rows: req.Rows},
		HeadBytes: s.cfg.OutputHeadBytes, TailBytes: s.cfg.OutputTailBytes, Hold: true}
	inf := &inflight{done: make(chan struct{}), sandbox: sandboxID}
	s.mu.Lock()
	s.inflight[cmd.ID] = inf
	s.mu.Unlock()
	s.metrics.running.Inc()
	s.terms.mu.Lock()
	if s.terms.m == nil {
		s.terms.m = map[string]*terminal{}
	}
	t := &terminal{graph: c.Graph, sandbox: sandboxID}
	s.terms.m[cmd.ID] = t
	s.terms.mu.Unlock()
	// Nobody attached yet: the grace starts now, and the opener's attach stops it.
	s.detached(cmd.ID, t)
	var end *hostagent.CommandEnd
	base, err := s.host.Usage(ctx, sandboxID)
	if err != nil {
		base = store.Usage{}
	}
	if err := s.host.Exec(ctx, spec); err != nil {
		t := time.Now()
		end = &hostagent.CommandEnd{Status: store.CommandFailed, Error: err.Error(), Infrastructure: err.Error(), Started: t, Ended: t}
	}
	go func() {
		defer s.runs.Done()
		s.runCommand(context.Background(), cmd, end, inf, nil, func() {}, meterFrom{allow: allow, base: base})
		s.terms.mu.Lock()
		if t.grace != nil {
			t.grace.Stop()
		}
		delete(s.terms.m, cmd.ID)
		s.terms.mu.Unlock()
	}()
	return cmd, nil
}

// TerminalAttach is one caller attached to a running terminal (AttachTerminal).
type TerminalAttach struct {
	s  *Service
	id string
	t  *terminal
	n  uint64
	// Done is closed when the terminal has ended and has its record.
	Done <-chan struct{}
	// Detach counts the caller off: the grace starts when nobody is left.
	Detach func()
}

// Sent answers how much of the terminal's output was delivered to its clients, and whether
// this attach is the one that takes the held output (the latest attach).
func (a *TerminalAttach) Sent() (int64, bool) {
	a.s.terms.mu.Lock()
	defer a.s.terms.mu.Unlock()
	return a.t.sent, a.t.reader == a.n
}

// Deliver records that the output up to off was delivered, when this attach takes the held
// output; it reports whether it does.
func (a *TerminalAttach) Deliver(off int64) bool {
	a.s.terms.mu.Lock()
	defer a.s.terms.mu.Unlock()
	if a.t.reader != a.n {
		return false
	}
	a.t.sent = max(a.t.sent, off)
	return true
}

// AttachTerminal attaches a caller to a running terminal of graph: its grace timer stops
// until every attached caller has detached. The latest attach takes the terminal's held
// output (the host agent holds what was not delivered, and the program waits when it is
// full); an earlier one still attached follows what is kept (ReadOutput).
func (s *Service) AttachTerminal(graph, id string) (*TerminalAttach, error) {
	s.terms.mu.Lock()
	t := s.terms.m[id]
	if t == nil || t.graph != graph {
		s.terms.mu.Unlock()
		return nil, errdefs.NotFound("terminal %s is not running on this server", id)
	}
	t.attached++
	t.attaches++
	t.reader = t.attaches
	if t.grace != nil {
		t.grace.Stop()
		t.grace = nil
	}
	a := &TerminalAttach{s: s, id: id, t: t, n: t.attaches}
	s.terms.mu.Unlock()
	inf := s.liveCommand(id)
	if inf == nil {
		s.detached(id, t)
		return nil, errdefs.NotFound("terminal %s has ended", id)
	}
	a.Done, a.Detach = inf.done, sync.OnceFunc(func() { s.detached(id, t) })
	return a, nil
}

// detached counts one attached caller off (none for a terminal just opened) and starts the
// grace when none is left.
func (s *Service) detached(id string, t *terminal) {
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	if t.attached > 0 {
		t.attached--
	}
	if t.attached > 0 || t.grace != nil || s.terms.m[id] != t {
		return
	}
	s.startGrace(id, t)
}

// startGrace starts terminal t's grace (the caller holds s.terms.mu): when it passes with
// nobody attached, the terminal is hung up. A grace that passes while its sandbox is paused
// waits for the resume, which starts it again in full (resumedTerminals).
func (s *Service) startGrace(id string, t *terminal) {
	grace := s.cfg.TerminalGrace
	if grace <= 0 {
		grace = 2 * time.Minute
	}
	var timer *time.Timer
	timer = time.AfterFunc(grace, func() {
		if sb, err := s.st.GetSandbox(context.Background(), t.graph, t.sandbox); err == nil && sb.Status == store.SandboxPaused {
			return
		}
		s.terms.mu.Lock()
		current := t.grace == timer
		s.terms.mu.Unlock()
		if !current {
			return // attached meanwhile, or started again by a resume
		}
		s.log.Info("terminal hung up: nobody re-attached within the grace", "command", id, "grace", grace)
		// A program waiting for its unread output to be taken must be able to end.
		s.ReleaseHeld(id)
		ctx, cancel := context.WithTimeout(context.Background(), terminalHangup+10*time.Second)
		defer cancel()
		s.host.Signal(ctx, id, "SIGHUP")
		if inf := s.liveCommand(id); inf != nil {
			select {
			case <-inf.done:
			case <-time.After(terminalHangup):
				s.host.Signal(ctx, id, "")
			}
		}
	})
	t.grace = timer
}

// resumedTerminals starts again in full the grace of each terminal of a resumed sandbox that
// nobody is attached to: paused time does not count.
func (s *Service) resumedTerminals(sandboxID string) {
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	for id, t := range s.terms.m {
		if t.sandbox == sandboxID && t.grace != nil {
			t.grace.Stop()
			s.startGrace(id, t)
		}
	}
}

// ResizeTerminal sets a running terminal's size.
func (s *Service) ResizeTerminal(ctx context.Context, graph, id string, cols, rows uint16) error {
	s.terms.mu.Lock()
	t := s.terms.m[id]
	s.terms.mu.Unlock()
	if t == nil || t.graph != graph {
		return errdefs.NotFound("terminal %s is not running on this server", id)
	}
	return s.host.Resize(ctx, id, hostagent.PtySize{Cols: cols, Rows: rows})
}

// TerminalInput writes what is typed to a running terminal of graph.
func (s *Service) TerminalInput(ctx context.Context, graph, id string, b []byte) error {
	s.terms.mu.Lock()
	t := s.terms.m[id]
	s.terms.mu.Unlock()
	if t == nil || t.graph != graph {
		return errdefs.NotFound("terminal %s is not running on this server", id)
	}
	_, err := s.host.WriteStdin(ctx, id, bytes.NewReader(b), false)
	return err
}
