package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// HTTPOptions configure the streamable HTTP handler.
type HTTPOptions struct {
	// Log gets the handler's log lines; none when nil.
	Log *slog.Logger
	// HTTPClient makes the calls to the API; http.DefaultClient when nil.
	HTTPClient *http.Client
	// SessionTimeout closes a session idle this long; 0 means 30 minutes.
	SessionTimeout time.Duration
}

// NewHTTPHandler serves MCP over streamable HTTP, for the server's /mcp route. Every
// request needs an Authorization: Bearer key of the API, and every tool call goes to the
// API at baseURL (the server's own address) with the key of the request that made it, so an
// MCP client sees and may do exactly what its key may. ?graph= on the URL picks the graph
// (default main), as on the API. Close ends the streams clients keep open, for a shutdown.
func NewHTTPHandler(baseURL string, o HTTPOptions) *HTTPHandler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	h := &HTTPHandler{baseURL: loopback(baseURL), o: o, checked: map[[32]byte]time.Time{}}
	h.closing, h.close = context.WithCancel(context.Background())
	h.stream = gomcp.NewStreamableHTTPHandler(h.server, &gomcp.StreamableHTTPOptions{
		Logger: o.Log, SessionTimeout: o.SessionTimeout,
	})
	return h
}

// HTTPHandler is MCP over streamable HTTP.
type HTTPHandler struct {
	baseURL string
	o       HTTPOptions
	stream  *gomcp.StreamableHTTPHandler

	closing context.Context
	close   context.CancelFunc

	mu      sync.Mutex
	checked map[[32]byte]time.Time // sha256(key, graph) → until when it is known good
}

// loopback turns a listen address that is any address (0.0.0.0, [::]) into one to dial.
func loopback(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return base
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
		u.Host = net.JoinHostPort(host, port)
	}
	return u.String()
}

func graphOf(r *http.Request) string {
	if g := r.URL.Query().Get("graph"); g != "" {
		return g
	}
	return "main"
}

// Close ends every request in flight, the event streams that clients keep open among them
// (http.Server.Shutdown waits for those otherwise), and refuses new ones. Sessions end when
// the process does.
func (h *HTTPHandler) Close() { h.close() }

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.closing.Err() != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the server is shutting down")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.closing, cancel)()
	r = r.WithContext(ctx)

	key, ok := bearer(r.Header)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lbb"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "MCP at /mcp needs Authorization: Bearer KEY, with a key of this lbb server")
		return
	}
	graph := graphOf(r)
	if status, code, msg := h.check(r.Context(), key, graph); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lbb", error="invalid_token"`)
		}
		writeError(w, status, code, msg)
		return
	}
	// The server's ReadTimeout would cancel a long tool call or the SSE stream a client keeps
	// open (net/http cancels the request when a read of the idle connection times out): once
	// the body is in, reads have no deadline.
	rc := http.NewResponseController(w)
	if r.Body == nil || r.Body == http.NoBody {
		rc.SetReadDeadline(time.Time{})
	} else {
		r.Body = &onEOF{ReadCloser: r.Body, fn: func() { rc.SetReadDeadline(time.Time{}) }}
	}
	h.stream.ServeHTTP(w, r)
}

// server makes the MCP server of a new session (or of one stateless request): its tools call
// the API in the URL's graph, each with the key of the request that carries the call.
func (h *HTTPHandler) server(r *http.Request) *gomcp.Server {
	graph := graphOf(r)
	return newServer(func(req *gomcp.CallToolRequest) (*lbb.Client, error) {
		var hdr http.Header
		if req.Extra != nil {
			hdr = req.Extra.Header
		}
		key, ok := bearer(hdr)
		if !ok {
			return nil, errorf("this call came without Authorization: Bearer KEY")
		}
		return lbb.New(lbb.Options{BaseURL: h.baseURL, APIKey: key, Graph: graph, HTTPClient: h.o.HTTPClient,
			MaxRetries: maxRetries, UserAgent: "lbb-mcp"})
	}, h.o.Log)
}

// checkTTL is how long a key that worked is taken to work without asking the API again.
const checkTTL = 30 * time.Second

// check asks the API whether key may read graph; status 0 means yes.
func (h *HTTPHandler) check(ctx context.Context, key, graph string) (status int, code, msg string) {
	sum := sha256.Sum256([]byte(graph + "\x00" + key))
	now := time.Now()
	h.mu.Lock()
	until, ok := h.checked[sum]
	h.mu.Unlock()
	if ok && now.Before(until) {
		return 0, "", ""
	}
	c, err := lbb.New(lbb.Options{BaseURL: h.baseURL, APIKey: key, Graph: graph, HTTPClient: h.o.HTTPClient, MaxRetries: -1, UserAgent: "lbb-mcp"})
	if err != nil {
		return http.StatusInternalServerError, "internal", err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Sandboxes.List(ctx, lbb.ListParams{Limit: 1}); err != nil {
		var e *lbb.Error
		if errors.As(err, &e) && e.StatusCode < 500 {
			return e.StatusCode, e.Code, e.Message
		}
		h.o.Log.Warn("mcp: checking a key with the API", "err", err)
		return http.StatusServiceUnavailable, "unavailable", "the lbb API did not answer: " + err.Error()
	}
	h.mu.Lock()
	if len(h.checked) > 10000 {
		for k, t := range h.checked {
			if now.After(t) {
				delete(h.checked, k)
			}
		}
		if len(h.checked) > 10000 {
			clear(h.checked)
		}
	}
	h.checked[sum] = now.Add(checkTTL)
	h.mu.Unlock()
	return 0, "", ""
}

// writeError answers as the API does.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// onEOF calls fn once, when the body has been read to its end or closed.
type onEOF struct {
	io.ReadCloser
	once sync.Once
	fn   func()
}

func (b *onEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.fn)
	}
	return n, err
}

func (b *onEOF) Close() error {
	b.once.Do(b.fn)
	return b.ReadCloser.Close()
}
