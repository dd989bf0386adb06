package api

import "testing"

func TestRouterMatch(t *testing.T) {
	rt := &router{}
	for _, p := range []string{"/v1/sandboxes/{id}", "/v1/sandboxes/templates", "/v1/sandboxes/templates/{name...}", "/v1/sandboxes/{id}/files"} {
		rt.routes = append(rt.routes, &Route{Method: "GET", Pattern: p})
	}
	rt.routes = append(rt.routes, &Route{Method: "POST", Pattern: "/v1/sandboxes"})
	for _, tc := range []struct {
		path, want string
		params     map[string]string
	}{
		{"/v1/sandboxes/sbx_1", "/v1/sandboxes/{id}", map[string]string{"id": "sbx_1"}},
		{"/v1/sandboxes/templates", "/v1/sandboxes/templates", nil},
		{"/v1/sandboxes/templates/lbb/python", "/v1/sandboxes/templates/{name...}", map[string]string{"name": "lbb/python"}},
		{"/v1/sandboxes/templates/files", "/v1/sandboxes/templates/{name...}", map[string]string{"name": "files"}},
		{"/v1/sandboxes/sbx_1/files", "/v1/sandboxes/{id}/files", map[string]string{"id": "sbx_1"}},
		{"/v1/sandboxes/sbx_1/nope", "", nil},
		{"/v1/sandboxes/templates/", "/v1/sandboxes/templates", nil},
	} {
		r, params, _ := rt.find("GET", tc.path)
		got := ""
		if r != nil {
			got = r.Pattern
		}
		if got != tc.want {
			t.Errorf("%s: matched %q, want %q", tc.path, got, tc.want)
			continue
		}
		for k, v := range tc.params {
			if params[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.path, k, params[k], v)
			}
		}
	}
	if r, _, allowed := rt.find("DELETE", "/v1/sandboxes"); r != nil || len(allowed) != 1 || allowed[0] != "POST" {
		t.Errorf("DELETE /v1/sandboxes: %v %v", r, allowed)
	}
}
