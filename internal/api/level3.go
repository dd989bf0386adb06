package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Level 3: long-lived sandboxes, their commands and files, and Files of the graph.

// writeResponse writes a stored or fresh answer of the control plane.
func writeResponse(w http.ResponseWriter, resp control.Response) {
	if resp.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeRaw(w, outcomeStatus(resp.Outcome), resp.Body)
}

// outcomeStatus is the HTTP status that says what a call did.
func outcomeStatus(o idempotency.Outcome) int {
	switch o {
	case idempotency.Done:
		return http.StatusOK
	case idempotency.Created:
		return http.StatusCreated
	case idempotency.Accepted:
		return http.StatusAccepted
	}
	return http.StatusInternalServerError
}

// writeTargeted writes resp and names the record it made (its field named field: "id",
// "command") as the call's target.
func writeTargeted(w http.ResponseWriter, c *call, resp control.Response, field string) {
	var rec map[string]any
	if json.Unmarshal(resp.Body, &rec) == nil {
		c.target, _ = rec[field].(string)
	}
	writeResponse(w, resp)
}

func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, c *call,
	op func(ctx context.Context, graph, id string) (store.Sandbox, error)) error {
	id := r.PathValue("id")
	c.target, c.sandbox = id, id
	sb, err := op(r.Context(), c.caller.Graph, id)
	return answer(w, http.StatusOK, sb, err)
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.lifecycle(w, r, c, s.svc.StopSandbox)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.lifecycle(w, r, c, s.svc.ResumeSandbox)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.lifecycle(w, r, c, s.svc.DeleteSandbox)
}

// idemKey is the call's Idempotency-Key.
func idemKey(r *http.Request) string { return r.Header.Get("Idempotency-Key") }

// execCommand starts a process. Asked for a stream (Accept: text/event-stream, or "stream":
// true), it answers one: the command's record, then its output from the first byte, held for
// this caller with backpressure on the process, then its end (streamStarted).
func (s *Server) execCommand(w http.ResponseWriter, r *http.Request, c *call) error {
	var stream bool
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	resp, err := sandboxDo(s, w, r, c, "commands", false,
		func(ctx context.Context, caller control.Caller, id string, req control.ExecRequest, key, hash string) (control.Response, error) {
			stream = req.Stream || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
			req.Stream = stream
			if stream {
				// The stream's place is taken before the process starts: a refusal starts nothing.
				var err error
				if release, err = s.streams.acquire(caller.Key.ID); err != nil {
					return control.Response{}, err
				}
			}
			return s.svc.Exec(ctx, caller, id, req, key, hash)
		})
	if err != nil {
		return err
	}
	if !stream {
		writeTargeted(w, c, resp, "id")
		return nil
	}
	s.streamStarted(w, r, c, resp)
	return nil
}

func (s *Server) runInSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return sandboxPost(s, w, r, c, "run", false, "command", s.svc.RunIn)
}

// sandboxPost serves POST /v1/sandboxes/{id}/<action>, which an Idempotency-Key may replay:
// it decodes the body (optional: an empty one is {}), hashes it with the route and writes
// what do answers, whose field target names the call's target.
func sandboxPost[Req any](s *Server, w http.ResponseWriter, r *http.Request, c *call, action string, optional bool, target string,
	do func(ctx context.Context, c control.Caller, id string, req Req, idemKey, reqHash string) (control.Response, error)) error {
	resp, err := sandboxDo(s, w, r, c, action, optional, do)
	if err != nil {
		return err
	}
	writeTargeted(w, c, resp, target)
	return nil
}

// sandboxDo is sandboxPost up to the answer, which it returns.
func sandboxDo[Req any](s *Server, w http.ResponseWriter, r *http.Request, c *call, action string, optional bool,
	do func(ctx context.Context, c control.Caller, id string, req Req, idemKey, reqHash string) (control.Response, error)) (control.Response, error) {
	id := r.PathValue("id")
	c.sandbox = id
	var req Req
	var body []byte
	var err error
	if optional {
		body, err = s.optionalBody(w, r, &req)
	} else {
		body, req, err = decodeBody[Req](s, w, r)
	}
	if err != nil {
		return control.Response{}, err
	}
	hash, err := idempotency.HashJSON("POST /v1/sandboxes/"+id+"/"+action, c.caller.Graph, body)
	if err != nil {
		return control.Response{}, err
	}
	return do(r.Context(), c.caller, id, req, idemKey(r), hash)
}

func (s *Server) killCommand(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.target = id
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req struct {
		Signal string `json:"signal"`
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decode(body, &req); err != nil {
			return err
		}
	}
	cmd, err := s.svc.KillCommand(r.Context(), c.caller.Graph, id, req.Signal)
	if err == nil {
		c.sandbox = cmd.SandboxID
	}
	return answer(w, http.StatusOK, cmd, err)
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.InvalidArgument("%s must be true or false", name)
	}
	return b, nil
}

func (s *Server) commandStdin(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.target = id
	closeIt, err := boolParam(r, "close")
	if err != nil {
		return err
	}
	body := &cappedBody{r: r.Body, max: s.svc.Config().MaxFileBytes}
	res, err := s.svc.WriteStdin(r.Context(), c.caller.Graph, id, body, closeIt)
	if body.over {
		return errdefs.New(errdefs.ClassPayloadTooLarge, "", "a stdin write is at most %d bytes", body.max)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// cappedBody reads at most max bytes of a streamed body; past that it fails and says so.
type cappedBody struct {
	r    io.Reader
	max  int64
	n    int64
	over bool
}

var errTooLarge = errors.New("the body is larger than this server takes")

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, errTooLarge
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.over = true
		return 0, errTooLarge
	}
	return n, err
}

func pathParam(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" {
		return "", errdefs.InvalidArgument("?%s= names the file (relative to /workspace, or absolute inside it)", name)
	}
	return p, nil
}

// noDeadlines lets a long transfer outlast the server's read timeout.
func noDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
}

// sandboxPath answers the sandbox and ?path= of a call that changes a workspace file; the
// sandbox is the call's target.
func sandboxPath(r *http.Request, c *call) (id, p string, err error) {
	id = r.PathValue("id")
	c.target, c.sandbox = id, id
	p, err = pathParam(r, "path")
	return id, p, err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c *call) error {
	id, p, err := sandboxPath(r, c)
	if err != nil {
		return err
	}
	max := s.svc.Config().MaxFileBytes
	if r.ContentLength > max {
		return errdefs.New(errdefs.ClassPayloadTooLarge, "", "the file is %d bytes; this server takes files of up to %d", r.ContentLength, max)
	}
	noDeadlines(w)
	body := &cappedBody{r: r.Body, max: max}
	e, err := s.svc.WriteFile(r.Context(), c.caller.Graph, id, p, body)
	if body.over {
		return errdefs.New(errdefs.ClassPayloadTooLarge, "", "the file is larger than this server's cap of %d bytes; nothing was written", max)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// attachment sets the headers of a download: bytes to save, never to render.
func attachment(w http.ResponseWriter, name string, size int64) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	cd := mime.FormatMediaType("attachment", map[string]string{"filename": name})
	if cd == "" {
		cd = "attachment"
	}
	h.Set("Content-Disposition", cd)
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	e, rc, err := s.svc.OpenFile(r.Context(), c.caller.Graph, id, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	noDeadlines(w)
	attachment(w, e.Name, e.Size)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Warn("sending a file", "request_id", c.requestID, "sandbox", id, "err", err)
	}
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, c *call) error {
	rec, err := boolParam(r, "recursive")
	if err != nil {
		return err
	}
	es, err := s.svc.ListFiles(r.Context(), c.caller.Graph, r.PathValue("id"), r.URL.Query().Get("path"), rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, newList(es, ""))
	return nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, c *call) error {
	id, p, err := sandboxPath(r, c)
	if err != nil {
		return err
	}
	rec, err := boolParam(r, "recursive")
	if err != nil {
		return err
	}
	if err := s.svc.RemoveFile(r.Context(), c.caller.Graph, id, p, rec); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request, c *call) error {
	id, p, err := sandboxPath(r, c)
	if err != nil {
		return err
	}
	e, err := s.svc.MakeDir(r.Context(), c.caller.Graph, id, p)
	return answer(w, http.StatusOK, e, err)
}

// createFile is POST /v1/files: with source_sandbox and source_path it keeps a workspace
// file; otherwise the body is the bytes of a File to upload (?name= names it).
func (s *Server) createFile(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	var resp control.Response
	var err error
	if q.Has("source_sandbox") || q.Has("source_path") {
		// Keeping a workspace file as a File reads the sandbox.
		if !c.caller.Key.HasScope(store.ScopeSandboxesRead) {
			return errdefs.Forbidden("API key %s lacks the scope %s (keeping a sandbox's file reads it)", c.caller.Key.ID, store.ScopeSandboxesRead)
		}
		c.sandbox = q.Get("source_sandbox")
		resp, err = s.svc.KeepFile(r.Context(), c.caller, q.Get("source_sandbox"), q.Get("source_path"), idemKey(r))
	} else {
		max := s.svc.Config().MaxFileBytes
		if r.ContentLength > max {
			return errdefs.New(errdefs.ClassPayloadTooLarge, "", "the file is %d bytes; this server keeps Files of up to %d", r.ContentLength, max)
		}
		noDeadlines(w)
		resp, err = s.svc.UploadFile(r.Context(), c.caller, q.Get("name"), r.Body, idemKey(r))
	}
	if err != nil {
		return err
	}
	writeTargeted(w, c, resp, "id")
	return nil
}

func (s *Server) listGraphFiles(w http.ResponseWriter, r *http.Request, c *call) error {
	return writeList(w, r, func(p store.Page) ([]store.File, string, error) {
		return s.svc.Store().ListFiles(r.Context(), c.caller.Graph, p)
	})
}

func (s *Server) getGraphFile(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := s.svc.GetFile(r.Context(), c.caller.Graph, r.PathValue("id"))
	return answer(w, http.StatusOK, f, err)
}

func (s *Server) deleteGraphFile(w http.ResponseWriter, r *http.Request, c *call) error {
	c.target = r.PathValue("id")
	f, err := s.svc.DeleteFile(r.Context(), c.caller.Graph, c.target)
	return answer(w, http.StatusOK, f, err)
}

func (s *Server) getQuotas(w http.ResponseWriter, r *http.Request, c *call) error {
	q, err := s.svc.Quotas(r.Context(), c.caller.Graph)
	return answer(w, http.StatusOK, q, err)
}

func (s *Server) graphFileContent(w http.ResponseWriter, r *http.Request, c *call) error {
	f, rc, err := s.svc.OpenGraphFile(r.Context(), c.caller.Graph, r.PathValue("id"))
	if err != nil {
		return err
	}
	defer rc.Close()
	name := f.Name
	if name == "" {
		name = f.ID
	}
	noDeadlines(w)
	attachment(w, name, f.Size)
	w.Header().Set("ETag", `"sha256:`+f.SHA256+`"`)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Warn("sending a file", "request_id", c.requestID, "file", f.ID, "err", err)
	}
	return nil
}

func (s *Server) importFile(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	id := q.Get("sandbox")
	c.target, c.sandbox = id, id
	resp, err := s.svc.ImportFile(r.Context(), c.caller, id, q.Get("path"), q.Get("source_sha256"), idemKey(r))
	if err != nil {
		return err
	}
	writeResponse(w, resp)
	return nil
}
