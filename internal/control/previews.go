package control

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// PreviewSecretFile is the file in the data directory that holds the key previews' URLs
// are signed with. Deleting it (and restarting) revokes every preview URL given out.
const PreviewSecretFile = "preview.key"

// MaxPreviewExpiry bounds how long a preview URL may live.
const MaxPreviewExpiry = 7 * 24 * time.Hour

// Preview is a signed, expiring URL of a port of a sandbox. The URL is shown when it is made
// only; a listing shows the rest.
type Preview struct {
	ID        string    `json:"id"`
	URL       string    `json:"url,omitempty"`
	Sandbox   string    `json:"sandbox"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
	CreatedAt time.Time `json:"created_at"`
}

func previewOf(p store.Preview) Preview {
	return Preview{ID: p.ID, Sandbox: p.SandboxID, Port: p.Port, ExpiresAt: p.ExpiresAt, CreatedAt: p.CreatedAt}
}

// PreviewRequest is the body of POST /v1/sandboxes/{id}/ports/{port}/url.
type PreviewRequest struct {
	// ExpiresInSeconds is how long the URL is valid; default 3600, at most 7 days.
	ExpiresInSeconds int64 `json:"expires_in_seconds,omitempty"`
}

// previews sign and check previews' host names.
type previews struct {
	once   sync.Once
	secret []byte
	err    error
	// base is the scheme and port the preview listener is reached at ("http", ":7701").
	mu     sync.Mutex
	scheme string
	port   string
}

func (s *Service) previewSecret() ([]byte, error) {
	p := &s.previews
	p.once.Do(func() {
		path := filepath.Join(s.cfg.DataDir, PreviewSecretFile)
		b, err := os.ReadFile(path)
		if err == nil && len(b) >= 32 {
			p.secret = b
			return
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			p.err = fmt.Errorf("reading the previews' key: %w", err)
			return
		}
		b = make([]byte, 32)
		rand.Read(b)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			p.err = fmt.Errorf("writing the previews' key: %w", err)
			return
		}
		p.secret = b
	})
	return p.secret, p.err
}

// SetPreviewListener says where the preview listener is reached: its scheme and port (""
// for the scheme's default).
func (s *Service) SetPreviewListener(scheme, port string) {
	s.previews.mu.Lock()
	defer s.previews.mu.Unlock()
	s.previews.scheme, s.previews.port = scheme, port
}

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// previewMAC is the signature of (preview, sandbox, port, expiry).
func previewMAC(secret []byte, previewID, sandboxID string, port int, exp int64) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "lbb-preview\x00%s\x00%s\x00%d\x00%d", previewID, sandboxID, port, exp)
	return tokenEncoding.EncodeToString(m.Sum(nil)[:10])
}

// PreviewURL signs a URL of a port of a running sandbox of the caller's graph.
func (s *Service) PreviewURL(ctx context.Context, c Caller, sandboxID string, port int, req PreviewRequest) (Preview, error) {
	if port < 1 || port > 65535 {
		return Preview{}, errdefs.InvalidArgument("port must be from 1 to 65535")
	}
	exp := time.Duration(req.ExpiresInSeconds) * time.Second
	switch {
	case req.ExpiresInSeconds < 0:
		return Preview{}, errdefs.InvalidArgument("expires_in_seconds must not be negative")
	case exp == 0:
		exp = time.Hour
	case exp > MaxPreviewExpiry:
		return Preview{}, errdefs.InvalidArgument("expires_in_seconds is at most %d", int64(MaxPreviewExpiry/time.Second))
	}
	s.previews.mu.Lock()
	scheme, lport := s.previews.scheme, s.previews.port
	s.previews.mu.Unlock()
	if scheme == "" || s.cfg.PreviewDomain == "" {
		return Preview{}, errdefs.Unavailable("this server serves no previews (--preview-addr)")
	}
	sb, hs, err := s.sandboxFor(ctx, c.Graph, sandboxID)
	if err != nil {
		return Preview{}, err
	}
	if hs == nil || sb.Status != store.SandboxRunning || sb.OneCall {
		return Preview{}, errdefs.Conflict("sandbox %s is %s; previews are of running sandboxes", sandboxID, sb.Status)
	}
	secret, err := s.previewSecret()
	if err != nil {
		return Preview{}, err
	}
	now := s.now()
	rec := store.Preview{ID: ids.New(ids.Preview), Graph: c.Graph, SandboxID: sandboxID, Port: port,
		ExpiresAt: now.Add(exp).Truncate(time.Second), CreatedAt: now, Origin: store.Origin{Key: c.Key.ID}}
	if err := s.st.WithTx(ctx, func(q store.Queries) error { return q.CreatePreview(ctx, rec) }); err != nil {
		return Preview{}, err
	}
	token := fmt.Sprintf("p%d-%s-%s", port, strings.TrimPrefix(rec.ID, ids.Preview),
		previewMAC(secret, rec.ID, sandboxID, port, rec.ExpiresAt.Unix()))
	host := token + "." + s.cfg.PreviewDomain
	if lport != "" {
		host = net.JoinHostPort(host, lport)
	}
	p := previewOf(rec)
	p.URL = scheme + "://" + host + "/"
	return p, nil
}

// ListPreviews lists a sandbox's previews, newest first (their URLs are not shown again).
func (s *Service) ListPreviews(ctx context.Context, graph, sandboxID string, p store.Page) ([]Preview, string, error) {
	if _, err := s.st.GetSandbox(ctx, graph, sandboxID); err != nil {
		return nil, "", err
	}
	recs, next, err := s.st.ListPreviews(ctx, graph, sandboxID, p)
	out := make([]Preview, 0, len(recs))
	for _, r := range recs {
		out = append(out, previewOf(r))
	}
	return out, next, err
}

// DeletePreview revokes a preview of a sandbox: its URL answers 404 from now on.
func (s *Service) DeletePreview(ctx context.Context, graph, sandboxID, id string) error {
	p, err := s.st.GetPreview(ctx, id)
	if err != nil || p.Graph != graph || p.SandboxID != sandboxID {
		return errdefs.NotFound("preview %s of sandbox %s not found", id, sandboxID)
	}
	return s.st.WithTx(ctx, func(q store.Queries) error { return q.DeletePreview(ctx, graph, id) })
}

// ResolvePreview checks the host name of a preview request: its signature and expiry, and
// that its sandbox runs here. A host p<port>-s<sandbox ulid> names a port without a
// signature: authorization (the request's header) must then carry an API key with
// sandboxes:read on the sandbox's graph. ok is false for anything else, which the preview
// listener answers 404 (nothing says whether a sandbox exists).
func (s *Service) ResolvePreview(host, authorization string) (sandboxID string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	token, ok := strings.CutSuffix(host, "."+strings.ToLower(s.cfg.PreviewDomain))
	if !ok || s.cfg.PreviewDomain == "" || strings.Contains(token, ".") {
		return "", 0, false
	}
	parts := strings.Split(token, "-")
	if len(parts) == 2 && strings.HasPrefix(parts[0], "p") && strings.HasPrefix(parts[1], "s") {
		return s.resolveOwnerPreview(parts[0][1:], ids.Sandbox+parts[1][1:], authorization)
	}
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "p") {
		return "", 0, false
	}
	port, err := strconv.Atoi(parts[0][1:])
	if err != nil || port < 1 || port > 65535 || !ids.Valid(ids.Preview, ids.Preview+parts[1]) {
		return "", 0, false
	}
	secret, err := s.previewSecret()
	if err != nil {
		return "", 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := s.st.GetPreview(ctx, ids.Preview+parts[1])
	if err != nil || rec.Port != port || !time.Now().Before(rec.ExpiresAt) ||
		!hmac.Equal([]byte(parts[2]), []byte(previewMAC(secret, rec.ID, rec.SandboxID, port, rec.ExpiresAt.Unix()))) {
		return "", 0, false
	}
	if hs := s.lookupHeld(rec.SandboxID); hs == nil || hs.graph != rec.Graph {
		return "", 0, false
	}
	return rec.SandboxID, port, true
}

// resolveOwnerPreview admits a request to a port of a sandbox that carries an API key of
// its graph with sandboxes:read.
func (s *Service) resolveOwnerPreview(portText, sandboxID, authorization string) (string, int, bool) {
	port, err := strconv.Atoi(portText)
	secret, bearer := strings.CutPrefix(authorization, "Bearer ")
	if err != nil || port < 1 || port > 65535 || !bearer || !ids.Valid(ids.Sandbox, sandboxID) {
		return "", 0, false
	}
	hs := s.lookupHeld(sandboxID)
	if hs == nil {
		return "", 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k, err := s.Authenticate(ctx, strings.TrimSpace(secret))
	if err != nil || s.Authorize(ctx, k, hs.graph, store.ScopeSandboxesRead) != nil {
		return "", 0, false
	}
	return sandboxID, port, true
}

// DialPreview connects to a port of a sandbox for its preview.
func (s *Service) DialPreview(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	return s.host.DialPort(ctx, sandboxID, port)
}
