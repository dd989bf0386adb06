package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"encoding/json"
	"github.com/littlebigbrain/lbb/internal/config"
	"testing"

	"github.com/littlebigbrain/lbb/internal/store"
)

// A graph-limited admin key administers its graphs, not the server: it mints, sees and
// revokes only keys within its own graphs and scopes, and reads only its graphs' audit.
func TestGraphAdminStaysInItsGraphs(t *testing.T) {
	s := newServer(t, nil)
	team := s.key([]string{"team"}, []string{store.ScopeAdmin})
	ct := map[string]string{"Content-Type": "application/json"}

	for _, body := range []string{
		`{"graphs": ["*"], "scopes": ["sandboxes:read"]}`,
		`{"graphs": ["main"], "scopes": ["sandboxes:read"]}`,
		`{"graphs": ["team", "new"], "scopes": ["sandboxes:read"]}`,
	} {
		if r := s.do("POST", "/v1/keys", team, ct, body); r.status != 403 || r.json(t)["error"].(map[string]any)["code"] != "forbidden" {
			t.Errorf("minting %s: %d %s", body, r.status, r.body)
		}
	}
	r := s.do("POST", "/v1/keys", team, ct, `{"name": "ci", "graphs": ["team"], "scopes": ["sandboxes:read"]}`)
	if r.status != 201 {
		t.Fatalf("minting within: %d %s", r.status, r.body)
	}
	ci := r.json(t)["id"].(string)

	ids := func(key string) map[string]string {
		r := s.do("GET", "/v1/keys", key, nil, "")
		if r.status != 200 {
			t.Fatalf("listing keys: %d %s", r.status, r.body)
		}
		var l struct{ Data []store.Key }
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range l.Data {
			out[k.Name] = k.ID
		}
		return out
	}
	all := ids(s.admin)
	seen := ids(team)
	if _, ok := seen["admin"]; ok || seen["ci"] != ci {
		t.Errorf("the team admin sees %v", seen)
	}
	if r := s.do("DELETE", "/v1/keys/"+all["admin"], team, nil, ""); r.status != 404 {
		t.Errorf("revoking the server's admin key: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/keys", s.admin, nil, ""); r.status != 200 {
		t.Errorf("the server's admin key after: %d", r.status)
	}
	if r := s.do("DELETE", "/v1/keys/"+ci, team, nil, ""); r.status != 200 {
		t.Errorf("revoking its own graph's key: %d %s", r.status, r.body)
	}

	// Audit: the server's admin key made entries in main; the team admin reads team's only.
	s.do("POST", "/v1/keys", s.admin, ct, `{"graphs": ["main"]}`)
	r = s.do("GET", "/v1/audit", team, nil, "")
	var audit struct{ Data []store.AuditEntry }
	if err := json.Unmarshal(r.body, &audit); r.status != 200 || err != nil {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	for _, e := range audit.Data {
		if e.Graph != "team" {
			t.Errorf("the team admin reads an entry of graph %q: %+v", e.Graph, e)
		}
	}
	if r := s.do("GET", "/v1/audit?graph=main", team, nil, ""); r.status != 404 {
		t.Errorf("another graph's audit: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/audit?graph=main", s.admin, nil, ""); r.status != 200 {
		t.Errorf("the server's admin reads main: %d", r.status)
	}
}

// Routes that read one kind of record and write another need both scopes.
func TestCrossScopes(t *testing.T) {
	s := newServer(t, nil)
	noFilesRead := s.key([]string{"main"}, []string{store.ScopeSandboxesRead, store.ScopeSandboxesWrite, store.ScopeFilesWrite})
	r := s.do("PUT", "/v1/sandboxes/files/content?graph=main&sandbox=sbx_x&path=a&file=file_x", noFilesRead, nil, "")
	if r.status != 403 {
		t.Errorf("importing a File without files:read: %d %s", r.status, r.body)
	}
	noSandboxRead := s.key([]string{"main"}, []string{store.ScopeFilesWrite, store.ScopeFilesRead})
	r = s.do("POST", "/v1/files?graph=main&source_sandbox=sbx_x&source_path=a", noSandboxRead, map[string]string{"Idempotency-Key": "k1"}, "")
	if r.status != 403 {
		t.Errorf("keeping a workspace file without sandboxes:read: %d %s", r.status, r.body)
	}
	r = s.do("POST", "/v1/files?graph=main&name=a.txt", noSandboxRead, map[string]string{"Idempotency-Key": "k2"}, "hello")
	if r.status != 201 {
		t.Errorf("uploading a File needs no sandbox scope: %d %s", r.status, r.body)
	}
}

// /metrics needs an admin key unless the server is told to serve it to anyone.
func TestMetricsNeedAKey(t *testing.T) {
	s := newServer(t, nil)
	if r := s.do("GET", "/metrics", "", nil, ""); r.status != 401 {
		t.Errorf("no key: %d", r.status)
	}
	if r := s.do("GET", "/metrics", s.key([]string{"main"}, nil), nil, ""); r.status != 403 {
		t.Errorf("a key without admin: %d", r.status)
	}
	if r := s.do("GET", "/metrics", s.admin, nil, ""); r.status != 200 || !strings.Contains(string(r.body), "lbb_http_requests_total") {
		t.Errorf("the admin key: %d", r.status)
	}
	public := newServer(t, func(c *config.Config) { c.MetricsPublic = true })
	if r := public.do("GET", "/metrics", "", nil, ""); r.status != 200 {
		t.Errorf("--metrics-public, no key: %d", r.status)
	}
}

// A key holds at most --max-streams-per-key output streams and long-polls open at once; one
// ending frees its place, and another key is not counted with it.
func TestStreamsPerKey(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.MaxStreamsPerKey = 2 })
	ct := map[string]string{"Content-Type": "application/json"}
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, map[string]string{"Idempotency-Key": "sb"}, `{"expires_in_seconds": 600}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	sb := r.json(t)["id"].(string)
	ct["Idempotency-Key"] = "sleep"
	r = s.do("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", s.admin, ct, `{"argv": ["sleep", "30"]}`)
	if r.status != 202 {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	cmd := r.json(t)["id"].(string)
	key := s.key([]string{"main"}, []string{store.ScopeSandboxesRead})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Each of the two holds a long-poll, retrying while a probe below holds its place.
	open := func(path string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 429 {
					return
				}
			}
		}()
	}
	open("/v1/commands/" + cmd + "?graph=main&wait_ms=30000")
	open("/v1/commands/" + cmd + "?graph=main&wait_ms=30000")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = s.do("GET", "/v1/commands/"+cmd+"?graph=main&wait_ms=50", key, nil, "")
		if r.status == 429 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the two may not be open yet
	}
	if r.status != 429 || r.json(t)["error"].(map[string]any)["code"] != "too_many_streams" {
		t.Fatalf("a third stream: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/commands/"+cmd+"?graph=main&wait_ms=1", s.admin, nil, ""); r.status != 200 {
		t.Errorf("another key: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/commands/"+cmd+"?graph=main", key, nil, ""); r.status != 200 {
		t.Errorf("a read without a wait is no stream: %d %s", r.status, r.body)
	}
	cancel()
	wg.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for {
		r = s.do("GET", "/v1/commands/"+cmd+"?graph=main&wait_ms=1", key, nil, "")
		if r.status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.status != 200 {
		t.Errorf("after the streams ended: %d %s", r.status, r.body)
	}
}
