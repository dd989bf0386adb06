package api

import (
	"bytes"
	"net/http"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, resume (level3.go), snapshots and forks of long-lived sandboxes.

func (s *Server) snapshotRoutes() {
	const (
		read    = store.ScopeSandboxesRead
		write   = store.ScopeSandboxesWrite
		del     = store.ScopeSandboxesDelete
		graph   = true
		audited = true
	)
	s.handle("POST", "/v1/sandboxes/{id}/pause", write, graph, audited, s.pauseSandbox)
	s.handle("POST", "/v1/sandboxes/{id}/snapshot", write, graph, audited, s.snapshotSandbox)
	s.handle("GET", "/v1/sandboxes/{id}/snapshots", read, graph, !audited, s.listSnapshots)
	s.handle("POST", "/v1/sandboxes/{id}/fork", write, graph, audited, s.forkSandbox)
	s.handle("GET", "/v1/snapshots/{id}", read, graph, !audited, s.getSnapshot)
	s.handle("DELETE", "/v1/snapshots/{id}", del, graph, audited, s.deleteSnapshot)
}

// optionalBody reads a body that may be empty (then "{}") into v.
func (s *Server) optionalBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	return body, decode(body, v)
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.lifecycle(w, r, c, s.svc.PauseSandbox)
}

func (s *Server) snapshotSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.sandbox = id
	var req control.SnapshotRequest
	body, err := s.optionalBody(w, r, &req)
	if err != nil {
		return err
	}
	hash, err := idempotency.HashJSON("POST /v1/sandboxes/"+id+"/snapshot", c.caller.Graph, body)
	if err != nil {
		return err
	}
	resp, err := s.svc.SnapshotOnce(r.Context(), c.caller, id, req, idemKey(r), hash)
	if err != nil {
		return err
	}
	writeTargeted(w, c, resp)
	return nil
}

// snapshotList is the answer of GET /v1/sandboxes/{id}/snapshots.
type snapshotList struct {
	Snapshots  []store.Snapshot `json:"snapshots"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *call) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	out, next, err := s.svc.ListSnapshots(r.Context(), c.caller.Graph, r.PathValue("id"), p)
	if err != nil {
		return err
	}
	if out == nil {
		out = []store.Snapshot{}
	}
	writeJSON(w, http.StatusOK, snapshotList{Snapshots: out, NextCursor: next})
	return nil
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.sandbox = id
	var req control.ForkRequest
	body, err := s.optionalBody(w, r, &req)
	if err != nil {
		return err
	}
	hash, err := idempotency.HashJSON("POST /v1/sandboxes/"+id+"/fork", c.caller.Graph, body)
	if err != nil {
		return err
	}
	resp, err := s.svc.ForkSandbox(r.Context(), c.caller, id, req, idemKey(r), hash)
	if err != nil {
		return err
	}
	writeTargeted(w, c, resp)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, c *call) error {
	snap, err := s.svc.GetSnapshot(r.Context(), c.caller.Graph, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snap)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.target = id
	snap, err := s.svc.DeleteSnapshot(r.Context(), c.caller.Graph, id)
	if err != nil {
		return err
	}
	c.sandbox = snap.SandboxID
	writeJSON(w, http.StatusOK, snap)
	return nil
}
