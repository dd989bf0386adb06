package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// ptyRecent is how much of the output already delivered a re-attached terminal is sent
// again first, to show its screen (within what the server's output tail keeps).
const ptyRecent = 64 << 10

// ptyChunk is the most one binary message of output carries.
const ptyChunk = 32 << 10

// ptyMessage is a text (JSON) message of a terminal's WebSocket. The client sends "resize"
// (cols, rows); the server sends "started" (terminal, sandbox) first and "exit" (exit_code,
// signal, status) last, then closes the socket normally. Every other message is binary: the
// terminal's output from the server, what is typed from the client.
type ptyMessage struct {
	Type     string `json:"type"`
	Terminal string `json:"terminal,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Cols     uint16 `json:"cols,omitempty"`
	Rows     uint16 `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Status   string `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	// Bytes is how many bytes of output a "skipped" message says were not kept.
	Bytes int64 `json:"bytes,omitempty"`
}

// sandboxPty opens a terminal in a sandbox (or re-attaches to one: ?terminal=cmd_…) and
// carries it over a WebSocket. A dropped socket leaves the terminal running for the server's
// terminal grace (--terminal-grace).
func (s *Server) sandboxPty(w http.ResponseWriter, r *http.Request, c *call) error {
	sandboxID := r.PathValue("id")
	c.sandbox = sandboxID
	q := r.URL.Query()
	size := func(name string) (uint16, error) {
		v := q.Get(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return 0, errdefs.InvalidArgument("%s must be a number from 1 to 65535", name)
		}
		return uint16(n), nil
	}
	cols, err := size("cols")
	if err != nil {
		return err
	}
	rows, err := size("rows")
	if err != nil {
		return err
	}
	id := q.Get("terminal")
	reattach := id != ""
	if id == "" {
		env := map[string]string{}
		for _, kv := range q["env"] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return errdefs.InvalidArgument("env %q: want NAME=value", kv)
			}
			env[k] = v
		}
		cmd, err := s.svc.OpenTerminal(r.Context(), c.caller, sandboxID, control.TerminalRequest{
			Argv: q["argv"], Env: env, Cwd: q.Get("cwd"), Cols: cols, Rows: rows, Term: q.Get("term")})
		if err != nil {
			return err
		}
		id = cmd.ID
	} else {
		cmd, err := s.svc.GetCommand(r.Context(), c.caller.Graph, id, 0)
		if err != nil {
			return err
		}
		if cmd.Kind != store.KindTerminal || cmd.SandboxID != sandboxID {
			return errdefs.NotFound("terminal %s not found in sandbox %s", id, sandboxID)
		}
		if store.CommandDone(cmd.Status) {
			return errdefs.Conflict("terminal %s has ended (%s); its record keeps its output", id, cmd.Status)
		}
	}
	c.target = id
	att, err := s.svc.AttachTerminal(c.caller.Graph, id)
	if err != nil {
		return err
	}
	defer att.Detach()
	if cols > 0 && rows > 0 && reattach {
		if err := s.svc.ResizeTerminal(r.Context(), c.caller.Graph, id, cols, rows); err != nil {
			return err
		}
	}

	// The server's read deadline would end the socket: a terminal is read for as long as it
	// is open.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Callers authenticate with a key in a header, which a page of another origin cannot
		// send: there is no ambient credential for a cross-site socket to ride on.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return nil // Accept has answered
	}
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		s.ptyInput(ctx, ws, c.caller.Graph, id)
	}()
	writeMsg := func(m ptyMessage) error {
		b, _ := json.Marshal(m)
		return ws.Write(ctx, websocket.MessageText, b)
	}
	if err := writeMsg(ptyMessage{Type: "started", Terminal: id, Sandbox: sandboxID}); err != nil {
		return nil
	}
	off, _ := att.Sent()
	if reattach {
		if !s.ptyRepaint(ctx, ws, id, off) {
			return nil
		}
	}
	if !s.ptyOutput(ctx, ws, att, id, off) {
		return nil
	}
	select {
	case <-att.Done:
	case <-ctx.Done():
		ws.CloseNow()
		return nil
	case <-time.After(30 * time.Second):
	}
	end := ptyMessage{Type: "exit", Terminal: id}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if cmd, err := s.svc.GetCommand(rctx, c.caller.Graph, id, 0); err == nil {
		end.ExitCode, end.Signal, end.Status, end.Error = cmd.ExitCode, cmd.Signal, cmd.Status, cmd.Error
	}
	writeMsg(end)
	ws.Close(websocket.StatusNormalClosure, "the terminal ended")
	return nil
}

// ptyRepaint sends a re-attached client the recent output it was already sent, up to sent
// (the last run of the last ptyRecent bytes that the output's tail still keeps whole), so
// that it shows the screen. It reports whether the socket is still there.
func (s *Server) ptyRepaint(ctx context.Context, ws *websocket.Conn, id string, sent int64) bool {
	var run []byte
	off := max(0, sent-ptyRecent)
	for off < sent {
		start, data, err := s.svc.ReadOutput(ctx, id, "stdout", off, -1)
		if err != nil || len(data) == 0 || start >= sent {
			break
		}
		if start > off {
			run = run[:0] // a gap: only what leads up to sent without one
		}
		data = data[:min(int64(len(data)), sent-start)]
		run = append(run, data...)
		off = start + int64(len(data))
	}
	if off < sent || len(run) == 0 { // what leads up to sent is not kept
		return true
	}
	return ws.Write(ctx, websocket.MessageBinary, run) == nil
}

// ptyOutput sends a terminal's output from off on until it ends, and reports whether the
// socket is still there. The latest attach takes the output the host agent holds for the
// terminal: every byte in order, the program waiting when the client is slow; it records
// what was delivered, which a re-attach after a drop goes on from. An attach that is not (or
// no longer) the latest, or a hold that was let go (nobody read for the host agent's hold
// idle), follows what the output capture keeps, and a "skipped" message says how many bytes
// it does not have.
func (s *Server) ptyOutput(ctx context.Context, ws *websocket.Conn, att *control.TerminalAttach, id string, off int64) bool {
	send := func(start int64, data []byte) bool {
		if start > off {
			b, _ := json.Marshal(ptyMessage{Type: "skipped", Terminal: id, Bytes: start - off})
			if ws.Write(ctx, websocket.MessageText, b) != nil {
				return false
			}
			off = start
		}
		if start < off { // sent already
			data = data[min(int64(len(data)), off-start):]
		}
		if len(data) == 0 {
			return true
		}
		if ws.Write(ctx, websocket.MessageBinary, data) != nil {
			return false // the socket is gone; the terminal waits for a re-attach
		}
		off += int64(len(data))
		att.Deliver(off)
		return true
	}
	held := true
	for {
		if _, latest := att.Sent(); held && latest {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			h, err := s.svc.ReadHeld(rctx, id, off, 0, ptyChunk)
			waited := rctx.Err() != nil
			cancel()
			switch {
			case ctx.Err() != nil:
				ws.CloseNow()
				return false
			case err != nil && (waited || errors.Is(err, context.DeadlineExceeded)):
				continue // to see whether a later attach took over
			case errdefs.IsNotFound(err):
				return true // ended and gone
			case errdefs.IsConflict(err):
				held = false // not held: follow what is kept
				continue
			case err != nil:
				ws.Close(websocket.StatusInternalError, "reading the terminal: "+err.Error())
				return false
			}
			for _, p := range h.Pieces {
				if p.Stream == "stdout" && !send(p.Offset, p.Data) {
					return false
				}
			}
			if h.Ended {
				return true
			}
			if h.Released {
				held = false
			}
			continue
		}
		start, data, err := s.svc.ReadOutput(ctx, id, "stdout", off, ptyChunk)
		if (err == nil || errors.Is(err, io.EOF)) && !send(start, data) {
			return false
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			ws.CloseNow()
			return false
		}
		if !errors.Is(err, io.EOF) && !errdefs.IsNotFound(err) {
			ws.Close(websocket.StatusInternalError, "reading the terminal: "+err.Error())
			return false
		}
		return true
	}
}

// ptyInput carries what the client types (binary messages) and its resizes (text) to the
// terminal until the socket ends.
func (s *Server) ptyInput(ctx context.Context, ws *websocket.Conn, graph, id string) {
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if err := s.svc.TerminalInput(ctx, graph, id, b); err != nil {
				if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
					continue // it ended: its exit is on its way
				}
				return
			}
		case websocket.MessageText:
			var m ptyMessage
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			if m.Type == "resize" && m.Cols > 0 && m.Rows > 0 {
				s.svc.ResizeTerminal(ctx, graph, id, m.Cols, m.Rows)
			}
		}
	}
}
