package api_test

import (
	"strings"
	"testing"
	"time"
)

// TestTemplateBuildAPI: a template with an image recipe answers at once, building; its build
// is a record of its own (here it fails: the test server's machine builds no layers), and a
// run of the version answers 409 with the failed build's code. internal/layers and the e2e
// test build real layers.
func TestTemplateBuildAPI(t *testing.T) {
	s := newServer(t, nil)
	r := s.do("POST", "/v1/sandboxes/templates?graph=main", s.admin, nil,
		`{"name": "pk", "code": "def run(i, c):\n    return 1", "image": {"pip": ["polars"], "run": ["echo hi"]}}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	m := r.json(t)
	if b, _ := m["build"].(map[string]any); b == nil || b["status"] != "building" || m["layer"] == "" {
		t.Fatalf("a new version with a recipe: %s", r.body)
	}
	var b map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; {
		r = s.do("GET", "/v1/sandboxes/templates/pk/build?graph=main", s.admin, nil, "")
		if r.status != 200 {
			t.Fatalf("build: %d %s", r.status, r.body)
		}
		if b = r.json(t); b["status"] != "building" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b["status"] != "failed" || !strings.Contains(b["error"].(string), "builds no template layers") || b["version"] != 1.0 {
		t.Fatalf("build: %v", b)
	}
	r = s.do("POST", "/v1/sandboxes?graph=main", s.admin, map[string]string{"Idempotency-Key": "pk1"}, `{"run": {"template": "pk"}, "wait_ms": 1000}`)
	if r.status != 409 || !strings.Contains(string(r.body), `"template_build_failed"`) {
		t.Fatalf("run of a failed build: %d %s", r.status, r.body)
	}
	// The same recipe again makes a new version (a retry of the build), not the failed one.
	r = s.do("POST", "/v1/sandboxes/templates?graph=main", s.admin, nil,
		`{"name": "pk", "code": "def run(i, c):\n    return 1", "image": {"pip": ["polars"], "run": ["echo hi"]}}`)
	if r.status != 201 || r.json(t)["version"] != 2.0 {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	// As server-sent events: the log as it grows, then the build once it ended.
	r = s.do("GET", "/v1/sandboxes/templates/pk@1/build?graph=main", s.admin, map[string]string{"Accept": "text/event-stream"}, "")
	if body := string(r.body); r.status != 200 || !strings.Contains(body, "event: end\n") || !strings.Contains(body, `"status":"failed"`) ||
		strings.Contains(body, "event: log") && !strings.Contains(body, `"offset":0`) {
		t.Fatalf("build as events: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path, key string
		status    int
	}{
		{"/v1/sandboxes/templates/pk/build?graph=main", "", 401},
		{"/v1/sandboxes/templates/pk@0/build?graph=main", s.admin, 400},
		{"/v1/sandboxes/templates/nope/build?graph=main", s.admin, 404},
	} {
		if r := s.do("GET", c.path, c.key, nil, ""); r.status != c.status {
			t.Errorf("GET %s: %d %s, want %d", c.path, r.status, r.body, c.status)
		}
	}
	s.do("POST", "/v1/sandboxes/templates?graph=main", s.admin, nil, `{"name": "plain", "code": "x"}`)
	if r := s.do("GET", "/v1/sandboxes/templates/plain/build?graph=main", s.admin, nil, ""); r.status != 404 {
		t.Errorf("build of a version without a recipe: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/v1/sandboxes/templates?graph=main", s.admin, nil, `{"name": "bad", "image": {"apt": ["x; rm -rf /"]}}`); r.status != 400 {
		t.Errorf("a recipe with a bad package name: %d %s", r.status, r.body)
	}
}
