package control

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/datafile"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// KeyPrefix starts every API key secret.
const KeyPrefix = "lbb_sk_"

// NewSecret returns a fresh API key secret and its hash.
func NewSecret() (secret, hash string) { return newSecret(KeyPrefix) }

// newSecret is 240 random bits after prefix, and their hash.
func newSecret(prefix string) (secret, hash string) {
	b := make([]byte, 30)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	secret = prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
	return secret, HashSecret(secret)
}

// HashSecret is how a key's secret is kept: its SHA-256. Secrets are 240 random bits, so no
// slow hash is needed.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Authenticate finds the live key for a bearer secret.
func (s *Service) Authenticate(ctx context.Context, secret string) (store.Key, error) {
	if secret == "" {
		return store.Key{}, errdefs.Unauthorized("missing API key: send Authorization: Bearer KEY")
	}
	k, err := s.st.GetKeyByHash(ctx, HashSecret(secret))
	if errdefs.IsNotFound(err) {
		return store.Key{}, errdefs.Unauthorized("unknown API key")
	} else if err != nil {
		return store.Key{}, err
	}
	now := s.now()
	if k.Kind == store.KindGrant {
		if k.RevokedAt != nil {
			return store.Key{}, errdefs.New(errdefs.ClassUnauthorized, errdefs.CodeGrantRevoked, "grant %s was revoked", k.ID)
		}
		if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
			return store.Key{}, errdefs.New(errdefs.ClassUnauthorized, errdefs.CodeGrantExpired,
				"grant %s expired at %s; mint a grant for the next attempt", k.ID, k.ExpiresAt.Format(time.RFC3339))
		}
	}
	if k.RevokedAt != nil {
		return store.Key{}, errdefs.Unauthorized("API key %s was revoked", k.ID)
	}
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return store.Key{}, errdefs.Unauthorized("API key %s expired", k.ID)
	}
	// A derived key lives no longer than the keys it came from.
	for p, depth := k.Parent, 0; p != ""; depth++ {
		pk, err := s.st.GetKey(ctx, p)
		if err != nil && !errdefs.IsNotFound(err) {
			return store.Key{}, err
		}
		if err != nil || depth >= 8 || pk.RevokedAt != nil || pk.ExpiresAt != nil && !now.Before(*pk.ExpiresAt) {
			if k.Kind == store.KindGrant {
				return store.Key{}, errdefs.New(errdefs.ClassUnauthorized, errdefs.CodeGrantRevoked,
					"grant %s came from key %s, which was revoked or expired", k.ID, p)
			}
			return store.Key{}, errdefs.Unauthorized("API key %s came from key %s, which was revoked or expired", k.ID, p)
		}
		p = pk.Parent
	}
	return k, nil
}

// Authorize checks that key may use graph with scope. A graph the key may not see does not
// exist for it: not_found, never forbidden.
func (s *Service) Authorize(ctx context.Context, k store.Key, graph, scope string) error {
	if graph == "" {
		return errdefs.InvalidArgument("%s", s.missingGraph(ctx, k))
	}
	if !k.HasGraph(graph) {
		return errdefs.NotFound("graph %q not found", graph)
	}
	if _, err := s.st.GetGraph(ctx, graph); err != nil {
		return err
	}
	if scope != "" && !k.HasScope(scope) {
		return errdefs.Forbidden("API key %s lacks the scope %s", k.ID, scope)
	}
	return nil
}

// missingGraph is the error of a call without ?graph=: it names the graphs key may use, so
// that the fix is in the message.
func (s *Service) missingGraph(ctx context.Context, k store.Key) string {
	var names []string
	if k.HasGraph(store.AllGraphs) {
		gs, err := s.st.ListGraphs(ctx)
		if err != nil {
			return "every route takes ?graph="
		}
		for _, g := range gs {
			names = append(names, g.Name)
		}
	} else {
		names = k.Graphs
	}
	switch len(names) {
	case 0:
		return "every route takes ?graph=, and API key " + k.ID + " may use no graph"
	case 1:
		return fmt.Sprintf("every route takes ?graph=: add ?graph=%s (the graph API key %s may use)", names[0], k.ID)
	}
	slices.Sort(names)
	return fmt.Sprintf("every route takes ?graph=: add ?graph=%s, or another graph API key %s may use: %s",
		names[0], k.ID, strings.Join(names, ", "))
}

// KeyRequest is the body of POST /v1/keys.
type KeyRequest struct {
	Name   string   `json:"name"`
	Graphs []string `json:"graphs"`
	Scopes []string `json:"scopes"`
	// SpendCap caps what the key's runs, and those of the grants it mints, use in a period.
	SpendCap *store.SpendCap `json:"spend_cap,omitempty"`
}

// NewKey is a created key with its secret, shown once.
type NewKey struct {
	store.Key
	Secret string `json:"secret"`
}

var graphName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// DefaultScopes are a key's scopes when a request names none: everything but admin.
var DefaultScopes = []string{store.ScopeSandboxesRead, store.ScopeSandboxesWrite, store.ScopeSandboxesDelete,
	store.ScopeTemplatesWrite, store.ScopeFilesRead, store.ScopeFilesWrite}

// CreateKey makes an API key; graphs it names that do not exist yet are created.
func (s *Service) CreateKey(ctx context.Context, createdBy string, req KeyRequest) (NewKey, error) {
	if len(req.Graphs) == 0 {
		req.Graphs = []string{"main"}
	}
	if len(req.Scopes) == 0 {
		req.Scopes = DefaultScopes
	}
	for _, g := range req.Graphs {
		if g != store.AllGraphs && !graphName.MatchString(g) {
			return NewKey{}, errdefs.InvalidArgument("graph name %q: want 1 to 63 of a-z, 0-9, '_' and '-'", g)
		}
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(store.AllScopes, sc) {
			return NewKey{}, errdefs.InvalidArgument("unknown scope %q: want one of %s", sc, strings.Join(store.AllScopes, ", "))
		}
	}
	if req.Name == "" {
		req.Name = "key"
	}
	if err := checkSpendCap(req.SpendCap); err != nil {
		return NewKey{}, err
	}
	secret, hash := NewSecret()
	k := store.Key{ID: ids.New(ids.Key), Name: req.Name, Hash: hash, Prefix: secret[:len(KeyPrefix)+6],
		Graphs: req.Graphs, Scopes: req.Scopes, CreatedAt: s.now(), CreatedBy: createdBy, SpendCap: req.SpendCap}
	err := s.st.WithTx(ctx, func(q store.Queries) error {
		for _, g := range req.Graphs {
			if g == store.AllGraphs {
				continue
			}
			if err := q.CreateGraph(ctx, store.Graph{Name: g, CreatedAt: k.CreatedAt}); err != nil && !errdefs.IsConflict(err) {
				return err
			}
		}
		return q.CreateKey(ctx, k)
	})
	return NewKey{Key: k, Secret: secret}, err
}

// RevokeKey revokes a key; it stops working at once.
func (s *Service) RevokeKey(ctx context.Context, id string) (store.Key, error) {
	if err := s.st.RevokeKey(ctx, id, s.now()); err != nil {
		return store.Key{}, err
	}
	return s.st.GetKey(ctx, id)
}

// AdminKeyFile is where the first admin key is saved, in the data directory.
const AdminKeyFile = "admin.key"

// Bootstrap makes a fresh store usable: graph main, and an admin key saved (0600) to
// <dataDir>/admin.key. It returns the secret when it made a new key (to print once), or ""
// when the saved key is already live.
func (s *Service) Bootstrap(ctx context.Context, dataDir string) (string, error) {
	now := s.now()
	if err := s.st.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: now}); err != nil && !errdefs.IsConflict(err) {
		return "", fmt.Errorf("bootstrap: graph main: %w", err)
	}
	path := filepath.Join(dataDir, AdminKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		if _, err := s.Authenticate(ctx, strings.TrimSpace(string(b))); err == nil {
			return "", nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	k, err := s.CreateKey(ctx, "", KeyRequest{Name: "admin", Graphs: []string{store.AllGraphs}, Scopes: []string{store.ScopeAdmin}})
	if err != nil {
		return "", fmt.Errorf("bootstrap: admin key: %w", err)
	}
	if err := datafile.Write(path, k.Secret); err != nil {
		return "", fmt.Errorf("bootstrap: saving the admin key: %w", err)
	}
	return k.Secret, nil
}

// Keys manage keys only within themselves: a key sees, mints and revokes keys whose graphs
// and scopes are within its own, and reads the audit of its own graphs. A graph-limited
// admin key is an admin of those graphs, not of the server.

// covers reports whether by's graphs and scopes include all of k's.
func covers(by, k store.Key) bool {
	for _, g := range k.Graphs {
		if g == store.AllGraphs && !slices.Contains(by.Graphs, store.AllGraphs) || !by.HasGraph(g) {
			return false
		}
	}
	for _, sc := range k.Scopes {
		if !by.HasScope(sc) {
			return false
		}
	}
	return true
}

// MintKey makes an API key on behalf of key by (POST /v1/keys): its graphs and scopes must
// be within by's, and only a key of every graph makes new graphs.
func (s *Service) MintKey(ctx context.Context, by store.Key, req KeyRequest) (NewKey, error) {
	want := store.Key{Graphs: req.Graphs, Scopes: req.Scopes}
	if len(want.Graphs) == 0 {
		want.Graphs = []string{"main"}
	}
	if len(want.Scopes) == 0 {
		want.Scopes = DefaultScopes
	}
	if !covers(by, want) {
		return NewKey{}, errdefs.Forbidden("API key %s may only make keys within its own graphs (%s) and scopes (%s)",
			by.ID, strings.Join(by.Graphs, ", "), strings.Join(by.Scopes, ", "))
	}
	// A key with a spend cap makes keys within it (its own when the request names none).
	if by.SpendCap != nil {
		if req.SpendCap == nil {
			req.SpendCap = by.SpendCap
		} else if !capWithin(*req.SpendCap, *by.SpendCap) {
			return NewKey{}, errdefs.Forbidden("API key %s may only make keys within its spend cap", by.ID)
		}
	}
	return s.CreateKey(ctx, by.ID, req)
}

// ListKeys lists the keys by may see: those within its graphs and scopes.
func (s *Service) ListKeys(ctx context.Context, by store.Key, p store.Page) ([]store.Key, string, error) {
	all, next, err := s.st.ListKeys(ctx, p)
	if err != nil {
		return nil, "", err
	}
	out := all[:0]
	for _, k := range all {
		if covers(by, k) {
			out = append(out, k)
		}
	}
	return out, next, nil
}

// RevokeKeyAs revokes a key on behalf of key by; a key outside by's graphs and scopes does
// not exist for it.
func (s *Service) RevokeKeyAs(ctx context.Context, by store.Key, id string) (store.Key, error) {
	k, err := s.st.GetKey(ctx, id)
	if err != nil {
		return k, err
	}
	if !covers(by, k) {
		return store.Key{}, errdefs.NotFound("key %s not found", id)
	}
	return s.RevokeKey(ctx, id)
}

// ListAudit lists the audit trail of graph ("": every graph) as key by may read it: a key
// of every graph reads all; another reads only its own graphs, and names one when it has
// several.
func (s *Service) ListAudit(ctx context.Context, by store.Key, graph string, p store.Page) ([]store.AuditEntry, string, error) {
	if !slices.Contains(by.Graphs, store.AllGraphs) {
		switch {
		case graph == "" && len(by.Graphs) == 1:
			graph = by.Graphs[0]
		case graph == "":
			return nil, "", errdefs.InvalidArgument("API key %s has several graphs: name one with ?graph= (one of %s)", by.ID, strings.Join(by.Graphs, ", "))
		case !by.HasGraph(graph):
			return nil, "", errdefs.NotFound("graph %q not found", graph)
		}
	}
	return s.st.ListAudit(ctx, graph, p)
}
