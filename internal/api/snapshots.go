package api

import (
	"bytes"
	"net/http"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, resume (level3.go), snapshots and forks of long-lived sandboxes.

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
	return sandboxPost(s, w, r, c, "snapshot", true, "id", s.svc.SnapshotOnce)
}

// snapshotList is the answer of GET /v1/sandboxes/{id}/snapshots.
type snapshotList struct {
	Snapshots  []store.Snapshot `json:"snapshots"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *call) error {
	l, err := pageOf(r, func(p store.Page) ([]store.Snapshot, string, error) {
		return s.svc.ListSnapshots(r.Context(), c.caller.Graph, r.PathValue("id"), p)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotList{Snapshots: l.Data, NextCursor: l.NextCursor})
	return nil
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	return sandboxPost(s, w, r, c, "fork", true, "id", s.svc.ForkSandbox)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, c *call) error {
	snap, err := s.svc.GetSnapshot(r.Context(), c.caller.Graph, r.PathValue("id"))
	return answer(w, http.StatusOK, snap, err)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.target = id
	snap, err := s.svc.DeleteSnapshot(r.Context(), c.caller.Graph, id)
	if err == nil {
		c.sandbox = snap.SandboxID
	}
	return answer(w, http.StatusOK, snap, err)
}
