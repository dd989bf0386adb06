// Package api is lbb's HTTP API (v1): authentication, graphs, the routes of DESIGN.md
// section 4, the OpenAPI document they are tested against, metrics, request logs and the
// audit trail. Handlers turn HTTP into calls of the control plane and its answers (or
// classified errors) back into JSON; errdefs classes map to statuses here and nowhere else.
package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/littlebigbrain/lbb/internal/api/errhttp"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return openapiDoc }

// Options configure a Server.
type Options struct {
	Service *control.Service
	Log     *slog.Logger
	// Registry receives the HTTP metrics and serves /metrics; nil makes a private one.
	Registry *prometheus.Registry
}

// Server is the API's http.Handler.
type Server struct {
	svc      *control.Service
	log      *slog.Logger
	router   router
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  streamLimiter
	held     heldReaders
	// metricsPublic serves /metrics without a key (--metrics-public).
	metricsPublic bool
}

// New returns the API server.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	cfg := o.Service.Config()
	s := &Server{svc: o.Service, log: o.Log, registry: o.Registry, streams: streamLimiter{max: cfg.MaxStreamsPerKey},
		held: heldReaders{release: o.Service.ReleaseHeld, grace: heldGrace}, metricsPublic: cfg.MetricsPublic}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lbb_http_requests_total", Help: "HTTP requests, by route, method and status code.",
	}, []string{"route", "method", "code"})
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lbb_http_request_duration_seconds", Help: "HTTP request latency, by route.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route"})
	o.Registry.MustRegister(s.requests, s.duration)
	s.routes()
	return s
}

// Routes lists every route the server serves.
func (s *Server) Routes() []Route {
	out := make([]Route, len(s.router.routes))
	for i, r := range s.router.routes {
		out[i] = *r
	}
	return out
}

func (s *Server) handle(method, pattern, scope string, graph, audit bool, h handlerFunc) *Route {
	r := &Route{Method: method, Pattern: pattern, Scope: scope, Graph: graph, Audit: audit, Handler: h}
	s.router.routes = append(s.router.routes, r)
	return r
}

// handlerFunc serves one route; an error it returns is written as the error body.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// call is what one request carries through middleware and handler.
type call struct {
	requestID string
	route     *Route
	caller    control.Caller
	authed    bool
	// target names the record a state-changing call made or changed, for logs and audit;
	// sandbox, the sandbox of a run.
	target  string
	sandbox string
	status  int
	// audit is the call's pending audit entry (routes that audit).
	audit *control.PendingAudit
}

type statusWriter struct {
	http.ResponseWriter
	status int
	// timings are the request's phases, sent as its Server-Timing header.
	timings *timing.Timings
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if h := w.timings.Header(); h != "" {
			w.Header().Set("Server-Timing", h)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeHTTP routes, authenticates, authorizes, serves, logs, counts and audits a request.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	c := &call{requestID: ids.New(ids.Request)}
	ctx, tm := timing.New(r.Context())
	r = r.WithContext(ctx)
	w := &statusWriter{ResponseWriter: rw, timings: tm}
	w.Header().Set("Request-Id", c.requestID)
	routeName := "unmatched"
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic", "request_id", c.requestID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if w.status == 0 {
				s.writeError(w, c, errors.New("internal error"))
			}
		}
		if w.status == 0 {
			w.status = http.StatusOK
		}
		d := time.Since(t0)
		s.requests.WithLabelValues(routeName, r.Method, strconv.Itoa(w.status)).Inc()
		s.duration.WithLabelValues(routeName).Observe(d.Seconds())
		attrs := []any{"request_id", c.requestID, "method", r.Method, "route", routeName, "status", w.status,
			"duration_ms", d.Milliseconds()}
		if c.caller.Graph != "" {
			attrs = append(attrs, "graph", c.caller.Graph)
		}
		if c.authed {
			attrs = append(attrs, "key", c.caller.Key.ID)
		}
		if c.target != "" {
			attrs = append(attrs, targetAttr(c.target), c.target)
		}
		if c.sandbox != "" && c.sandbox != c.target {
			key := "sandbox"
			if targetAttr(c.target) == "sandbox" {
				key = "source_sandbox" // a fork: the target is the new sandbox
			}
			attrs = append(attrs, key, c.sandbox)
		}
		level := slog.LevelInfo
		if w.status >= 500 {
			level = slog.LevelError
		} else if c.route != nil && !c.route.Audit && w.status < 400 {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "request", attrs...)
		// A sandbox's calls (its API grant) are audited, every one, with it as the actor.
		if c.route != nil && (c.route.Audit || c.caller.Key.Sandbox != "") && c.authed {
			s.audit(r, c, w.status)
		}
	}()

	route, params, allowed := s.router.find(r.Method, r.URL.Path)
	if route == nil {
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			s.writeJSONError(w, c, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not served on %s", r.Method, r.URL.Path))
			return
		}
		s.writeError(w, c, errdefs.NotFound("no route %s %s", r.Method, r.URL.Path))
		return
	}
	c.route, routeName = route, route.Method+" "+route.Pattern
	for k, v := range params {
		r.SetPathValue(k, v)
	}
	endAuth := timing.Start(r.Context(), "auth")
	err := s.authorize(r, c)
	endAuth()
	if err != nil {
		s.writeError(w, c, err)
		return
	}
	if route.Audit {
		c.audit = control.NewPendingAudit(store.AuditEntry{
			ID: ids.New(ids.Audit), Graph: c.caller.Graph, KeyID: c.caller.Key.ID, Actor: c.caller.Key.Sandbox, Method: r.Method,
			Route: route.Method + " " + route.Pattern, Path: r.URL.Path, RequestID: c.requestID,
		})
		r = r.WithContext(control.WithPendingAudit(r.Context(), c.audit))
	}
	if err := route.Handler(w, r, c); err != nil {
		s.writeError(w, c, err)
	}
}

func targetAttr(id string) string {
	switch {
	case strings.HasPrefix(id, ids.Sandbox):
		return "sandbox"
	case strings.HasPrefix(id, ids.Command):
		return "command"
	case strings.HasPrefix(id, ids.Template):
		return "template"
	case strings.HasPrefix(id, ids.Key):
		return "key_target"
	case strings.HasPrefix(id, ids.File):
		return "file"
	}
	return "target"
}

func (s *Server) authorize(r *http.Request, c *call) error {
	if c.route.Scope == "" {
		return nil
	}
	auth := r.Header.Get("Authorization")
	secret, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok && auth != "" {
		return errdefs.Unauthorized("Authorization must be Bearer KEY")
	}
	k, err := s.svc.Authenticate(r.Context(), strings.TrimSpace(secret))
	if err != nil {
		return err
	}
	c.caller.Key, c.authed, c.caller.RequestID = k, true, c.requestID
	graph := r.URL.Query().Get("graph")
	scope := c.route.Scope
	if scope == scopeAny {
		scope = ""
	}
	if c.route.Graph || graph != "" {
		c.caller.Graph = graph
		if err := s.svc.Authorize(r.Context(), k, graph, scope); err != nil {
			return err
		}
	} else if scope != "" && !k.HasScope(scope) {
		return errdefs.Forbidden("API key %s lacks the scope %s", k.ID, scope)
	}
	for _, sc := range c.route.Also {
		if !k.HasScope(sc) {
			return errdefs.Forbidden("API key %s lacks the scope %s", k.ID, sc)
		}
	}
	return nil
}

// audit writes the call's audit entry, unless the control plane wrote it already (a run
// records it with its end, in one commit).
func (s *Server) audit(r *http.Request, c *call, status int) {
	e, ok := c.audit.Take()
	if !ok {
		if c.audit != nil {
			return
		}
		// A call that failed before its entry was made (authorization) has none pending.
		e = store.AuditEntry{ID: ids.New(ids.Audit), Graph: c.caller.Graph, KeyID: c.caller.Key.ID, Method: r.Method,
			Route: c.route.Method + " " + c.route.Pattern, Path: r.URL.Path, RequestID: c.requestID}
	}
	e.Target, e.Status, e.At = c.target, status, time.Now().UTC().Truncate(time.Millisecond)
	if e.Actor = c.caller.Key.Sandbox; e.Actor != "" && e.Graph == "" && len(c.caller.Key.Graphs) == 1 {
		e.Graph = c.caller.Key.Graphs[0] // a sandbox's call outside a graph's routes (/v1/keys) is its graph's
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	err := s.svc.Store().AppendAudit(ctx, e)
	if err != nil {
		s.log.Error("writing the audit trail", "request_id", c.requestID, "err", err)
	}
}

// errorBody is every error's JSON.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

func (s *Server) writeError(w http.ResponseWriter, c *call, err error) {
	status, code, msg := errhttp.Status(err), errdefs.CodeOf(err), err.Error()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		status, code, msg = http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("the body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, context.Canceled):
		status, code, msg = 499, "canceled", "the client went away"
	case status == http.StatusInternalServerError:
		s.log.Error("internal error", "request_id", c.requestID, "err", err)
		msg = "internal error (request " + c.requestID + ")"
	}
	if code == errdefs.CodeTooManySandboxes || code == errdefs.CodeTooManyRuns {
		w.Header().Set("Retry-After", "1")
	}
	s.writeJSONError(w, c, status, code, msg)
}

func (s *Server) writeJSONError(w http.ResponseWriter, c *call, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.RequestID = code, msg, c.requestID
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
	if len(body) == 0 || body[len(body)-1] != '\n' {
		w.Write([]byte("\n"))
	}
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry})
}
