package lbb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"
)

// TerminalParams open a terminal (GET /v1/sandboxes/{id}/pty).
type TerminalParams struct {
	// Argv is what runs on the terminal; default a login shell (bash -l).
	Argv []string
	Env  map[string]string
	Cwd  string
	// Cols and Rows are its size; default 80×24.
	Cols, Rows int
	// Term is its TERM; default xterm-256color.
	Term string
}

// Terminal is a terminal in a sandbox, attached over a WebSocket: Read its output (io.EOF
// once it has ended; Exit then says how), Write what is typed (^C is "\x03"), Resize it.
// Close detaches: the terminal lives on for a grace period (two minutes) in which
// AttachTerminal with its ID re-attaches and first reads its recent output.
type Terminal struct {
	// ID is the terminal's command id (its record: Commands.Get).
	ID      string
	Sandbox string

	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	pend   []byte
	mu     sync.Mutex
	exit   *TerminalMessage
}

// OpenTerminal opens a terminal in a running sandbox.
func (s *SandboxesService) OpenTerminal(ctx context.Context, id string, p TerminalParams) (*Terminal, error) {
	q := url.Values{}
	for _, a := range p.Argv {
		q.Add("argv", a)
	}
	for k, v := range p.Env {
		q.Add("env", k+"="+v)
	}
	if p.Cwd != "" {
		q.Set("cwd", p.Cwd)
	}
	if p.Term != "" {
		q.Set("term", p.Term)
	}
	setSize(q, p.Cols, p.Rows)
	return s.dialTerminal(ctx, id, q)
}

// AttachTerminal re-attaches to a running terminal of a sandbox (and resizes it when cols
// and rows are not 0). Its recent output is read first.
func (s *SandboxesService) AttachTerminal(ctx context.Context, sandboxID, terminalID string, cols, rows int) (*Terminal, error) {
	q := url.Values{"terminal": {terminalID}}
	setSize(q, cols, rows)
	return s.dialTerminal(ctx, sandboxID, q)
}

func setSize(q url.Values, cols, rows int) {
	if cols > 0 && rows > 0 {
		q.Set("cols", strconv.Itoa(cols))
		q.Set("rows", strconv.Itoa(rows))
	}
}

func (s *SandboxesService) dialTerminal(ctx context.Context, id string, q url.Values) (*Terminal, error) {
	c := s.c
	q.Set("graph", c.graph)
	u := c.baseURL + s.path(id, "/pty") + "?" + q.Encode()
	hdr := http.Header{}
	if c.apiKey != "" {
		hdr.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		hdr.Set("User-Agent", c.userAgent)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(resp.Body)
			return nil, decodeError(resp.StatusCode, b)
		}
		return nil, fmt.Errorf("lbb: terminal: %w", err)
	}
	ws.SetReadLimit(1 << 20)
	tctx, cancel := context.WithCancel(context.Background())
	t := &Terminal{Sandbox: id, ws: ws, ctx: tctx, cancel: cancel}
	typ, b, err := ws.Read(ctx)
	var m TerminalMessage
	if err != nil || typ != websocket.MessageText || json.Unmarshal(b, &m) != nil || m.Type != "started" {
		t.Close()
		return nil, fmt.Errorf("lbb: terminal: no started message (%v)", err)
	}
	t.ID = m.Terminal
	return t, nil
}

// Read reads the terminal's output; io.EOF once it has ended.
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.pend) == 0 {
		typ, b, err := t.ws.Read(t.ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure && t.Exit() != nil {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("lbb: terminal: %w", err)
		}
		if typ == websocket.MessageText {
			var m TerminalMessage
			if json.Unmarshal(b, &m) == nil && m.Type == "exit" {
				t.mu.Lock()
				t.exit = &m
				t.mu.Unlock()
			}
			continue
		}
		t.pend = b
	}
	n := copy(p, t.pend)
	t.pend = t.pend[n:]
	return n, nil
}

// Write sends what is typed.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.ws.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, fmt.Errorf("lbb: terminal: %w", err)
	}
	return len(p), nil
}

// Resize sets the terminal's size; its foreground program gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 65535 || rows > 65535 {
		return errors.New("lbb: terminal: cols and rows must be from 1 to 65535")
	}
	b, _ := json.Marshal(TerminalMessage{Type: "resize", Cols: int64(cols), Rows: int64(rows)})
	return t.ws.Write(ctx, websocket.MessageText, b)
}

// Exit is how the terminal ended, once Read has answered io.EOF; nil before.
func (t *Terminal) Exit() *TerminalMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit
}

// ExitCode is the terminal's exit status once it has ended (128+n for signal n), else -1.
func (t *Terminal) ExitCode() int {
	if e := t.Exit(); e != nil && e.ExitCode != nil {
		return int(*e.ExitCode)
	}
	return -1
}

// Close detaches from the terminal; it lives on for the grace period.
func (t *Terminal) Close() error {
	t.cancel()
	t.ws.Close(websocket.StatusNormalClosure, "detached")
	return nil
}

// PreviewParams ask for a preview URL.
type PreviewParams struct {
	// ExpiresInSeconds is how long the URL is valid; default 3600, at most 7 days.
	ExpiresInSeconds int64 `json:"expires_in_seconds,omitempty"`
}

// PreviewURL signs an expiring URL of a port of a running sandbox (a preview): a process
// listening there (on 127.0.0.1 or 0.0.0.0) is reached through it, HTTP and WebSocket alike,
// by anyone who has it until it expires; nothing else reaches the port.
func (s *SandboxesService) PreviewURL(ctx context.Context, id string, port int, p PreviewParams) (*Preview, error) {
	return call[Preview](ctx, s.c, request{method: http.MethodPost, path: s.path(id, "/ports/"+strconv.Itoa(port)+"/url"), body: p})
}

// Previews lists a sandbox's previews, newest first (their URLs are shown only when made).
func (s *SandboxesService) Previews(ctx context.Context, id string, p ListParams) (*List[Preview], error) {
	return get[List[Preview]](ctx, s.c, s.path(id, "/previews"), p.query())
}

// DeletePreview revokes a preview: its URL answers 404 from now on.
func (s *SandboxesService) DeletePreview(ctx context.Context, sandboxID, previewID string) error {
	_, err := s.c.do(ctx, request{method: http.MethodDelete, path: s.path(sandboxID, "/previews/"+url.PathEscape(previewID)), retry: true}, nil)
	return err
}
