package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzRouterMatch: matching never panics, and what it extracts rebuilds the path.
func FuzzRouterMatch(f *testing.F) {
	for _, p := range []string{"/v1/sandboxes/sbx_1", "/v1/sandboxes/templates/lbb/python", "//", "", "/v1/sandboxes/", "/v1/keys/x/y"} {
		f.Add(p)
	}
	s := &Server{}
	s.routes()
	f.Fuzz(func(t *testing.T, path string) {
		r, params, _ := s.router.find("GET", path)
		if r == nil {
			return
		}
		for k, v := range params {
			if v == "" {
				t.Fatalf("%s: empty parameter %s for %s", path, k, r.Pattern)
			}
			if !strings.HasSuffix(r.Pattern, "...}") && strings.Contains(v, "/") {
				t.Fatalf("%s: parameter %s=%q spans segments in %s", path, k, v, r.Pattern)
			}
		}
	})
}

// FuzzRequestHash: the hash of a body does not depend on key order or spacing, nor on
// wait_ms.
func FuzzRequestHash(f *testing.F) {
	f.Add(`{"run": {"code": "x", "input": [1, 2, 3]}, "wait_ms": 5}`)
	f.Add(`{"a": {"b": {"c": 1.50}}, "z": null}`)
	f.Fuzz(func(t *testing.T, body string) {
		var v map[string]any
		d := json.NewDecoder(strings.NewReader(body))
		d.UseNumber()
		if d.Decode(&v) != nil || d.More() {
			return
		}
		h1, err := requestHash("POST /v1/sandboxes", "main", []byte(body))
		if err != nil {
			return
		}
		v["wait_ms"] = 123
		re, _ := json.MarshalIndent(v, "", "   ")
		h2, err := requestHash("POST /v1/sandboxes", "main", re)
		if err != nil {
			t.Fatalf("re-encoded body: %v", err)
		}
		if h1 != h2 {
			t.Fatalf("hash changed:\n%s\n%s", body, re)
		}
		if h3, _ := requestHash("POST /v1/sandboxes", "other", []byte(body)); h3 == h1 {
			t.Fatal("the graph is not in the hash")
		}
	})
}
