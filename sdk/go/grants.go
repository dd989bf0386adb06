package lbb

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// GrantsService is /v1/grants: short-lived keys for one attempt of a workflow step.
type GrantsService struct{ c *Client }

// Mint mints a grant for the client's graph; its Token is shown this once. Use it with
// WithAPIKey.
func (s *GrantsService) Mint(ctx context.Context, p GrantRequest) (*Grant, error) {
	return call[Grant](ctx, s.c, request{method: http.MethodPost, path: "/v1/grants", body: p})
}

// Get answers a grant's record: origin, budget, usage so far.
func (s *GrantsService) Get(ctx context.Context, id string) (*Grant, error) {
	return get[Grant](ctx, s.c, "/v1/grants/"+url.PathEscape(id), nil)
}

// List lists the grants of the graph the client's key minted, newest first.
func (s *GrantsService) List(ctx context.Context, p ListParams) (*List[Grant], error) {
	return get[List[Grant]](ctx, s.c, "/v1/grants", p.query())
}

// Revoke revokes a grant: its calls answer 401 grant_revoked from then on.
func (s *GrantsService) Revoke(ctx context.Context, id string) (*Grant, error) {
	return call[Grant](ctx, s.c, request{method: http.MethodDelete, path: "/v1/grants/" + url.PathEscape(id), retry: true})
}

// BudgetsService is /v1/budgets: the budgets of workflow runs.
type BudgetsService struct{ c *Client }

func budgetPath(workflow, run string) string {
	return "/v1/budgets/" + url.PathEscape(workflow) + "/" + url.PathEscape(run)
}

// Put sets the budget of one run of a workflow; what its runs used stays counted.
func (s *BudgetsService) Put(ctx context.Context, workflow, run string, b Budget) (*WorkflowBudget, error) {
	return call[WorkflowBudget](ctx, s.c, request{method: http.MethodPut, path: budgetPath(workflow, run), body: b, retry: true})
}

// Get answers a workflow run's budget, what its runs used and what is left.
func (s *BudgetsService) Get(ctx context.Context, workflow, run string) (*WorkflowBudget, error) {
	return get[WorkflowBudget](ctx, s.c, budgetPath(workflow, run), nil)
}

// UsageParams ask for the usage of the graph over [From, To), grouped by GroupBy ("key",
// "template", "workflow", "day" or "": one total).
type UsageParams struct {
	From, To time.Time
	GroupBy  string
}

// Usage answers the metered usage of the graph's ended runs and commands.
func (c *Client) Usage(ctx context.Context, p UsageParams) (*UsageReport, error) {
	q := url.Values{}
	if !p.From.IsZero() {
		q.Set("from", p.From.UTC().Format(time.RFC3339))
	}
	if !p.To.IsZero() {
		q.Set("to", p.To.UTC().Format(time.RFC3339))
	}
	if p.GroupBy != "" {
		q.Set("group_by", p.GroupBy)
	}
	return get[UsageReport](ctx, c, "/v1/usage", q)
}

// WithAPIKey returns a client like c that calls with another key or a grant's token.
func (c *Client) WithAPIKey(key string) *Client {
	c2 := *c
	c2.apiKey = key
	c2.init()
	return &c2
}
