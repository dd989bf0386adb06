package api_test

import (
	"encoding/json"
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

