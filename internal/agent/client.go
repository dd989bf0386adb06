package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"
)

// Flow control of the host side (MaxStreams). A stream's window is what the host buffers of
// one process's output (or one file, one port connection) when its reader is slow; the
// connection's is every stream's window, so that streams left unread (a preview's visitors
// that stopped reading, a detached command's held output) never stall the others, and the
// host buffers at most clientPerConn (125 MiB) for a sandbox. 128 KiB keeps one stream's
// throughput (stdout, a file read) that of 4 MiB windows on a local socket; 64 KiB halved it.
const (
	clientPerStream = 128 << 10
	clientPerConn   = MaxStreams * clientPerStream
	clientFrameSize = 1 << 20
)

// Client speaks the protocol to one agent over one channel. It is safe for concurrent use:
// calls are multiplexed as HTTP/2 streams.
type Client struct {
	cc   *http.ClientConn
	conn net.Conn
}

// NewClient reads the agent's Hello from conn and starts HTTP/2 (with prior knowledge) over
// it. The read waits for the agent as long as conn's deadline allows: call WaitReady first
// to bound it with a context. Close closes conn.
func NewClient(conn net.Conn) (*Client, error) {
	hello := make([]byte, len(Hello))
	if _, err := io.ReadFull(conn, hello); err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: reading the agent's hello: %w", err)
	}
	if string(hello) != Hello {
		conn.Close()
		return nil, fmt.Errorf("agent: the channel said %q, not %q: another agent version?", hello, Hello)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	var once sync.Once
	t := &http.Transport{
		Protocols:          &protos,
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			once.Do(func() { c = conn })
			if c == nil {
				return nil, errors.New("agent: the channel is already in use")
			}
			return c, nil
		},
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize:              clientFrameSize,
			MaxReceiveBufferPerStream:     clientPerStream,
			MaxReceiveBufferPerConnection: clientPerConn,
		},
	}
	cc, err := t.NewClientConn(context.Background(), "http", "agent:80")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: starting HTTP/2 on the channel: %w", err)
	}
	return &Client{cc: cc, conn: conn}, nil
}

// Close ends every call in flight and closes the channel.
func (c *Client) Close() error {
	err := c.cc.Close()
	if cerr := c.conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

// WaitReady waits until the agent on conn has spoken (its Hello), without consuming anything,
// so that a driver can tell that the agent is up before it hands conn to NewClient. conn must
// be a socket (*net.UnixConn, *net.TCPConn). An agent that died says io.EOF.
func WaitReady(ctx context.Context, conn net.Conn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("agent: WaitReady needs a socket, not %T", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			return
		}
		conn.SetReadDeadline(time.Time{})
	}()
	var n int
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return perr != syscall.EAGAIN
	})
	if ctx.Err() != nil {
		return fmt.Errorf("agent: waiting for the agent: %w", ctx.Err())
	}
	if err == nil {
		err = perr
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	if err != nil {
		return fmt.Errorf("agent: waiting for the agent: %w", err)
	}
	return nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := "http://agent" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return http.NewRequestWithContext(ctx, method, u, body)
}

// do sends req and returns the response when its status is 2xx, else the agent's Error.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.cc.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("agent: %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e = &Error{Code: CodeInternal, Message: fmt.Sprintf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))}
	}
	return nil, e
}

// call sends a request whose answer is JSON (into out, if not nil) or empty.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("agent: %s %s: reading the answer: %w", method, path, err)
		}
	}
	return nil
}

// Ping answers when the agent serves.
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, PathPing, nil, nil, nil)
}

// Process is a started process (or run) whose frames are being received.
type Process struct {
	body   io.ReadCloser
	pid    int
	exit   *Exit // set when the stream was only an Exit frame (a start error)
	buf    []byte
	waited bool
}

// Pid is the process's pid inside the sandbox; 0 when it could not start.
func (p *Process) Pid() int { return p.pid }

// Exec starts a process. stdin, when not nil, is streamed to the process until it returns
// EOF (then the process's stdin is closed) or the process ends; when it is an io.Closer it is
// closed then. A process that cannot start is not an error here: Wait returns its Exit with
// StartError. ctx covers the process's whole life: cancelling it kills the process group.
// Call Wait exactly once.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdin io.Reader) (*Process, error) {
	req.Stdin = stdin != nil
	return c.stream(ctx, PathExec, HeaderExec, req, stdin)
}

// stream starts a process stream at path: the request v in header hdr (unpadded base64url
// JSON), stdin (when not nil) as the body.
func (c *Client) stream(ctx context.Context, path, hdr string, v any, stdin io.Reader) (*Process, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	body := stdin
	if body == nil {
		body = http.NoBody
	}
	r, err := c.newRequest(ctx, http.MethodPost, path, nil, body)
	if err != nil {
		return nil, err
	}
	r.Header.Set(hdr, base64.RawURLEncoding.EncodeToString(b))
	return c.start(r)
}

// Run calls run(input, config) of req.Code with the harness of req.Language. Wait's Exit
// carries OK, Result and Error. Cancelling ctx kills it. Call Wait exactly once.
func (c *Client) Run(ctx context.Context, req RunRequest) (*Process, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r, err := c.newRequest(ctx, http.MethodPost, PathRun, nil, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	return c.start(r)
}

// start sends a process request and reads the first frame: Started, or Exit when the
// process could not start.
func (c *Client) start(r *http.Request) (*Process, error) {
	resp, err := c.do(r)
	if err != nil {
		return nil, err
	}
	// The buffer grows to the largest frame read (MaxFrame at most): most processes' frames
	// are a few bytes, and a 64 KiB buffer zeroed for each would be most of a run's garbage.
	p := &Process{body: resp.Body, buf: make([]byte, 0, 512)}
	kind, payload, err := ReadFrame(resp.Body, p.buf)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("agent: %s: reading the first frame: %w", r.URL.Path, err)
	}
	switch kind {
	case FrameStarted:
		var st Started
		if err := json.Unmarshal(payload, &st); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("agent: bad Started frame: %w", err)
		}
		p.pid = st.Pid
	case FrameExit:
		var ex Exit
		if err := json.Unmarshal(payload, &ex); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("agent: bad Exit frame: %w", err)
		}
		p.exit = &ex
		resp.Body.Close()
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("agent: unexpected first frame %q", kind)
	}
	return p, nil
}

// Wait copies the process's stdout and stderr to the writers (either may be nil) as they
// arrive and returns its Exit. A run's result chunks are joined into Exit.Result (only when
// OK). A slow writer slows the process: output is never buffered without bound.
func (p *Process) Wait(stdout, stderr io.Writer) (Exit, error) {
	if p.waited {
		return Exit{}, errors.New("agent: Wait called twice")
	}
	p.waited = true
	if p.exit != nil {
		return *p.exit, nil
	}
	defer p.body.Close()
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var result []byte
	tooBig := false
	for {
		kind, payload, err := ReadFrame(p.body, p.buf)
		if cap(payload) > cap(p.buf) {
			p.buf = payload[:0]
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Exit{}, fmt.Errorf("agent: the process stream ended without an exit: %w", err)
		}
		switch kind {
		case FrameStdout:
			if _, err := stdout.Write(payload); err != nil {
				return Exit{}, fmt.Errorf("agent: writing stdout: %w", err)
			}
		case FrameStderr:
			if _, err := stderr.Write(payload); err != nil {
				return Exit{}, fmt.Errorf("agent: writing stderr: %w", err)
			}
		case FrameResult:
			if len(result)+len(payload) > MaxResult {
				tooBig, result = true, nil
			} else if !tooBig {
				result = append(result, payload...)
			}
		case FrameExit:
			var ex Exit
			if err := json.Unmarshal(payload, &ex); err != nil {
				return Exit{}, fmt.Errorf("agent: bad Exit frame: %w", err)
			}
			switch {
			case !ex.OK:
			case tooBig:
				ex.OK, ex.Error = false, fmt.Sprintf("the result exceeds %d bytes", MaxResult)
			case len(result) == 0:
				ex.Result = json.RawMessage("null")
			case !json.Valid(result):
				ex.OK, ex.Error = false, "the result is not valid JSON"
			default:
				ex.Result = result
			}
			return ex, nil
		}
	}
}

// Signal signals the process group of the running process id ("SIGTERM", "KILL", "15";
// empty is SIGKILL).
func (c *Client) Signal(ctx context.Context, id, signal string) error {
	return c.call(ctx, http.MethodPost, PathProcs+url.PathEscape(id)+"/signal", nil, SignalRequest{Signal: signal}, nil)
}

// Resize sets the terminal size of the running process id, started with ExecRequest.Pty; its
// foreground job gets SIGWINCH.
func (c *Client) Resize(ctx context.Context, id string, size PtySize) error {
	return c.call(ctx, http.MethodPost, PathProcs+url.PathEscape(id)+"/resize", nil, size, nil)
}

// Attach takes on the stream of detachable process id whose channel ended (see
// AttachRequest); stdin, when not nil, is its stdin from then on. Wait as after Exec.
func (c *Client) Attach(ctx context.Context, id string, req AttachRequest, stdin io.Reader) (*Process, error) {
	req.Stdin = stdin != nil
	return c.stream(ctx, PathProcs+url.PathEscape(id)+"/attach", HeaderAttach, req, stdin)
}

// DropDetached kills the detachable processes whose streams wait for an attach.
func (c *Client) DropDetached(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, PathDropDetached, nil, nil, nil)
}

// HoldTimeouts holds (hold) or releases the timeouts of the processes running (see
// TimeoutsRequest).
func (c *Client) HoldTimeouts(ctx context.Context, hold bool) error {
	return c.call(ctx, http.MethodPost, PathTimeouts, nil, TimeoutsRequest{Hold: hold}, nil)
}

func pathQuery(path string, recursive bool) url.Values {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	return q
}

// List lists a directory (recursive: everything beneath it; symlinks are listed, never
// followed), or gives the one entry of a path that is not a directory.
func (c *Client) List(ctx context.Context, path string, recursive bool) ([]FileEntry, error) {
	var out []FileEntry
	err := c.call(ctx, http.MethodGet, PathFiles, pathQuery(path, recursive), nil, &out)
	return out, err
}

// ReadFile streams a file. The caller closes the reader.
func (c *Client) ReadFile(ctx context.Context, path string) (*FileReader, error) {
	req, err := c.newRequest(ctx, http.MethodGet, PathFileContent, pathQuery(path, false), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	return &FileReader{ReadCloser: resp.Body, Size: resp.ContentLength}, nil
}

// FileReader streams a file's bytes. Size is the file's size when the agent opened it, the
// number of bytes the stream carries (-1 when unknown); a file that shrinks while it is read
// ends the stream with an error, one that grows is read up to Size.
type FileReader struct {
	io.ReadCloser
	Size int64
}

// WriteFile streams r into path, replacing it whole once r is at EOF; parents are made.
// mode 0 keeps the mode of a file being replaced, else 0644.
func (c *Client) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader) error {
	q := pathQuery(path, false)
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	if r == nil {
		r = http.NoBody
	}
	req, err := c.newRequest(ctx, http.MethodPut, PathFileContent, q, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// Remove removes a file or symlink, or a directory (recursive when not empty).
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.call(ctx, http.MethodDelete, PathFiles, pathQuery(path, recursive), nil, nil)
}

// Mkdir makes a directory and its parents; an existing directory is fine.
func (c *Client) Mkdir(ctx context.Context, path string) error {
	return c.call(ctx, http.MethodPost, PathMkdir, pathQuery(path, false), nil, nil)
}

// SetIdentity binds a hostname, machine id and fresh entropy to the sandbox.
func (c *Client) SetIdentity(ctx context.Context, id Identity) error {
	return c.call(ctx, http.MethodPost, PathIdentity, nil, id, nil)
}

// Prestart starts an interpreter for language that waits for the next Run of that language
// (see PrestartRequest). It returns once the interpreter has loaded its imports; cancelling
// ctx before that kills it.
func (c *Client) Prestart(ctx context.Context, req PrestartRequest) error {
	return c.call(ctx, http.MethodPost, PathPrestart, nil, req, nil)
}

// Do sends a request as it is given, for tests that play a buggy or hostile host (a path, a
// header or a body no typed call would send): nil when the agent answers 2xx (the answer's
// body is discarded), else the agent's Error.
func (c *Client) Do(ctx context.Context, method, path string, hdr http.Header, body io.Reader) error {
	req, err := c.newRequest(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}
