package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

func (s *Server) routes() {
	const (
		read    = store.ScopeSandboxesRead
		write   = store.ScopeSandboxesWrite
		del     = store.ScopeSandboxesDelete
		tplW    = store.ScopeTemplatesWrite
		filesR  = store.ScopeFilesRead
		filesW  = store.ScopeFilesWrite
		admin   = store.ScopeAdmin
		public  = ""
		graph   = true
		audited = true
	)
	s.handle("GET", "/healthz", public, !graph, !audited, s.healthz)
	metricsScope := admin
	if s.metricsPublic {
		metricsScope = public
	}
	s.handle("GET", "/metrics", metricsScope, !graph, !audited, s.metrics)
	s.handle("GET", "/v1/openapi.json", public, !graph, !audited, s.openapi)

	s.handle("POST", "/v1/sandboxes", write, graph, audited, s.createSandbox)
	s.handle("GET", "/v1/sandboxes", read, graph, !audited, s.listSandboxes)
	s.handle("GET", "/v1/sandboxes/{id}", read, graph, !audited, s.getSandbox)
	s.handle("GET", "/v1/sandboxes/{id}/commands", read, graph, !audited, s.listSandboxCommands)
	s.handle("GET", "/v1/commands", read, graph, !audited, s.listCommands)
	s.handle("GET", "/v1/commands/{id}", read, graph, !audited, s.getCommand)

	s.handle("POST", "/v1/sandboxes/templates", tplW, graph, audited, s.createTemplate)
	s.handle("GET", "/v1/sandboxes/templates", read, graph, !audited, s.listTemplates)
	s.handle("GET", "/v1/sandboxes/templates/{name...}", read, graph, !audited, s.getTemplate)
	s.handle("GET", "/v1/sandboxes/templates/{name}/build", read, graph, !audited, s.getTemplateBuild)

	s.handle("GET", "/v1/graphs", scopeAny, !graph, !audited, s.listGraphs)
	s.handle("POST", "/v1/keys", admin, !graph, audited, s.createKey)
	s.handle("GET", "/v1/keys", admin, !graph, !audited, s.listKeys)
	s.handle("DELETE", "/v1/keys/{id}", admin, !graph, audited, s.revokeKey)
	s.handle("GET", "/v1/audit", admin, !graph, !audited, s.listAudit)
	s.handle("GET", "/v1/hosts", admin, !graph, !audited, s.listHosts)
	// A host's own token authenticates it (control.RegisterHost), not an API key.
	s.handle("POST", "/v1/hosts/register", public, !graph, !audited, s.registerHost)

	// Long-lived sandboxes, their commands and files, and Files of the graph (level3.go).
	s.handle("POST", "/v1/sandboxes/{id}/stop", write, graph, audited, s.stopSandbox)
	s.handle("POST", "/v1/sandboxes/{id}/resume", write, graph, audited, s.resumeSandbox)
	s.handle("DELETE", "/v1/sandboxes/{id}", del, graph, audited, s.deleteSandbox)
	s.handle("POST", "/v1/sandboxes/{id}/commands", write, graph, audited, s.execCommand)
	s.handle("POST", "/v1/sandboxes/{id}/run", write, graph, audited, s.runInSandbox)
	s.handle("GET", "/v1/commands/{id}/output", read, graph, !audited, s.commandOutput)
	s.handle("POST", "/v1/commands/{id}/kill", write, graph, audited, s.killCommand)
	s.handle("POST", "/v1/commands/{id}/stdin", write, graph, audited, s.commandStdin)
	s.handle("GET", "/v1/sandboxes/{id}/pty", write, graph, audited, s.sandboxPty)
	s.handle("POST", "/v1/sandboxes/{id}/ports/{port}/url", write, graph, audited, s.previewURL)
	s.handle("GET", "/v1/sandboxes/{id}/previews", read, graph, !audited, s.listPreviews)
	s.handle("DELETE", "/v1/sandboxes/{id}/previews/{preview}", write, graph, audited, s.deletePreview)
	s.handle("PUT", "/v1/sandboxes/{id}/files/content", write, graph, audited, s.writeFile)
	s.handle("GET", "/v1/sandboxes/{id}/files/content", read, graph, !audited, s.readFile)
	s.handle("GET", "/v1/sandboxes/{id}/files", read, graph, !audited, s.listFiles)
	s.handle("DELETE", "/v1/sandboxes/{id}/files", write, graph, audited, s.removeFile)
	s.handle("POST", "/v1/sandboxes/{id}/files/mkdir", write, graph, audited, s.makeDir)
	s.handle("POST", "/v1/files", filesW, graph, audited, s.createFile)
	s.handle("GET", "/v1/files", filesR, graph, !audited, s.listGraphFiles)
	s.handle("GET", "/v1/files/{id}", filesR, graph, !audited, s.getGraphFile)
	s.handle("GET", "/v1/files/{id}/content", filesR, graph, !audited, s.graphFileContent)
	s.handle("DELETE", "/v1/files/{id}", filesW, graph, audited, s.deleteGraphFile)
	s.handle("GET", "/v1/quotas", scopeAny, graph, !audited, s.getQuotas)
	// Importing a File into a sandbox reads the File.
	s.handle("PUT", "/v1/sandboxes/files/content", write, graph, audited, s.importFile).Also = []string{filesR}

	// Code contexts and cells (code.go).
	s.handle("POST", "/v1/sandboxes/{id}/contexts", write, graph, audited, s.createContext)
	s.handle("GET", "/v1/sandboxes/{id}/contexts", read, graph, !audited, s.listContexts)
	s.handle("POST", "/v1/sandboxes/{id}/contexts/{context}/restart", write, graph, audited, s.restartContext)
	s.handle("DELETE", "/v1/sandboxes/{id}/contexts/{context}", write, graph, audited, s.deleteContext)
	s.handle("POST", "/v1/sandboxes/{id}/code", write, graph, audited, s.runCode)

	// Pause, snapshots and forks (snapshots.go).
	s.handle("POST", "/v1/sandboxes/{id}/pause", write, graph, audited, s.pauseSandbox)
	s.handle("POST", "/v1/sandboxes/{id}/snapshot", write, graph, audited, s.snapshotSandbox)
	s.handle("GET", "/v1/sandboxes/{id}/snapshots", read, graph, !audited, s.listSnapshots)
	s.handle("POST", "/v1/sandboxes/{id}/fork", write, graph, audited, s.forkSandbox)
	s.handle("GET", "/v1/snapshots/{id}", read, graph, !audited, s.getSnapshot)
	s.handle("DELETE", "/v1/snapshots/{id}", del, graph, audited, s.deleteSnapshot)

	// Grants, budgets and usage (grants.go).
	s.grantRoutes()
}

// list is the shape of every list answer.
type list[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}

func newList[T any](data []T, next string) list[T] {
	if data == nil {
		data = []T{}
	}
	return list[T]{Data: data, NextCursor: next}
}

// decodeBody reads the request's JSON body into a T.
func decodeBody[T any](s *Server, w http.ResponseWriter, r *http.Request) ([]byte, T, error) {
	var req T
	body, err := s.readBody(w, r)
	if err == nil {
		err = decode(body, &req)
	}
	return body, req, err
}

// answer writes v with status, or returns the error that came instead.
func answer[T any](w http.ResponseWriter, status int, v T, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, status, v)
	return nil
}

// pageOf fetches the page of a list that the query asks for (?cursor=, ?limit=).
func pageOf[T any](r *http.Request, fetch func(store.Page) ([]T, string, error)) (list[T], error) {
	p, err := page(r)
	if err != nil {
		return list[T]{}, err
	}
	out, next, err := fetch(p)
	if err != nil {
		return list[T]{}, err
	}
	return newList(out, next), nil
}

// writeList answers the page of a list that the query asks for.
func writeList[T any](w http.ResponseWriter, r *http.Request, fetch func(store.Page) ([]T, string, error)) error {
	l, err := pageOf(r, fetch)
	return answer(w, http.StatusOK, l, err)
}

func page(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return p, errdefs.InvalidArgument("limit must be a number from 1 to 1000")
		}
		p.Limit = n
	}
	return p, nil
}

func waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait_ms")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.InvalidArgument("wait_ms must be a number of milliseconds")
	}
	return time.Duration(n) * time.Millisecond, nil
}

// readBody reads a JSON body up to the server's cap.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.svc.Config().MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, errdefs.InvalidArgument("reading the body: %v", err)
	}
	return b, nil
}

// decode parses a JSON body strictly: unknown fields are errors, so typos do not pass.
func decode(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return errdefs.InvalidArgument("the body is empty; send a JSON object")
	}
	if trimmed[0] != '{' {
		return errdefs.InvalidArgument("the body is not a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return errdefs.InvalidArgument("the body is not valid JSON: %v (at byte %d)", se, se.Offset)
		case errors.As(err, &te):
			return errdefs.InvalidArgument("field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return errdefs.InvalidArgument("the body: %v", err)
	}
	// More alone misses a stray ']' or '}' after the object.
	if _, err := d.Token(); err != io.EOF {
		return errdefs.InvalidArgument("the body has more than one JSON value")
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := s.svc.Store().ListGraphs(r.Context()); err != nil {
		return errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("store: %w", err))
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "running": s.svc.Running()})
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, c *call) error {
	s.metricsHandler().ServeHTTP(w, r)
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, c *call) error {
	writeRaw(w, http.StatusOK, openapiDoc)
	return nil
}

// createSandbox serves POST /v1/sandboxes: a one-call run with run (the Idempotency-Key is
// required), a long-lived sandbox without.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	body, req, err := decodeBody[control.CreateRequest](s, w, r)
	if err != nil {
		return err
	}
	key, create := idemKey(r), s.svc.CreateSandbox
	if req.Run != nil {
		if err := idempotency.Require(key); err != nil {
			return err
		}
		create = s.svc.Run
	}
	hash, err := idempotency.HashJSON(control.RouteCreateSandbox, c.caller.Graph, body)
	if err != nil {
		return err
	}
	resp, err := create(r.Context(), c.caller, req, key, hash)
	if err != nil {
		return err
	}
	var ids struct {
		ID      string `json:"id"`      // a long-lived sandbox
		Command string `json:"command"` // a one-call run
		Sandbox string `json:"sandbox"`
	}
	if json.Unmarshal(resp.Body, &ids) == nil {
		if req.Run != nil {
			c.target, c.sandbox = ids.Command, ids.Sandbox
		} else {
			c.target, c.sandbox = ids.ID, ids.ID
		}
	}
	writeResponse(w, resp)
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, c *call) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	f := store.SandboxFilter{Status: r.URL.Query().Get("status"), Session: r.URL.Query().Get("session")}
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return errdefs.InvalidArgument("label %q: want key=value", l)
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	out, next, err := s.svc.Store().ListSandboxes(r.Context(), c.caller.Graph, f, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, newList(out, next))
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	sb, err := s.svc.GetSandbox(r.Context(), c.caller.Graph, r.PathValue("id"))
	return answer(w, http.StatusOK, sb, err)
}

func (s *Server) listSandboxCommands(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	if _, err := s.svc.Store().GetSandbox(r.Context(), c.caller.Graph, id); err != nil {
		return err
	}
	return s.commandList(w, r, c, id)
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.commandList(w, r, c, r.URL.Query().Get("sandbox"))
}

func (s *Server) commandList(w http.ResponseWriter, r *http.Request, c *call, sandbox string) error {
	return writeList(w, r, func(p store.Page) ([]store.Command, string, error) {
		return s.svc.Store().ListCommands(r.Context(), c.caller.Graph,
			store.CommandFilter{SandboxID: sandbox, Status: r.URL.Query().Get("status")}, p)
	})
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request, c *call) error {
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	if wait > 0 {
		release, err := s.streams.acquire(c.caller.Key.ID)
		if err != nil {
			return err
		}
		defer release()
	}
	cmd, err := s.svc.GetCommand(r.Context(), c.caller.Graph, r.PathValue("id"), wait)
	return answer(w, http.StatusOK, cmd, err)
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request, c *call) error {
	_, req, err := decodeBody[control.TemplateRequest](s, w, r)
	if err != nil {
		return err
	}
	t, err := s.svc.CreateTemplate(r.Context(), c.caller, req)
	if err == nil {
		c.target = t.ID
	}
	status := http.StatusCreated
	if t.Existing {
		status = http.StatusOK
	}
	return answer(w, status, t, err)
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, c *call) error {
	l, err := pageOf(r, func(p store.Page) ([]store.Template, string, error) {
		return s.svc.Store().ListTemplates(r.Context(), c.caller.Graph, p)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		list[store.Template]
		Bases []control.BaseTemplate `json:"bases"`
	}{l, s.svc.Bases()})
	return nil
}

// templateVersion is one line of a template's history.
type templateVersion struct {
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
	Isolation string    `json:"isolation,omitempty"`
}

// getTemplateBuild answers the build of a template version with an image recipe: its state,
// the step that failed, what its packages resolved to, and its log.
func (s *Server) getTemplateBuild(w http.ResponseWriter, r *http.Request, c *call) error {
	b, err := s.svc.GetTemplateBuild(r.Context(), c.caller.Graph, r.PathValue("name"))
	if err != nil {
		return err
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return s.streamTemplateBuild(w, r, c, b)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// streamTemplateBuild answers a build as server-sent events: `log` events with the log's new
// bytes as they come ({"offset", "data"}; the event id is the offset after them, so that
// Last-Event-ID resumes there), then one `end` event with the build (its log left out) once
// it is ready or failed.
func (s *Server) streamTemplateBuild(w http.ResponseWriter, r *http.Request, c *call, b control.TemplateBuild) error {
	release, err := s.streams.acquire(c.caller.Key.ID)
	if err != nil {
		return err
	}
	defer release()
	sw := newSSE(w, r)
	sent, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
	ping := time.Now()
	for {
		if len(b.Log) > sent && !strings.HasPrefix(b.Log, "…") {
			data, _ := json.Marshal(struct {
				Offset int    `json:"offset"`
				Data   string `json:"data"`
			}{sent, b.Log[sent:]})
			sent = len(b.Log)
			sw.event("log", strconv.Itoa(sent), data)
		}
		if b.Status != store.BuildBuilding {
			b.Log = ""
			data, _ := json.Marshal(b)
			sw.event("end", strconv.Itoa(sent), data)
			return nil
		}
		if time.Since(ping) > ssePing {
			sw.comment("ping")
			ping = time.Now()
		}
		if sw.err != nil {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
		if b, err = s.svc.GetTemplateBuild(r.Context(), c.caller.Graph, r.PathValue("name")); err != nil {
			data, _ := json.Marshal(map[string]string{"message": err.Error()})
			sw.event("error", "", data)
			return nil
		}
	}
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, c *call) error {
	ref := r.PathValue("name")
	if b, ok := s.svc.LookupBaseTemplate(ref); ok {
		writeJSON(w, http.StatusOK, b)
		return nil
	}
	t, err := s.svc.GetTemplate(r.Context(), c.caller.Graph, ref)
	if err != nil {
		return err
	}
	all, err := s.svc.TemplateVersions(r.Context(), c.caller.Graph, t.Name)
	if err != nil {
		return err
	}
	versions := make([]templateVersion, len(all))
	for i, v := range all {
		versions[i] = templateVersion{v.Version, v.CreatedAt, v.CreatedBy, v.Isolation}
	}
	writeJSON(w, http.StatusOK, struct {
		store.Template
		Versions []templateVersion `json:"versions"`
	}{t, versions})
	return nil
}

func (s *Server) listGraphs(w http.ResponseWriter, r *http.Request, c *call) error {
	all, err := s.svc.Store().ListGraphs(r.Context())
	if err != nil {
		return err
	}
	var out []store.Graph
	for _, g := range all {
		if c.caller.Key.HasGraph(g.Name) {
			out = append(out, g)
		}
	}
	writeJSON(w, http.StatusOK, newList(out, ""))
	return nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request, c *call) error {
	_, req, err := decodeBody[control.KeyRequest](s, w, r)
	if err != nil {
		return err
	}
	k, err := s.svc.MintKey(r.Context(), c.caller.Key, req)
	if err == nil {
		c.target = k.ID
	}
	return answer(w, http.StatusCreated, k, err)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, c *call) error {
	return writeList(w, r, func(p store.Page) ([]store.Key, string, error) {
		return s.svc.ListKeys(r.Context(), c.caller.Key, p)
	})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, c *call) error {
	c.target = r.PathValue("id")
	k, err := s.svc.RevokeKeyAs(r.Context(), c.caller.Key, c.target)
	return answer(w, http.StatusOK, k, err)
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, c *call) error {
	return writeList(w, r, func(p store.Page) ([]store.AuditEntry, string, error) {
		return s.svc.ListAudit(r.Context(), c.caller.Key, c.caller.Graph, p)
	})
}

func (s *Server) registerHost(w http.ResponseWriter, r *http.Request, c *call) error {
	_, req, err := decodeBody[hostagent.Registration](s, w, r)
	if err != nil {
		return err
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	reg, err := s.svc.RegisterHost(r.Context(), strings.TrimSpace(token), req)
	return answer(w, http.StatusOK, reg, err)
}

func (s *Server) listHosts(w http.ResponseWriter, r *http.Request, c *call) error {
	hosts, err := s.svc.ListHosts(r.Context())
	return answer(w, http.StatusOK, map[string]any{"data": hosts}, err)
}
