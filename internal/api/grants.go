package api

import (
	"net/http"
	"time"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Grants, budgets and usage (issue 17).
func (s *Server) grantRoutes() {
	const (
		graph   = true
		audited = true
	)
	read, write := store.ScopeSandboxesRead, store.ScopeSandboxesWrite
	s.handle("POST", "/v1/grants", scopeAny, graph, audited, s.mintGrant)
	s.handle("GET", "/v1/grants", scopeAny, graph, !audited, s.listGrants)
	s.handle("GET", "/v1/grants/{id}", scopeAny, graph, !audited, s.getGrant)
	s.handle("DELETE", "/v1/grants/{id}", scopeAny, graph, audited, s.revokeGrant)
	s.handle("PUT", "/v1/budgets/{workflow}/{run}", write, graph, audited, s.putBudget)
	s.handle("GET", "/v1/budgets/{workflow}/{run}", read, graph, !audited, s.getBudget)
	s.handle("GET", "/v1/usage", read, graph, !audited, s.getUsage)
}

func (s *Server) mintGrant(w http.ResponseWriter, r *http.Request, c *call) error {
	_, req, err := decodeBody[control.GrantRequest](s, w, r)
	if err != nil {
		return err
	}
	if req.Graph != "" && req.Graph != c.caller.Graph {
		return errdefs.InvalidArgument("graph %q in the body and ?graph=%s differ; a grant is for the graph of the call", req.Graph, c.caller.Graph)
	}
	req.Graph = c.caller.Graph
	g, err := s.svc.MintGrant(r.Context(), c.caller.Key, req)
	if err == nil {
		c.target = g.ID
	}
	return answer(w, http.StatusCreated, g, err)
}

func (s *Server) listGrants(w http.ResponseWriter, r *http.Request, c *call) error {
	return writeList(w, r, func(p store.Page) ([]control.Grant, string, error) {
		return s.svc.ListGrants(r.Context(), c.caller.Key, c.caller.Graph, p)
	})
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request, c *call) error {
	g, err := s.svc.GetGrant(r.Context(), c.caller.Key, c.caller.Graph, r.PathValue("id"))
	return answer(w, http.StatusOK, g, err)
}

func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request, c *call) error {
	c.target = r.PathValue("id")
	g, err := s.svc.RevokeGrant(r.Context(), c.caller.Key, c.caller.Graph, c.target)
	return answer(w, http.StatusOK, g, err)
}

func (s *Server) putBudget(w http.ResponseWriter, r *http.Request, c *call) error {
	_, req, err := decodeBody[control.WorkflowBudgetRequest](s, w, r)
	if err != nil {
		return err
	}
	b, err := s.svc.PutWorkflowBudget(r.Context(), c.caller.Graph, r.PathValue("workflow"), r.PathValue("run"), req)
	return answer(w, http.StatusOK, b, err)
}

func (s *Server) getBudget(w http.ResponseWriter, r *http.Request, c *call) error {
	b, err := s.svc.GetWorkflowBudget(r.Context(), c.caller.Graph, r.PathValue("workflow"), r.PathValue("run"))
	return answer(w, http.StatusOK, b, err)
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request, c *call) error {
	q := control.UsageQuery{Graph: c.caller.Graph, GroupBy: r.URL.Query().Get("group_by")}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		v := r.URL.Query().Get(f.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			if d, derr := time.Parse(time.DateOnly, v); derr == nil {
				t = d
			} else {
				return errdefs.InvalidArgument("%s %q: want an RFC 3339 time or a date (2006-01-02)", f.name, v)
			}
		}
		*f.dst = t
	}
	u, err := s.svc.Usage(r.Context(), q)
	return answer(w, http.StatusOK, u, err)
}
