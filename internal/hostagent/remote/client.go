package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Client is a hostagent.Host in another process, reached at a URL served by NewServer.
// A failure to reach it is errdefs Unavailable; a call whose context ended answers the
// context's error.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

var _ hostagent.Host = (*Client)(nil)

// NewClient reaches the host agent at baseURL (http://host:port for cleartext HTTP/2, on
// loopback only; https for TLS, verified with the system's roots, which SSL_CERT_FILE or
// SSL_CERT_DIR extend with a private CA) with token.
func NewClient(baseURL, token string) (*Client, error) { return newClient(baseURL, token, nil) }

func newClient(baseURL, token string, tlsConfig *tls.Config) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("host agent URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("host agent URL %q: want http://host:port or https://host:port", baseURL)
	}
	// Whoever reads the token runs code on that host: in clear text only on loopback (lbb
	// host serves no other address without TLS).
	if u.Scheme == "http" && !Loopback(u.Hostname()) {
		return nil, fmt.Errorf("host agent URL %q: clear text off loopback; serve the host agent with --tls-cert and name it https://", baseURL)
	}
	if token == "" {
		return nil, errors.New("host agent: no token")
	}
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:       &p,
		TLSClientConfig: tlsConfig,
		// Windows as the server's (maxStreams); pings find a host that went away under a long
		// call (a follower, events).
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize:              frameSize,
			MaxReceiveBufferPerStream:     streamWindow,
			MaxReceiveBufferPerConnection: connWindow,
			SendPingTimeout:               30 * time.Second,
		},
	}
	return &Client{base: strings.TrimSuffix(u.String(), "/") + "/v1/", token: token, hc: &http.Client{Transport: tr}}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// post sends one call and answers its response when it succeeded; the caller closes its
// body, which ends the call.
func (c *Client) post(ctx context.Context, method string, query url.Values, body io.Reader) (*http.Response, error) {
	u := c.base + method
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	// The transport closes a body it is given; the caller's reader is not ours to close. Our
	// own JSON stays a bytes.Reader, which the transport can send again after a GOAWAY.
	var src *sourceReader
	if _, own := body.(*bytes.Reader); body != nil && !own {
		src = &sourceReader{r: body}
		body = src
	}
	// The request outlives ctx by up to cancelGrace: ctx's end is sent as a Cancel, and the
	// call answers what the Host then answered. A Cancel the server did not take (the host
	// unreachable, the link stalled) resets the stream at once, which ends the server's call
	// too.
	id := rand.Text()
	rctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if c.cancel(id) != nil {
			abort()
			return
		}
		time.AfterFunc(cancelGrace, abort)
	})
	end := sync.OnceFunc(func() { stop(); abort() })
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, body)
	if err != nil {
		end()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set(headerCall, id)
	resp, err := c.hc.Do(req)
	if err != nil {
		end()
		if err := src.failed(); err != nil {
			return nil, err
		}
		return nil, broken(ctx, method, err)
	}
	resp.Body = callBody{resp.Body, end}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	var we wireError
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&we); err != nil || we.Class == "" {
		return nil, errdefs.New(errdefs.ClassUnavailable, "", "host agent %s: %s", method, resp.Status)
	}
	return nil, we.err(ctx)
}

// cancel asks the server to end the context of call id, and answers whether it took it
// within cancelAnswer.
func (c *Client) cancel(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelAnswer)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"Cancel", jsonReader(idArgs{id}))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("host agent Cancel: %s", resp.Status)
	}
	return nil
}

// callBody ends its call when closed.
type callBody struct {
	io.ReadCloser
	end func()
}

func (b callBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

// broken is a call that got no answer: the caller's context ended, or the host is not
// reachable.
func broken(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("host agent %s: %w", method, ctx.Err())
	}
	return errdefs.Wrap(errdefs.ClassUnavailable, hostagent.CodeUnreachable, fmt.Errorf("host agent %s: %w", method, err))
}

// sourceReader keeps the error of the caller's reader, which is the call's error when the
// request could not be sent for it (a body over its limit, say).
type sourceReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
	return n, err
}

func (s *sourceReader) failed() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// do is a call with JSON arguments (nil: none) and a JSON result.
func do[R any](ctx context.Context, c *Client, method string, args any) (R, error) {
	var res R
	var body io.Reader
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return res, fmt.Errorf("host agent %s: %w", method, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.post(ctx, method, nil, body)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return res, broken(ctx, method, err)
	}
	return res, nil
}

// ok is do for a call that answers nothing but its error.
func ok(ctx context.Context, c *Client, method string, args any) error {
	_, err := do[struct{}](ctx, c, method, args)
	return err
}

func (c *Client) Info(ctx context.Context) (hostagent.Info, error) {
	return do[hostagent.Info](ctx, c, "Info", nil)
}

func (c *Client) Claim(ctx context.Context, req hostagent.RunRequest) error {
	return ok(ctx, c, "Claim", req)
}

func (c *Client) Unclaim(ctx context.Context, sandboxID string) error {
	return ok(ctx, c, "Unclaim", idArgs{sandboxID})
}

func (c *Client) Run(ctx context.Context, req hostagent.RunRequest) (hostagent.RunResult, error) {
	return do[hostagent.RunResult](ctx, c, "Run", req)
}

func (c *Client) Release(ctx context.Context, sandboxID string) (hostagent.Ending, error) {
	return do[hostagent.Ending](ctx, c, "Release", idArgs{sandboxID})
}

func (c *Client) Create(ctx context.Context, req hostagent.CreateRequest) (hostagent.Sandbox, error) {
	return do[hostagent.Sandbox](ctx, c, "Create", req)
}

func (c *Client) Resume(ctx context.Context, req hostagent.ResumeRequest) (hostagent.Sandbox, error) {
	return do[hostagent.Sandbox](ctx, c, "Resume", req)
}

func (c *Client) Stop(ctx context.Context, id string) (store.Usage, error) {
	return do[store.Usage](ctx, c, "Stop", idArgs{id})
}

func (c *Client) ArchiveWorkspace(ctx context.Context, id string) (hostagent.Workspace, error) {
	return do[hostagent.Workspace](ctx, c, "ArchiveWorkspace", idArgs{id})
}

func (c *Client) Destroy(ctx context.Context, id string) (store.Usage, error) {
	return do[store.Usage](ctx, c, "Destroy", idArgs{id})
}

func (c *Client) Pause(ctx context.Context, id string) (hostagent.Paused, error) {
	return do[hostagent.Paused](ctx, c, "Pause", idArgs{id})
}

func (c *Client) Snapshot(ctx context.Context, id, snapshotID string) (hostagent.SnapshotInfo, error) {
	return do[hostagent.SnapshotInfo](ctx, c, "Snapshot", snapshotArgs{id, snapshotID})
}

func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	return ok(ctx, c, "DeleteSnapshot", idArgs{snapshotID})
}

func (c *Client) Fork(ctx context.Context, req hostagent.ForkRequest) (hostagent.Sandbox, error) {
	return do[hostagent.Sandbox](ctx, c, "Fork", req)
}

func (c *Client) Usage(ctx context.Context, id string) (store.Usage, error) {
	return do[store.Usage](ctx, c, "Usage", idArgs{id})
}

func (c *Client) SetExpiry(ctx context.Context, id string, at time.Time) error {
	return ok(ctx, c, "SetExpiry", expiryArgs{id, at})
}

func (c *Client) SetGrant(ctx context.Context, id string, grant *egress.Grant) error {
	return ok(ctx, c, "SetGrant", grantArgs{id, grant})
}

func (c *Client) Exec(ctx context.Context, req hostagent.ExecRequest) error {
	return ok(ctx, c, "Exec", req)
}

func (c *Client) Wait(ctx context.Context, commandID string) (hostagent.CommandEnd, error) {
	return do[hostagent.CommandEnd](ctx, c, "Wait", idArgs{commandID})
}

func (c *Client) Signal(ctx context.Context, commandID, signal string) error {
	return ok(ctx, c, "Signal", signalArgs{commandID, signal})
}

func (c *Client) Resize(ctx context.Context, commandID string, size hostagent.PtySize) error {
	return ok(ctx, c, "Resize", resizeArgs{commandID, size})
}

// DialPort is one full-duplex call: its request body carries what is sent to the port, its
// answer what comes back. The connection outlives ctx (which bounds the dial) until Close.
func (c *Client) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	// Not post: an answer that is an error must end the request body before the transport
	// lets go of the call, and post's reader hides the pipe from it.
	pr, pw := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	q := url.Values{"sandbox_id": {sandboxID}, "port": {strconv.Itoa(port)}}
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, c.base+"DialPort?"+q.Encode(), pr)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		pw.CloseWithError(err)
		cancel()
		return nil, broken(ctx, "DialPort", err)
	}
	if resp.StatusCode != http.StatusOK {
		pw.Close()
		defer cancel()
		defer resp.Body.Close()
		var we wireError
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&we); err != nil || we.Class == "" {
			return nil, errdefs.New(errdefs.ClassUnavailable, "", "host agent DialPort: %s", resp.Status)
		}
		return nil, we.err(ctx)
	}
	return &remoteConn{body: resp.Body, pw: pw, cancel: cancel, port: port}, nil
}

// remoteConn is a DialPort call as a net.Conn. Deadlines are not kept: its users end it with
// Close.
type remoteConn struct {
	body   io.ReadCloser
	pw     *io.PipeWriter
	cancel context.CancelFunc
	port   int
	once   sync.Once
}

func (c *remoteConn) Read(p []byte) (int, error)  { return c.body.Read(p) }
func (c *remoteConn) Write(p []byte) (int, error) { return c.pw.Write(p) }
func (c *remoteConn) CloseWrite() error           { return c.pw.Close() }
func (c *remoteConn) Close() error {
	c.once.Do(func() {
		c.pw.CloseWithError(net.ErrClosed)
		c.body.Close()
		c.cancel()
	})
	return nil
}
func (c *remoteConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *remoteConn) RemoteAddr() net.Addr             { return &net.TCPAddr{Port: c.port} }
func (c *remoteConn) SetDeadline(time.Time) error      { return nil }
func (c *remoteConn) SetReadDeadline(time.Time) error  { return nil }
func (c *remoteConn) SetWriteDeadline(time.Time) error { return nil }

// WriteStdin streams r as the request body.
func (c *Client) WriteStdin(ctx context.Context, commandID string, r io.Reader, closeIt bool) (hostagent.StdinResult, error) {
	q := url.Values{"command_id": {commandID}, "close": {strconv.FormatBool(closeIt)}}
	return streamUp[hostagent.StdinResult](ctx, c, "WriteStdin", q, r)
}

// ReadOutput waits on the server as long as the Host does (a long poll).
func (c *Client) ReadOutput(ctx context.Context, commandID, stream string, off int64, max int) (int64, []byte, error) {
	resp, err := c.post(ctx, "ReadOutput", nil, jsonReader(outputArgs{commandID, stream, off, max}))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	start, err := strconv.ParseInt(resp.Header.Get(headerStart), 10, 64)
	if err != nil {
		return 0, nil, broken(ctx, "ReadOutput", fmt.Errorf("%s: %w", headerStart, err))
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, broken(ctx, "ReadOutput", err)
	}
	if len(data) == 0 {
		data = nil
	}
	if resp.Header.Get(headerEOF) != "" {
		return start, data, io.EOF
	}
	return start, data, nil
}

// ReadHeld waits on the server as long as the Host does (a long poll). An answer lost on the
// way loses nothing: the next read from the same offsets answers the same bytes.
func (c *Client) ReadHeld(ctx context.Context, req hostagent.HeldRead) (hostagent.HeldOutput, error) {
	return do[hostagent.HeldOutput](ctx, c, "ReadHeld", req)
}

// WriteFile streams r as the request body.
func (c *Client) WriteFile(ctx context.Context, sandboxID, path string, r io.Reader) (hostagent.FileEntry, error) {
	return streamUp[hostagent.FileEntry](ctx, c, "WriteFile", url.Values{"sandbox_id": {sandboxID}, "path": {path}}, r)
}

func streamUp[R any](ctx context.Context, c *Client, method string, q url.Values, r io.Reader) (R, error) {
	var res R
	if r == nil {
		r = http.NoBody
	}
	resp, err := c.post(ctx, method, q, r)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return res, broken(ctx, method, err)
	}
	return res, nil
}

// OpenFile answers the file as the response body streams it; the caller closes it.
func (c *Client) OpenFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, io.ReadCloser, error) {
	resp, err := c.post(ctx, "OpenFile", nil, jsonReader(fileArgs{SandboxID: sandboxID, Path: path}))
	if err != nil {
		return hostagent.FileEntry{}, nil, err
	}
	var fe hostagent.FileEntry
	if err := json.Unmarshal([]byte(resp.Header.Get(headerFile)), &fe); err != nil {
		resp.Body.Close()
		return fe, nil, broken(ctx, "OpenFile", fmt.Errorf("%s: %w", headerFile, err))
	}
	return fe, fileBody{ctx, resp}, nil
}

// fileBody is a file's content; a failure on the host while streaming it ends it with
// that failure rather than io.EOF.
type fileBody struct {
	ctx  context.Context
	resp *http.Response
}

func (b fileBody) Read(p []byte) (int, error) {
	n, err := b.resp.Body.Read(p)
	if err == io.EOF {
		if v := b.resp.Trailer.Get(headerError); v != "" {
			var we wireError
			if json.Unmarshal([]byte(v), &we) == nil {
				return n, we.err(b.ctx)
			}
			return n, errdefs.New(errdefs.ClassInternal, "", "host agent OpenFile: %s", v)
		}
	}
	return n, err
}

func (b fileBody) Close() error { return b.resp.Body.Close() }

func (c *Client) StatFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return do[hostagent.FileEntry](ctx, c, "StatFile", fileArgs{SandboxID: sandboxID, Path: path})
}

func (c *Client) ListFiles(ctx context.Context, sandboxID, path string, recursive bool) ([]hostagent.FileEntry, error) {
	return do[[]hostagent.FileEntry](ctx, c, "ListFiles", fileArgs{sandboxID, path, recursive})
}

func (c *Client) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return ok(ctx, c, "RemoveFile", fileArgs{sandboxID, path, recursive})
}

func (c *Client) MakeDir(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return do[hostagent.FileEntry](ctx, c, "MakeDir", fileArgs{SandboxID: sandboxID, Path: path})
}

func (c *Client) Sandboxes(ctx context.Context) ([]string, error) {
	return do[[]string](ctx, c, "Sandboxes", nil)
}

func (c *Client) Reap(ctx context.Context, keep []string) ([]string, error) {
	return do[[]string](ctx, c, "Reap", reapArgs{keep})
}

// Events reads the server's stream of events into the channel, which closes when ctx ends
// or the stream breaks off.
func (c *Client) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	resp, err := c.post(ctx, "Events", nil, nil)
	if err != nil {
		return nil, err
	}
	ch := make(chan hostagent.Event, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev hostagent.Event
			if dec.Decode(&ev) != nil {
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func jsonReader(v any) io.Reader {
	b, _ := json.Marshal(v) // the argument structs always marshal
	return bytes.NewReader(b)
}

// Loopback reports whether host (a name or address) is this machine's loopback.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
