package api

import (
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
