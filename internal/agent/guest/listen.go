package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// The streams the guest starts (protocol.go): a Listen call serves listeners on the
// sandbox's loopback; each connection they accept waits, as a pending conn, for the host to
// accept it (the accept call's handler then bridges it) or to refuse it.

// maxConns bounds the connections of the listeners that are pending or bridged at once: a
// process that opens thousands holds no more of the agent than this.
const maxConns = 512

// conns is the guest's table of listeners and pending connections.
type conns struct {
	mu      sync.Mutex
	session *session
	pending map[string]*pendingConn
	seq     uint64
	active  int
}

// session is one Listen call: its listeners, the lines it writes and the env it adds.
type session struct {
	lines   chan agent.ConnRequest
	closers []io.Closer
	env     map[string]string
	done    chan struct{}
	// addrs are the listeners' bound addresses, with what each serves.
	addrs map[*net.TCPAddr]string
}

type pendingConn struct {
	req    agent.ConnRequest
	sess   *session
	answer chan connAnswer // buffered: whoever removes it from the table answers once
}

// connAnswer is the host's answer: a refusal, or take, where the listener hands over its
// client's connection (nil when it could not reply) once it told its client yes.
type connAnswer struct {
	refusal *agent.Refusal
	take    chan net.Conn
}

// env is what the current session adds to processes' environment (nil without one).
func (c *conns) env() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return nil
	}
	return maps.Clone(c.session.env)
}

// open hands a connection to the host and waits for its answer: the channel to hand the
// client's connection over on, or why not.
func (c *conns) open(kind, host string, port int) (chan<- net.Conn, *agent.Refusal) {
	c.mu.Lock()
	sess := c.session
	switch {
	case sess == nil:
		c.mu.Unlock()
		return nil, &agent.Refusal{Code: agent.RefuseUnavailable, Message: "the sandbox's egress is not open"}
	case c.active >= maxConns:
		c.mu.Unlock()
		return nil, &agent.Refusal{Code: agent.RefuseUnavailable, Message: fmt.Sprintf("the sandbox has %d connections open, the most it may", maxConns)}
	}
	c.seq++
	p := &pendingConn{req: agent.ConnRequest{ID: "c" + strconv.FormatUint(c.seq, 10), Kind: kind, Host: host, Port: port},
		sess: sess, answer: make(chan connAnswer, 1)}
	if c.pending == nil {
		c.pending = map[string]*pendingConn{}
	}
	c.pending[p.req.ID] = p
	c.active++
	c.mu.Unlock()
	select {
	case sess.lines <- p.req:
	case <-sess.done:
	default:
		if c.take(p.req.ID) != nil {
			c.release()
			return nil, &agent.Refusal{Code: agent.RefuseUnavailable, Message: "the host is not taking connections"}
		}
	}
	t := time.NewTimer(agent.ConnAnswerTimeout)
	defer t.Stop()
	var a connAnswer
	select {
	case a = <-p.answer:
	case <-t.C:
		if c.take(p.req.ID) != nil {
			c.release()
			return nil, &agent.Refusal{Code: agent.RefuseUnavailable, Message: "the host did not answer in time"}
		}
		a = <-p.answer // the host is answering
	}
	if a.refusal != nil {
		c.release()
		return nil, a.refusal
	}
	return a.take, nil
}

// take removes a pending connection from the table; whoever takes it answers it.
func (c *conns) take(id string) *pendingConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[id]
	delete(c.pending, id)
	return p
}

// release ends a connection's count.
func (c *conns) release() {
	c.mu.Lock()
	c.active--
	c.mu.Unlock()
}

// start ends the current session, if any, and opens one on req's listeners.
func (c *conns) start(s *Server, req agent.ListenRequest) (*session, agent.Listening, error) {
	c.mu.Lock()
	old := c.session
	c.mu.Unlock()
	if old != nil {
		c.end(old)
	}
	sess := &session{lines: make(chan agent.ConnRequest, 256), done: make(chan struct{}), addrs: map[*net.TCPAddr]string{}}
	var bound agent.Listening
	fail := func(err error) (*session, agent.Listening, error) {
		for _, cl := range sess.closers {
			cl.Close()
		}
		return nil, bound, err
	}
	listen := func(addr, what string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, &agent.Error{Code: agent.CodeInvalid, Message: "listen: " + err.Error()}
		}
		sess.closers = append(sess.closers, ln)
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			sess.addrs[a] = what
		}
		return ln, nil
	}
	env := map[string]string{}
	if req.Proxy != "" {
		ln, err := listen(req.Proxy, "the egress proxy")
		if err != nil {
			return fail(err)
		}
		srv := s.proxyServer()
		sess.closers = append(sess.closers, srv)
		go srv.Serve(ln)
		bound.Proxy = ln.Addr().String()
		u := "http://" + bound.Proxy
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = u
		}
		env["NO_PROXY"], env["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
		env["NODE_USE_ENV_PROXY"] = "1"
	}
	if req.SOCKS != "" {
		ln, err := listen(req.SOCKS, "the egress SOCKS proxy")
		if err != nil {
			return fail(err)
		}
		go acceptLoop(ln, s.serveSOCKS)
		bound.SOCKS = ln.Addr().String()
		env["ALL_PROXY"], env["all_proxy"] = "socks5h://"+bound.SOCKS, "socks5h://"+bound.SOCKS
	}
	if req.API != "" {
		ln, err := listen(req.API, "the in-sandbox API")
		if err != nil {
			return fail(err)
		}
		go acceptLoop(ln, s.serveAPI)
		bound.API = ln.Addr().String()
		env["LBB_URL"] = "http://" + bound.API
	}
	maps.Copy(env, req.Env)
	sess.env = env
	c.mu.Lock()
	c.session = sess
	c.mu.Unlock()
	return sess, bound, nil
}

// serving answers what the current session's listener on addr serves ("" when none does):
// a listener on an unspecified address serves every address of its port.
func (c *conns) serving(addr *net.TCPAddr) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return ""
	}
	for a, what := range c.session.addrs {
		if a.Port == addr.Port && (a.IP.Equal(addr.IP) || a.IP.IsUnspecified()) {
			return what
		}
	}
	return ""
}

// end closes a session's listeners and refuses its pending connections; connections already
// bridged run on.
func (c *conns) end(sess *session) {
	c.mu.Lock()
	if c.session == sess {
		c.session = nil
	}
	select {
	case <-sess.done:
		c.mu.Unlock()
		return
	default:
		close(sess.done)
	}
	var left []*pendingConn
	for id, p := range c.pending {
		if p.sess == sess {
			left = append(left, p)
			delete(c.pending, id)
		}
	}
	c.mu.Unlock()
	for _, cl := range sess.closers {
		cl.Close()
	}
	for _, p := range left {
		p.answer <- connAnswer{refusal: &agent.Refusal{Code: agent.RefuseUnavailable, Message: "the sandbox's egress closed"}}
	}
}

func acceptLoop(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go serve(c)
	}
}

// handleListen serves a Listen call: the listeners, then a line per connection they accept,
// until the call or the session ends.
func (s *Server) handleListen(w http.ResponseWriter, r *http.Request) {
	var req agent.ListenRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "listen request: " + err.Error()})
		return
	}
	for k, v := range req.Env {
		if k == "" || len(k) > 256 || len(v) > 4096 {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("listen env %q is not valid", k)})
			return
		}
	}
	sess, bound, err := s.conns.start(s, req)
	if err != nil {
		writeError(w, err)
		return
	}
	defer s.conns.end(sess)
	b, _ := json.Marshal(bound)
	w.Header().Set(agent.HeaderListening, string(b))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case cr := <-sess.lines:
			if enc.Encode(cr) != nil || rc.Flush() != nil {
				return
			}
		case <-sess.done:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// handleConnRefuse answers a pending connection with the host's refusal.
func (s *Server) handleConnRefuse(w http.ResponseWriter, r *http.Request) {
	var ref agent.Refusal
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&ref); err != nil || ref.Code == "" {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "refusal: want {code, message}"})
		return
	}
	p := s.conns.take(r.PathValue("id"))
	if p == nil {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: "no pending connection " + r.PathValue("id")})
		return
	}
	p.answer <- connAnswer{refusal: &ref}
	w.WriteHeader(http.StatusNoContent)
}

// handleConnAccept answers a pending connection with this stream and bridges the two until
// both directions have ended.
func (s *Server) handleConnAccept(w http.ResponseWriter, r *http.Request) {
	p := s.conns.take(r.PathValue("id"))
	if p == nil {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: "no pending connection " + r.PathValue("id")})
		return
	}
	defer s.conns.release()
	take := make(chan net.Conn, 1)
	p.answer <- connAnswer{take: take}
	var conn net.Conn
	select {
	case conn = <-take:
	case <-r.Context().Done():
		go func() {
			if c := <-take; c != nil {
				c.Close()
			}
		}()
		return
	}
	if conn == nil {
		return
	}
	serveStream(w, r, conn)
}

// serveStream answers a stream's call with 200 and bridges conn to it.
func serveStream(w http.ResponseWriter, r *http.Request, conn net.Conn) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		conn.Close()
		return
	}
	bridge(conn, w, rc, r.Body)
}

// handlePortConnect connects to a port on the sandbox's loopback for the host (a preview).
func (s *Server) handlePortConnect(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "port must be from 1 to 65535"})
		return
	}
	if s.portStreams.Add(1) > agent.MaxPortStreams {
		s.portStreams.Add(-1)
		writeError(w, &agent.Error{Code: agent.CodePortRefused, Message: fmt.Sprintf("the sandbox has %d connections to its ports open, the most it may", agent.MaxPortStreams)})
		return
	}
	defer s.portStreams.Add(-1)
	// The agent's own listeners are the sandbox's programs' way out (the API's carries the
	// sandbox's grant), never what a preview shows.
	var conn net.Conn
	var own string
	for _, ip := range []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} {
		addr := &net.TCPAddr{IP: ip, Port: port}
		if what := s.conns.serving(addr); what != "" {
			own = what
			continue
		}
		if conn, err = net.DialTimeout("tcp", addr.String(), 5*time.Second); err == nil {
			break
		}
	}
	if conn == nil && own != "" {
		writeError(w, &agent.Error{Code: agent.CodePermission, Message: fmt.Sprintf("port %d is the agent's own (%s), not the sandbox's", port, own)})
		return
	}
	if conn == nil {
		writeError(w, &agent.Error{Code: agent.CodePortRefused, Message: fmt.Sprintf("nothing listens on port %d in the sandbox: %v", port, err)})
		return
	}
	serveStream(w, r, conn)
}

// bridge copies body into conn and conn into w until both have ended; an end of one
// direction half-closes it.
func bridge(conn net.Conn, w io.Writer, rc *http.ResponseController, body io.Reader) {
	defer conn.Close()
	in := make(chan struct{})
	go func() {
		defer close(in)
		if _, err := io.Copy(conn, body); err != nil {
			conn.Close()
			return
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			conn.Close()
		}
	}()
	buf := make([]byte, agent.FrameHeaderLen+agent.MaxFrame)
	for {
		n, err := conn.Read(buf[agent.FrameHeaderLen:])
		if n > 0 {
			agent.PutFrameHeader(buf, agent.FrameData, n)
			if _, werr := w.Write(buf[:agent.FrameHeaderLen+n]); werr != nil || rc.Flush() != nil {
				conn.Close()
				break
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				conn.Close()
				break
			}
			// The connection sent all it will: say so, and let the other direction go on.
			agent.PutFrameHeader(buf, agent.FrameEnd, 0)
			if _, werr := w.Write(buf[:agent.FrameHeaderLen]); werr != nil || rc.Flush() != nil {
				conn.Close()
			}
			break
		}
	}
	<-in
}

// bufConn is a connection whose first bytes were read into a buffer already.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// serveAPI hands a connection to the forwarded API to the host, as it is.
func (s *Server) serveAPI(c net.Conn) {
	take, ref := s.conns.open(agent.ConnAPI, "", 0)
	if ref != nil {
		c.Close()
		return
	}
	take <- c
}
