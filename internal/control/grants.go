package control

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Grants are short-lived keys for one attempt of one workflow step (POST /v1/grants): a
// derived key of the minting key, for one graph, with scopes within the key's, an expiry
// of at most GrantMaxTTL, the step's origin, which every record made with it carries, and
// an optional budget. Like every key, only the SHA-256 of its token is kept; the token is
// answered once.

// GrantPrefix starts every grant's token.
const GrantPrefix = "lbb_gt_"

// Grant lifetimes.
const (
	GrantDefaultTTL = 15 * time.Minute
	GrantMaxTTL     = time.Hour
)

// GrantRequest is the body of POST /v1/grants.
type GrantRequest struct {
	Graph      string        `json:"graph"`
	Scopes     []string      `json:"scopes,omitempty"`
	TTLSeconds int64         `json:"ttl_seconds,omitempty"`
	Origin     *OriginBody   `json:"origin,omitempty"`
	Budget     *store.Budget `json:"budget,omitempty"`
	Name       string        `json:"name,omitempty"`
}

// Grant is a grant's record as the API answers it; Token is set once, when it is minted.
type Grant struct {
	ID        string           `json:"id"`
	Name      string           `json:"name,omitempty"`
	Graph     string           `json:"graph"`
	Scopes    []string         `json:"scopes"`
	Origin    *store.Origin    `json:"origin,omitempty"`
	Budget    *store.Budget    `json:"budget,omitempty"`
	Used      store.Spent      `json:"used"`
	Left      *store.Remaining `json:"left,omitempty"`
	Prefix    string           `json:"prefix"`
	CreatedAt time.Time        `json:"created_at"`
	CreatedBy string           `json:"created_by"`
	ExpiresAt time.Time        `json:"expires_at"`
	RevokedAt *time.Time       `json:"revoked_at,omitempty"`
	Token     string           `json:"token,omitempty"`
}

func grantBudget(k store.Key) store.Budget {
	return store.Budget{Runs: k.MaxRuns, VCPUMs: k.BudgetVCPUMs, GiBMs: k.BudgetGiBMs}
}

func grantSpent(k store.Key) store.Spent {
	return store.Spent{Runs: k.Runs, VCPUMs: k.UsedVCPUMs, GiBMs: k.UsedGiBMs}
}

// GrantOf renders a grant's key record.
func GrantOf(k store.Key) Grant {
	g := Grant{ID: k.ID, Name: k.Name, Scopes: k.Scopes, Origin: k.Origin, Used: grantSpent(k), Prefix: k.Prefix,
		CreatedAt: k.CreatedAt, CreatedBy: k.Parent, RevokedAt: k.RevokedAt}
	if len(k.Graphs) > 0 {
		g.Graph = k.Graphs[0]
	}
	if k.ExpiresAt != nil {
		g.ExpiresAt = *k.ExpiresAt
	}
	if b := grantBudget(k); b != (store.Budget{}) {
		left := b.Left(g.Used)
		g.Budget, g.Left = &b, &left
	}
	return g
}

// MintGrant makes a grant on behalf of key by. A grant mints no grants: a workflow's worker
// holds a key, and each attempt of a step gets a grant of its own.
func (s *Service) MintGrant(ctx context.Context, by store.Key, req GrantRequest) (Grant, error) {
	if by.Kind == store.KindGrant {
		return Grant{}, errdefs.Forbidden("grant %s cannot mint grants; mint them with the workflow's key", by.ID)
	}
	if req.Graph == "" {
		return Grant{}, errdefs.InvalidArgument("a grant is for one graph: give graph")
	}
	if err := s.Authorize(ctx, by, req.Graph, ""); err != nil {
		return Grant{}, err
	}
	if len(req.Scopes) == 0 {
		req.Scopes = []string{store.ScopeSandboxesRead, store.ScopeSandboxesWrite, store.ScopeFilesRead, store.ScopeFilesWrite}
		req.Scopes = slices.DeleteFunc(req.Scopes, func(sc string) bool { return !by.HasScope(sc) })
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(store.AllScopes, sc) {
			return Grant{}, errdefs.InvalidArgument("unknown scope %q: want one of %s", sc, strings.Join(store.AllScopes, ", "))
		}
		if sc == store.ScopeAdmin {
			return Grant{}, errdefs.InvalidArgument("a grant cannot have the scope admin")
		}
		if !by.HasScope(sc) {
			return Grant{}, errdefs.Forbidden("API key %s may only mint grants within its own scopes (%s): not %s",
				by.ID, strings.Join(by.Scopes, ", "), sc)
		}
	}
	ttl := GrantDefaultTTL
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > GrantMaxTTL {
		return Grant{}, errdefs.InvalidArgument("ttl_seconds %d: want 1 to %d (a grant lives at most an hour)", req.TTLSeconds, int(GrantMaxTTL.Seconds()))
	} else if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	now := s.now()
	exp := now.Add(ttl)
	if by.ExpiresAt != nil && by.ExpiresAt.Before(exp) {
		exp = *by.ExpiresAt
	}
	var b store.Budget
	if req.Budget != nil {
		b = *req.Budget
		if b.Runs < 0 || b.VCPUMs < 0 || b.GiBMs < 0 {
			return Grant{}, errdefs.InvalidArgument("a budget's runs, vcpu_ms and gib_ms must not be negative")
		}
	}
	var origin *store.Origin
	if o := req.Origin; o != nil {
		origin = &store.Origin{Workflow: o.Workflow, Run: o.Run, Step: o.Step, Attempt: o.Attempt}
		if *origin == (store.Origin{}) {
			origin = nil
		}
	}
	if req.Name == "" {
		req.Name = "grant"
	}
	secret, hash := newSecret(GrantPrefix)
	k := store.Key{ID: ids.New(ids.Key), Name: req.Name, Hash: hash, Prefix: secret[:len(GrantPrefix)+6],
		Graphs: []string{req.Graph}, Scopes: req.Scopes, CreatedAt: now, CreatedBy: by.ID, Parent: by.ID, ExpiresAt: &exp,
		Kind: store.KindGrant, Origin: origin, MaxRuns: b.Runs, BudgetVCPUMs: b.VCPUMs, BudgetGiBMs: b.GiBMs}
	if err := s.st.CreateKey(ctx, k); err != nil {
		return Grant{}, err
	}
	g := GrantOf(k)
	g.Token = secret
	return g, nil
}

// grantOf answers the grant id of graph that key by may see: one it minted, or any of a
// graph it is an admin of.
func (s *Service) grantOf(ctx context.Context, by store.Key, graph, id string) (store.Key, error) {
	k, err := s.st.GetKey(ctx, id)
	if err != nil || k.Kind != store.KindGrant || !slices.Contains(k.Graphs, graph) ||
		k.Parent != by.ID && !(by.HasScope(store.ScopeAdmin) && by.HasGraph(graph)) {
		return store.Key{}, errdefs.NotFound("grant %s not found", id)
	}
	return k, nil
}

// GetGrant answers a grant's record: its origin, budget and usage so far.
func (s *Service) GetGrant(ctx context.Context, by store.Key, graph, id string) (Grant, error) {
	k, err := s.grantOf(ctx, by, graph, id)
	return GrantOf(k), err
}

// RevokeGrant revokes a grant; calls made with it answer 401 grant_revoked from then on.
func (s *Service) RevokeGrant(ctx context.Context, by store.Key, graph, id string) (Grant, error) {
	if _, err := s.grantOf(ctx, by, graph, id); err != nil {
		return Grant{}, err
	}
	if err := s.st.RevokeKey(ctx, id, s.now()); err != nil {
		return Grant{}, err
	}
	k, err := s.st.GetKey(ctx, id)
	return GrantOf(k), err
}

// ListGrants lists the grants of graph that key by may see.
func (s *Service) ListGrants(ctx context.Context, by store.Key, graph string, p store.Page) ([]Grant, string, error) {
	all, next, err := s.st.ListKeys(ctx, p)
	if err != nil {
		return nil, "", err
	}
	var out []Grant
	for _, k := range all {
		if k.Kind == store.KindGrant && slices.Contains(k.Graphs, graph) &&
			(k.Parent == by.ID || by.HasScope(store.ScopeAdmin) && by.HasGraph(graph)) {
			out = append(out, GrantOf(k))
		}
	}
	return out, next, nil
}

// origin is what the records a call writes say of who made it: its key and, with a grant,
// the grant, its minting key and the workflow step the grant is for (which wins over the
// call's own origin).
func (c Caller) origin(body *OriginBody) store.Origin {
	o := store.Origin{Key: c.Key.ID}
	if body != nil {
		o.Workflow, o.Run, o.Step, o.Attempt = body.Workflow, body.Run, body.Step, body.Attempt
	}
	if c.Key.Kind == store.KindGrant {
		o.Key, o.Grant = c.Key.Parent, c.Key.ID
		if g := c.Key.Origin; g != nil {
			o.Workflow, o.Run, o.Step, o.Attempt = g.Workflow, g.Run, g.Step, g.Attempt
		}
	}
	return o
}

// fileOrigin stamps a File's origin with the call's workflow step and grant.
func (c Caller) fileOrigin(f store.FileOrigin) store.FileOrigin {
	o := c.origin(nil)
	f.Key, f.Grant, f.Workflow, f.Run, f.Step, f.Attempt = o.Key, o.Grant, o.Workflow, o.Run, o.Step, o.Attempt
	return f
}
