package hostagent

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// endedKept is how long an ended command's output stays readable (ReadOutput) after Wait
// has answered its end, for followers still reading it.
const endedKept = time.Minute

// command is a command running in a long-lived sandbox.
type command struct {
	id, sandbox string
	// procID is its process's id in the guest agent: id, or for a fork's copy of a command
	// its source command's.
	procID         string
	stdout, stderr *output.Capture
	done           chan struct{}
	end            CommandEnd
	killed         atomic.Bool
	// agent is the guest agent the command's stream is on (a snapshot moves it to the next).
	agent atomic.Pointer[agent.Client]
	// detachable: the stream can move to the sandbox's next channel (an exec, not a run).
	detachable bool

	stdinMu     sync.Mutex
	stdin       *io.PipeWriter // nil unless StdinOpen
	stdinClosed bool
	stdinBytes  atomic.Int64

	// hold keeps the output for the command's starter (nil unless Hold).
	hold *output.Hold
}

func (h *Local) lookupCommand(id string) (*command, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.commands[id]
	if c == nil {
		return nil, errdefs.NotFound("command %s is not running on this host", id)
	}
	return c, nil
}

// Exec starts a command in a running sandbox and answers once its process runs (or could
// not start: Wait then says why).
func (h *Local) Exec(ctx context.Context, req ExecRequest) error {
	s, l, sctx, err := h.running(req.SandboxID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	env := maps.Clone(s.env)
	s.mu.Unlock()
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	c := &command{id: req.CommandID, procID: req.CommandID, sandbox: req.SandboxID, done: make(chan struct{}), detachable: req.Run == nil,
		stdout: output.NewCapture(req.HeadBytes, req.TailBytes), stderr: output.NewCapture(req.HeadBytes, req.TailBytes)}
	c.agent.Store(l.agent)
	c.stdinBytes.Store(int64(len(req.Stdin)))
	if req.Hold {
		c.hold = output.NewHold(HoldBytes, h.holdIdle)
	}
	e := execution{timeout: req.Timeout, limits: l.limits, killed: c.killed.Load, hold: c.hold, egress: l.egress, backstops: &s.backstops,
		timings: timing.From(ctx)}
	if req.Run != nil {
		e.run = &agent.RunRequest{ID: req.CommandID, Language: req.Run.Language, Code: req.Run.Code, Input: req.Run.Input,
			Config: req.Run.Config, Env: env, Cwd: req.Cwd, TimeoutMs: req.Timeout.Milliseconds()}
	} else {
		e.exec = &agent.ExecRequest{ID: req.CommandID, Argv: req.Argv, Env: env, Cwd: req.Cwd, TimeoutMs: req.Timeout.Milliseconds(),
			Pty: req.Pty, Detachable: true}
		e.reattach = func(ctx context.Context) (*agent.Client, io.Reader) { return h.moveStream(ctx, s, c) }
		switch {
		case req.StdinOpen:
			pr, pw := io.Pipe()
			c.stdin, e.stdin = pw, pr
			if len(req.Stdin) > 0 {
				go func() {
					c.stdinMu.Lock()
					defer c.stdinMu.Unlock()
					pw.Write(req.Stdin)
				}()
			}
		case req.Stdin != nil:
			e.stdin = strings.NewReader(string(req.Stdin))
		}
	}
	h.launch(ctx, s, l, sctx, c, e, Secrets(env))
	return nil
}

// adopt carries on, as command fc.ID of sandbox id (a fork), the fork's copy of its source's
// command fc.Source: its stream from now on. It answers whether the copy runs.
func (h *Local) adopt(ctx context.Context, id string, fc ForkCommand) bool {
	s, l, sctx, err := h.running(id)
	if err != nil {
		return false
	}
	c := &command{id: fc.ID, procID: fc.Source, sandbox: id, done: make(chan struct{}), detachable: true,
		stdout: output.NewCapture(fc.HeadBytes, fc.TailBytes), stderr: output.NewCapture(fc.HeadBytes, fc.TailBytes)}
	c.agent.Store(l.agent)
	if fc.Hold {
		c.hold = output.NewHold(HoldBytes, h.holdIdle)
	}
	e := execution{attachTo: fc.Source, timeout: fc.Timeout, limits: l.limits, killed: c.killed.Load, hold: c.hold, egress: l.egress, backstops: &s.backstops}
	e.reattach = func(ctx context.Context) (*agent.Client, io.Reader) { return h.moveStream(ctx, s, c) }
	// Its stdin is open when the source's is (on this host).
	if src, err := h.lookupCommand(fc.Source); err == nil {
		src.stdinMu.Lock()
		open := src.stdin != nil && !src.stdinClosed
		src.stdinMu.Unlock()
		if open {
			pr, pw := io.Pipe()
			c.stdin, e.stdin = pw, pr
		}
	}
	s.mu.Lock()
	secrets := Secrets(s.env)
	s.mu.Unlock()
	h.launch(ctx, s, l, sctx, c, e, secrets)
	select {
	case <-c.done:
		h.mu.Lock()
		delete(h.commands, c.id)
		h.mu.Unlock()
		return false
	default:
		return true
	}
}

// launch runs command c (e) in the background and returns once its process runs, or could
// not start.
func (h *Local) launch(ctx context.Context, s *sandbox, l *live, sctx context.Context, c *command, e execution, secrets []string) {
	started := make(chan struct{})
	e.started = sync.OnceFunc(func() { close(started) })
	h.mu.Lock()
	h.commands[c.id] = c
	h.mu.Unlock()
	s.mu.Lock()
	s.cmds[c.id] = c
	s.mu.Unlock()
	log := h.log.With("sandbox", c.sandbox, "command", c.id)
	go func() {
		out := h.execute(sctx, l.sb, l.agent, e, c.stdout, c.stderr, secrets, log)
		if c.hold != nil && c.hold.Idled() {
			log.Warn("the command's output waited for its reader for longer than allowed; the rest was not held", "idle", h.holdIdle)
		}
		if c.stdin != nil {
			c.stdin.CloseWithError(errors.New("the command has ended"))
		}
		c.end = out.CommandEnd
		c.end.StdinBytes = c.stdinBytes.Load()
		s.mu.Lock()
		delete(s.cmds, c.id)
		s.mu.Unlock()
		close(c.done)
	}()
	select {
	case <-started:
	case <-c.done:
	case <-ctx.Done():
	}
}

// Wait answers how a command ended, once it has. Its output stays readable for a while.
func (h *Local) Wait(ctx context.Context, commandID string) (CommandEnd, error) {
	c, err := h.lookupCommand(commandID)
	if err != nil {
		return CommandEnd{}, err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return CommandEnd{}, ctx.Err()
	}
	time.AfterFunc(endedKept, func() {
		h.mu.Lock()
		if h.commands[commandID] == c {
			delete(h.commands, commandID)
		}
		h.mu.Unlock()
	})
	return c.end, nil
}

// runningCommand finds a command that has not ended.
func (h *Local) runningCommand(id string) (*command, error) {
	c, err := h.lookupCommand(id)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return nil, errdefs.NotFound("command %s has ended", id)
	default:
	}
	return c, nil
}

// Signal signals a running command's process group ("" is SIGKILL).
func (h *Local) Signal(ctx context.Context, commandID, signal string) error {
	c, err := h.runningCommand(commandID)
	if err != nil {
		return err
	}
	c.killed.Store(true)
	if err := c.agent.Load().Signal(ctx, c.procID, signal); err != nil {
		return agentError(err)
	}
	return nil
}

// Resize sets the terminal size of a running command started with a Pty.
func (h *Local) Resize(ctx context.Context, commandID string, size PtySize) error {
	c, err := h.runningCommand(commandID)
	if err != nil {
		return err
	}
	if size.Cols == 0 || size.Rows == 0 {
		return errdefs.InvalidArgument("a terminal needs at least one column and one row")
	}
	if err := c.agent.Load().Resize(ctx, c.procID, size); err != nil {
		return agentError(err)
	}
	return nil
}

// WriteStdin streams r to a command started with StdinOpen, and closes its stdin when close
// is set.
func (h *Local) WriteStdin(ctx context.Context, commandID string, r io.Reader, close bool) (StdinResult, error) {
	var res StdinResult
	c, err := h.lookupCommand(commandID)
	if err != nil {
		return res, err
	}
	select {
	case <-c.done:
		return res, errdefs.Conflict("command %s has ended; stdin takes writes while it runs", commandID)
	default:
	}
	if c.stdin == nil {
		return res, errdefs.Conflict("command %s was started without stdin_open", commandID)
	}
	c.stdinMu.Lock()
	defer c.stdinMu.Unlock()
	n, err := io.Copy(countingWriter{c.stdin, &c.stdinBytes}, blobs.ContextReader(ctx, r))
	res.Bytes = n
	if err != nil {
		if errors.Is(err, io.ErrClosedPipe) || strings.Contains(err.Error(), "has ended") {
			return res, errdefs.Conflict("command %s has ended or its stdin is closed", commandID)
		}
		return res, err
	}
	if close {
		c.stdin.Close()
		c.stdinClosed = true
		res.Closed = true
	}
	res.Total = c.stdinBytes.Load()
	return res, nil
}

// ReadOutput is a follower's cursor on a command's output. With max < 0 it does not wait: it
// answers what is kept from off on now, no data when there is none yet.
func (h *Local) ReadOutput(ctx context.Context, commandID, stream string, off int64, max int) (int64, []byte, error) {
	c, err := h.lookupCommand(commandID)
	if err != nil {
		return off, nil, err
	}
	capt := c.stdout
	switch stream {
	case "stdout":
	case "stderr":
		capt = c.stderr
	default:
		return off, nil, errdefs.InvalidArgument("stream must be stdout or stderr")
	}
	if off < 0 {
		off = capt.Recent(-off)
	}
	if max < 0 {
		done, cancel := context.WithCancel(ctx)
		cancel()
		start, data, err := capt.Next(done, off, 0)
		if errors.Is(err, context.Canceled) && ctx.Err() == nil {
			return off, nil, nil
		}
		return start, data, err
	}
	return capt.Next(ctx, off, max)
}

// ReadHeld takes the held output of a command started with Hold, or lets go of its hold.
func (h *Local) ReadHeld(ctx context.Context, req HeldRead) (HeldOutput, error) {
	c, err := h.lookupCommand(req.CommandID)
	if err != nil {
		return HeldOutput{}, err
	}
	if c.hold == nil {
		return HeldOutput{}, errdefs.Conflict("command %s was not started with its output held", req.CommandID)
	}
	if req.Release {
		c.hold.Release()
		return HeldOutput{}, nil
	}
	return c.hold.Read(ctx, map[string]int64{output.Stdout: req.Stdout, output.Stderr: req.Stderr}, req.Max)
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// moveStream waits while sandbox s is moving to a new channel (a snapshot checkpoints and
// restores it) and answers the guest agent of its new life and, for a command with its stdin
// open, the reader of a fresh stdin pipe; nil when the command's stream cannot go on.
func (h *Local) moveStream(ctx context.Context, s *sandbox, c *command) (*agent.Client, io.Reader) {
	old := c.agent.Load()
	for {
		s.mu.Lock()
		moving, l, changed := s.moving, s.live, s.changed
		s.mu.Unlock()
		if !moving {
			if l == nil || l.agent == old {
				return nil, nil
			}
			c.agent.Store(l.agent)
			c.stdinMu.Lock()
			defer c.stdinMu.Unlock()
			if c.stdin == nil || c.stdinClosed {
				return l.agent, nil
			}
			// The old stream's body (the pipe's reader) was closed with it.
			pr, pw := io.Pipe()
			c.stdin = pw
			return l.agent, pr
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil
		}
	}
}
