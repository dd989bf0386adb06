package control

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Egress, the in-sandbox API grant and git clone, as policy and records. The host agent
// carries out a sandbox's egress (internal/egress); here it is resolved (the call's, else the
// template version's, else none), bounded (the quota: the server's default, at most its cap),
// recorded, and its refusals audited. An API grant is a derived key: its scopes within the
// creating key's (never admin), its graph the sandbox's, its life the sandbox's; its secret
// goes to the host agent (SetGrant) and nowhere else, and a new one is minted on each resume.

// APIGrantBody is the api field of a create: what code inside the sandbox may call.
type APIGrantBody struct {
	Scopes []string `json:"scopes"`
	// MaxRuns caps the runs (sandboxes created, commands and runs started) the grant may
	// start; 0 is no cap. Spend caps come with metering.
	MaxRuns int64 `json:"max_runs,omitempty"`
}

// resolveEgress picks a run's or sandbox's egress: the call's, else the template version's,
// else none; a mode that lets anything out gets the server's default quota when it names
// none, and may not name more than the server's cap.
func (s *Service) resolveEgress(call, tpl *store.Egress) (*store.Egress, error) {
	e := store.Egress{Mode: store.EgressNone}
	switch {
	case call != nil:
		e = *call
	case tpl != nil:
		e = *tpl
	}
	if e.Mode == "" {
		e.Mode = store.EgressNone
	}
	if err := s.checkEgress(e); err != nil {
		return nil, err
	}
	if e.On() && e.QuotaBytes == 0 {
		e.QuotaBytes = s.cfg.EgressQuota
	}
	if !e.On() {
		e.QuotaBytes = 0
	}
	return &e, nil
}

// checkEgress validates a policy as a call or template gives it.
func (s *Service) checkEgress(e store.Egress) error {
	if e.Mode == "" {
		e.Mode = store.EgressNone
	}
	if err := egress.Check(e); err != nil {
		return errdefs.InvalidArgument("%v", err)
	}
	if e.QuotaBytes > s.cfg.EgressMaxQuota {
		return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeLimitExceeded,
			"egress.quota_bytes %d is above this server's cap of %d", e.QuotaBytes, s.cfg.EgressMaxQuota)
	}
	return nil
}

// hostEgress is what the host agent needs of a sandbox's record to serve its egress; nil
// when it has none (and no API grant).
func hostEgress(sb store.Sandbox) *hostagent.Egress {
	e := &hostagent.Egress{API: sb.API != nil, Graph: sb.Graph, Used: sb.Usage.Egress}
	if sb.Egress != nil {
		e.Policy = *sb.Egress
	}
	if !e.Policy.On() && !e.API {
		return nil
	}
	return e
}

// checkGrant validates an API grant against the key that asks for it.
func checkGrant(by store.Key, g *APIGrantBody) (*store.APIGrant, error) {
	if g == nil {
		return nil, nil
	}
	if len(g.Scopes) == 0 {
		return nil, errdefs.InvalidArgument("api.scopes is empty: name what code inside may call (sandboxes:read, …)")
	}
	for _, sc := range g.Scopes {
		switch {
		case sc == store.ScopeAdmin:
			return nil, errdefs.InvalidArgument("api.scopes: admin is never granted to a sandbox")
		case !slices.Contains(store.AllScopes, sc):
			return nil, errdefs.InvalidArgument("api.scopes: unknown scope %q", sc)
		case !by.HasScope(sc):
			return nil, errdefs.Forbidden("api.scopes: API key %s lacks %s, so it cannot grant it", by.ID, sc)
		}
	}
	if g.MaxRuns < 0 {
		return nil, errdefs.InvalidArgument("api.max_runs must not be negative")
	}
	scopes := slices.Clone(g.Scopes)
	slices.Sort(scopes)
	return &store.APIGrant{Scopes: slices.Compact(scopes), MaxRuns: g.MaxRuns}, nil
}

// grant mints sb's derived key, child of parent, records it in sb.API and hands its secret
// to the host agent. runs carries over the runs an earlier key of the grant started.
func (s *Service) grant(ctx context.Context, parent string, sb *store.Sandbox, runs int64) error {
	secret, hash := NewSecret()
	k := store.Key{ID: ids.New(ids.Key), Name: "grant " + sb.ID, Hash: hash, Prefix: secret[:len(KeyPrefix)+6],
		Graphs: []string{sb.Graph}, Scopes: sb.API.Scopes, CreatedAt: s.now(), CreatedBy: parent,
		Parent: parent, Sandbox: sb.ID, ExpiresAt: sb.ExpiresAt, MaxRuns: sb.API.MaxRuns, Runs: runs}
	if err := s.st.CreateKey(ctx, k); err != nil {
		return err
	}
	sb.API.Key = k.ID
	if err := s.host.SetGrant(ctx, sb.ID, &egress.Grant{URL: s.cfg.APIURL, Token: secret, Graph: sb.Graph}); err != nil {
		s.st.RevokeKey(context.WithoutCancel(ctx), k.ID, s.now())
		return fmt.Errorf("handing the sandbox its API grant: %w", err)
	}
	return nil
}

// regrant replaces a sandbox's derived key with a fresh one (a resume: the host agent may
// have lost the secret), the old one revoked, its count of runs kept.
func (s *Service) regrant(ctx context.Context, sb *store.Sandbox) error {
	if sb.API == nil {
		return nil
	}
	parent, runs := firstNonEmpty(sb.Origin.Grant, sb.Origin.Key), int64(0)
	if old, err := s.st.GetKey(ctx, sb.API.Key); err == nil {
		parent, runs = old.Parent, old.Runs
	}
	s.revokeGrant(ctx, *sb)
	return s.grant(ctx, parent, sb, runs)
}

// revokeGrant ends a sandbox's derived key (it ended, or a fresh key replaces it).
func (s *Service) revokeGrant(ctx context.Context, sb store.Sandbox) {
	if sb.API == nil || sb.API.Key == "" {
		return
	}
	if err := s.st.RevokeKey(context.WithoutCancel(ctx), sb.API.Key, s.now()); err != nil && !errdefs.IsNotFound(err) {
		s.log.Error("revoking a sandbox's API grant", "sandbox", sb.ID, "key", sb.API.Key, "err", err)
	}
}

// chargeRun counts a run a key starts against its cap (a grant's max_runs).
func (s *Service) chargeRun(ctx context.Context, k store.Key) error {
	if k.MaxRuns == 0 || k.Kind == store.KindGrant { // a grant's runs are its budget's (chargeBudgets)
		return nil
	}
	ok, err := s.st.CountKeyRun(ctx, k.ID)
	if err != nil {
		return err
	}
	if !ok {
		return errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeLimitExceeded,
			"API key %s has started the %d runs it may start", k.ID, k.MaxRuns)
	}
	return nil
}

// A git clone's URL and branch, to a strict character set: a public repository over HTTP(S),
// no credentials, no query; a branch name without "..", not an option.
var (
	gitURL    = regexp.MustCompile(`^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~+-]+)+/?$`)
	gitBranch = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
)

func checkGit(g *store.GitClone) error {
	if g == nil {
		return nil
	}
	if !gitURL.MatchString(g.URL) {
		return errdefs.InvalidArgument("git.url %q: want https://host/path of a public repository (letters, digits and ._~+-; no credentials, no query)", g.URL)
	}
	if u, err := url.Parse(g.URL); err != nil || u.User != nil {
		return errdefs.InvalidArgument("git.url %q: no credentials in a URL (private repositories wait for a credential broker)", g.URL)
	}
	if g.Branch != "" && (!gitBranch.MatchString(g.Branch) || strings.Contains(g.Branch, "..") || strings.HasSuffix(g.Branch, "/") ||
		strings.HasSuffix(g.Branch, ".lock")) {
		return errdefs.InvalidArgument("git.branch %q: want a branch name (letters, digits, ._/-)", g.Branch)
	}
	if g.Depth < 0 || g.Depth > 100000 {
		return errdefs.InvalidArgument("git.depth %d: want 0 (all history) to 100000", g.Depth)
	}
	return nil
}

// onEgressRefused audits the first refusal of a destination to a sandbox, with the sandbox
// as the actor and its creating key as the key.
func (s *Service) onEgressRefused(e hostagent.Event) {
	if e.Egress == nil {
		return
	}
	graph, key, ok := s.sandboxOwner(e.Sandbox)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entry := store.AuditEntry{ID: ids.New(ids.Audit), Graph: graph, KeyID: key, Actor: e.Sandbox, Method: "CONNECT",
		Route: "egress " + e.Egress.Code, Path: fmt.Sprintf("%s:%d", e.Egress.Host, e.Egress.Port), Target: e.Sandbox,
		Status: 403, At: s.now()}
	if err := s.st.AppendAudit(ctx, entry); err != nil {
		s.log.Error("auditing a refused destination", "sandbox", e.Sandbox, "err", err)
	}
}

// sandboxOwner answers the graph and creating key of a sandbox running here: a long-lived
// one held, or a one-call run's in flight.
func (s *Service) sandboxOwner(id string) (graph, key string, ok bool) {
	if hs := s.lookupHeld(id); hs != nil {
		sb, err := s.st.GetSandbox(context.Background(), hs.graph, id)
		return hs.graph, sb.Origin.Key, err == nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.oneCalls[id]
	return o.graph, o.key, ok
}
