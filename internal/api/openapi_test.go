package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/store"
)

// doc is the part of an OpenAPI document the tests read.
type doc struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas map[string]any `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	OperationID string `json:"operationId"`
	Responses   map[string]struct {
		Content map[string]struct {
			Schema any `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

func loadDoc(t *testing.T) doc {
	t.Helper()
	var d doc
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

// docPath is how the document writes a route's pattern.
func docPath(pattern string) string { return strings.ReplaceAll(pattern, "...}", "}") }

// TestOpenAPIRoutes checks that every route the server serves is in the document, and that
// the document has no route the server does not serve.
func TestOpenAPIRoutes(t *testing.T) {
	d := loadDoc(t)
	s := newServer(t, nil)
	served := map[string]bool{}
	for _, r := range s.api.Routes() {
		k := r.Method + " " + docPath(r.Pattern)
		served[k] = true
		ops, ok := d.Paths[docPath(r.Pattern)]
		if !ok || ops[strings.ToLower(r.Method)].OperationID == "" {
			t.Errorf("the server serves %s; openapi.json lacks it", k)
		}
	}
	for p, ops := range d.Paths {
		for m := range ops {
			if k := strings.ToUpper(m) + " " + p; !served[k] {
				t.Errorf("openapi.json has %s; the server does not serve it", k)
			}
		}
	}
}

// validate checks v against an OpenAPI 3.1 schema: type, required, properties, items,
// additionalProperties, enum, $ref, allOf and oneOf.
func validate(d doc, schema any, v any, at string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		return validate(d, d.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")], v, at)
	}
	if all, ok := s["allOf"].([]any); ok {
		return validate(d, mergeAllOf(d, all), v, at)
	}
	if one, ok := s["oneOf"].([]any); ok {
		var errs []string
		for _, sub := range one {
			err := validate(d, sub, v, at)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: matches no oneOf: %s", at, strings.Join(errs, "; "))
		}
	}
	if types := schemaTypes(s["type"]); len(types) > 0 {
		got := jsonType(v)
		okType := false
		for _, t := range types {
			if t == got || t == "number" && got == "integer" {
				okType = true
			}
		}
		if !okType {
			return fmt.Errorf("%s: %s, want %v", at, got, types)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if e == v {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := x[r.(string)]; !ok {
					return fmt.Errorf("%s: lacks required %s", at, r)
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, val := range x {
			if ps, ok := props[k]; ok {
				if err := validate(d, ps, val, at+"."+k); err != nil {
					return err
				}
			} else if ap, ok := s["additionalProperties"]; ok {
				if err := validate(d, ap, val, at+"."+k); err != nil {
					return err
				}
			} else if props != nil {
				return fmt.Errorf("%s: property %s is not documented", at, k)
			}
		}
	case []any:
		for i, e := range x {
			if err := validate(d, s["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// mergeAllOf makes one object schema of allOf's: the union of their properties and
// required fields.
func mergeAllOf(d doc, all []any) map[string]any {
	props := map[string]any{}
	var req []any
	for _, sub := range all {
		m, _ := sub.(map[string]any)
		if ref, ok := m["$ref"].(string); ok {
			m, _ = d.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		}
		if nested, ok := m["allOf"].([]any); ok {
			m = mergeAllOf(d, nested)
		}
		for k, v := range m["properties"].(map[string]any) {
			props[k] = v
		}
		if r, ok := m["required"].([]any); ok {
			req = append(req, r...)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": req}
}

func schemaTypes(t any) []string {
	switch x := t.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, e.(string))
		}
		return out
	}
	return nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

// checker answers a check of one call to s: its status is want, the document gives that
// status to the route, and the answer matches the documented schema. seen collects what
// was checked.
func checker(t *testing.T, d doc, s *server, seen map[string]bool) checkFunc {
	return func(op, pattern string, want int, method, path, key string, hdr map[string]string, body string) reply {
		t.Helper()
		r := s.do(method, path, key, hdr, body)
		if r.status != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
		}
		o, ok := d.Paths[pattern][strings.ToLower(method)]
		if !ok {
			t.Fatalf("%s %s is not documented", method, pattern)
		}
		resp, ok := o.Responses[fmt.Sprint(want)]
		if !ok {
			t.Fatalf("%s %s answers %d, which the document does not give", method, pattern, want)
		}
		if r.header.Get("Content-Type") == "text/event-stream" {
			// A stream (also one that a POST answers when asked): the document must say so.
			if _, ok := resp.Content["text/event-stream"]; !ok {
				t.Fatalf("%s %s answers %d as text/event-stream, which the document does not give", method, pattern, want)
			}
		} else if c, ok := resp.Content["application/json"]; ok {
			var v any
			if err := json.Unmarshal(r.body, &v); err != nil {
				t.Fatalf("%s %s %d: not JSON: %s", method, path, want, r.body)
			}
			if err := validate(d, c.Schema, v, op); err != nil {
				t.Fatalf("%s %s %d: %v\n%s", method, path, want, err, r.body)
			}
		}
		seen[fmt.Sprintf("%s %s %d", method, pattern, want)] = true
		return r
	}
}

// TestOpenAPIContract exercises every documented route for every status code the document
// gives it, and checks each answer against the documented schema.
func TestOpenAPIContract(t *testing.T) {
	// Debian's python3 first: code contexts need its jupyter_client and ipykernel
	// (scripts/deps.sh installs them).
	t.Setenv("PATH", "/usr/bin:/bin:"+os.Getenv("PATH"))
	d := loadDoc(t)
	s := newServer(t, func(c *config.Config) {
		c.MaxRunningPerGraph = 1
		// One one-call run at a time and none waiting: the second answers 429 too_many_runs.
		c.RunSlots, c.RunQueue = 1, 0
		c.MaxBodyBytes = 4096
		c.MaxFileBytes = 4096
	})
	seen := map[string]bool{} // "METHOD /path STATUS"
	reader := s.key([]string{"main"}, []string{store.ScopeSandboxesRead})
	other := s.key([]string{"other"}, nil)
	admin := s.admin
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	check := checker(t, d, s, seen)

	check("healthz", "/healthz", 200, "GET", "/healthz", "", nil, "")
	check("metrics", "/metrics", 200, "GET", "/metrics", admin, nil, "")
	check("metrics", "/metrics", 401, "GET", "/metrics", "", nil, "")
	check("metrics", "/metrics", 403, "GET", "/metrics", reader, nil, "")
	check("openapi", "/v1/openapi.json", 200, "GET", "/v1/openapi.json", "", nil, "")

	const sb = "/v1/sandboxes"
	run := check("createSandbox", sb, 200, "POST", sb+"?graph=main", admin, idem("a"), sumBody).json(t)
	cmdID, sbxID := run["command"].(string), run["sandbox"].(string)
	if r := check("createSandbox", sb, 200, "POST", sb+"?graph=main", admin, idem("a"), sumBody); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay lacks Idempotent-Replayed")
	}
	check("createSandbox", sb, 400, "POST", sb+"?graph=main", admin, nil, sumBody)
	check("createSandbox", sb, 400, "POST", sb+"?graph=main", admin, idem("b"), `{"run": [`)
	check("createSandbox", sb, 401, "POST", sb+"?graph=main", "", idem("b"), sumBody)
	check("createSandbox", sb, 403, "POST", sb+"?graph=main", reader, idem("b"), sumBody)
	check("createSandbox", sb, 404, "POST", sb+"?graph=nope", admin, idem("b"), sumBody)
	check("createSandbox", sb, 413, "POST", sb+"?graph=main", admin, idem("b"), `{"run": {"code": "`+strings.Repeat("x", 5000)+`"}}`)
	check("createSandbox", sb, 422, "POST", sb+"?graph=main", admin, idem("a"), `{"run": {"code": "x"}}`)
	blocked := check("createSandbox", sb, 202, "POST", sb+"?graph=main", admin, idem("block"), `{"run": {"code": "block"}, "wait_ms": 0}`).json(t)
	check("createSandbox", sb, 429, "POST", sb+"?graph=main", admin, idem("c"), sumBody)
	check("deleteSandbox", sb+"/{id}", 409, "DELETE", sb+"/"+blocked["sandbox"].(string)+"?graph=main", admin, nil, "")
	check("killCommand", "/v1/commands/{id}/kill", 409, "POST", "/v1/commands/"+blocked["command"].(string)+"/kill?graph=main", admin, nil, "")
	check("getCommand", "/v1/commands/{id}", 200, "GET", "/v1/commands/"+blocked["command"].(string)+"?graph=main&wait_ms=10", admin, nil, "")
	s.runner.Release()

	check("listSandboxes", sb, 200, "GET", sb+"?graph=main&limit=1", reader, nil, "")
	check("listSandboxes", sb, 400, "GET", sb+"?graph=main&limit=0", reader, nil, "")
	check("listSandboxes", sb, 401, "GET", sb+"?graph=main", "", nil, "")
	check("listSandboxes", sb, 404, "GET", sb+"?graph=main", other, nil, "")

	check("getSandbox", sb+"/{id}", 200, "GET", sb+"/"+sbxID+"?graph=main", reader, nil, "")
	check("getSandbox", sb+"/{id}", 401, "GET", sb+"/"+sbxID+"?graph=main", "x", nil, "")
	check("getSandbox", sb+"/{id}", 404, "GET", sb+"/"+sbxID+"?graph=other", other, nil, "")

	const sc = "/v1/sandboxes/{id}/commands"
	check("listSandboxCommands", sc, 200, "GET", sb+"/"+sbxID+"/commands?graph=main", reader, nil, "")
	check("listSandboxCommands", sc, 400, "GET", sb+"/"+sbxID+"/commands?graph=main&limit=x", reader, nil, "")
	check("listSandboxCommands", sc, 401, "GET", sb+"/"+sbxID+"/commands?graph=main", "", nil, "")
	check("listSandboxCommands", sc, 404, "GET", sb+"/sbx_nope/commands?graph=main", reader, nil, "")

	check("listCommands", "/v1/commands", 200, "GET", "/v1/commands?graph=main&sandbox="+sbxID, reader, nil, "")
	check("listCommands", "/v1/commands", 400, "GET", "/v1/commands?graph=main&limit=5000", reader, nil, "")
	check("listCommands", "/v1/commands", 401, "GET", "/v1/commands?graph=main", "", nil, "")
	check("listCommands", "/v1/commands", 404, "GET", "/v1/commands?graph=nope", admin, nil, "")

	check("getCommand", "/v1/commands/{id}", 200, "GET", "/v1/commands/"+cmdID+"?graph=main&wait_ms=100", reader, nil, "")
	check("getCommand", "/v1/commands/{id}", 400, "GET", "/v1/commands/"+cmdID+"?graph=main&wait_ms=soon", reader, nil, "")
	check("getCommand", "/v1/commands/{id}", 401, "GET", "/v1/commands/"+cmdID+"?graph=main", "", nil, "")
	check("getCommand", "/v1/commands/{id}", 404, "GET", "/v1/commands/"+cmdID+"?graph=other", other, nil, "")

	const tp = "/v1/sandboxes/templates"
	tpl := `{"name": "normalize", "base": "lbb/python", "code": "def run(input, config):\n    return input", "limits": {"memory_mib": 1024}, "timeout_ms": 60000, "config": {"unit": "cm"}}`
	check("createTemplate", tp, 201, "POST", tp+"?graph=main", admin, nil, tpl)
	// The same again makes no version: it answers version 1, existing.
	if v := check("createTemplate", tp, 200, "POST", tp+"?graph=main", admin, nil, tpl).json(t); v["version"] != 1.0 || v["existing"] != true {
		t.Fatalf("saving the same template again: %v", v)
	}
	check("createTemplate", tp, 201, "POST", tp+"?graph=main", admin, nil, strings.Replace(tpl, `"cm"`, `"mm"`, 1))
	check("createTemplate", tp, 400, "POST", tp+"?graph=main", admin, nil, `{"name": "Not A Name"}`)
	check("createTemplate", tp, 401, "POST", tp+"?graph=main", "", nil, tpl)
	check("createTemplate", tp, 403, "POST", tp+"?graph=main", reader, nil, tpl)
	check("createTemplate", tp, 404, "POST", tp+"?graph=nope", admin, nil, tpl)
	check("listTemplates", tp, 200, "GET", tp+"?graph=main", reader, nil, "")
	check("listTemplates", tp, 400, "GET", tp+"?graph=main&limit=-1", reader, nil, "")
	check("listTemplates", tp, 401, "GET", tp+"?graph=main", "", nil, "")
	check("listTemplates", tp, 404, "GET", tp+"?graph=main", other, nil, "")
	const tn = "/v1/sandboxes/templates/{name}"
	if v := check("getTemplate", tn, 200, "GET", tp+"/normalize?graph=main", reader, nil, "").json(t); v["version"] != 2.0 || len(v["versions"].([]any)) != 2 {
		t.Fatalf("newest template: %v", v)
	}
	if v := check("getTemplate", tn, 200, "GET", tp+"/normalize@1?graph=main", reader, nil, "").json(t); v["version"] != 1.0 {
		t.Fatalf("pinned template: %v", v)
	}
	if v := check("getTemplate", tn, 200, "GET", tp+"/lbb/python?graph=main", reader, nil, "").json(t); v["base"] != true {
		t.Fatalf("base template: %v", v)
	}
	check("getTemplate", tn, 400, "GET", tp+"/normalize@x?graph=main", reader, nil, "")
	check("getTemplate", tn, 401, "GET", tp+"/normalize?graph=main", "", nil, "")
	check("getTemplate", tn, 404, "GET", tp+"/normalize?graph=other", other, nil, "")
	// A version with an image recipe has a build (here it fails: this machine builds no layers).
	check("createTemplate", tp, 201, "POST", tp+"?graph=main", admin, nil, `{"name": "pkgs", "code": "x", "image": {"run": ["true"]}}`)
	tb := tp + "/{name}/build"
	check("getTemplateBuild", tb, 200, "GET", tp+"/pkgs/build?graph=main", reader, nil, "")
	check("getTemplateBuild", tb, 400, "GET", tp+"/pkgs@x/build?graph=main", reader, nil, "")
	check("getTemplateBuild", tb, 401, "GET", tp+"/pkgs/build?graph=main", "", nil, "")
	check("getTemplateBuild", tb, 404, "GET", tp+"/normalize/build?graph=main", reader, nil, "")

	check("listGraphs", "/v1/graphs", 200, "GET", "/v1/graphs", other, nil, "")
	check("listGraphs", "/v1/graphs", 401, "GET", "/v1/graphs", "", nil, "")

	nk := check("createKey", "/v1/keys", 201, "POST", "/v1/keys", admin, nil, `{"name": "ci", "graphs": ["main"], "scopes": ["sandboxes:read"]}`).json(t)
	check("createKey", "/v1/keys", 400, "POST", "/v1/keys", admin, nil, `{"scopes": ["root"]}`)
	check("createKey", "/v1/keys", 401, "POST", "/v1/keys", "", nil, `{}`)
	check("createKey", "/v1/keys", 403, "POST", "/v1/keys", reader, nil, `{}`)
	check("listKeys", "/v1/keys", 200, "GET", "/v1/keys?limit=2", admin, nil, "")
	check("listKeys", "/v1/keys", 400, "GET", "/v1/keys?limit=a", admin, nil, "")
	check("listKeys", "/v1/keys", 401, "GET", "/v1/keys", "", nil, "")
	check("listKeys", "/v1/keys", 403, "GET", "/v1/keys", reader, nil, "")
	check("revokeKey", "/v1/keys/{id}", 200, "DELETE", "/v1/keys/"+nk["id"].(string), admin, nil, "")
	check("revokeKey", "/v1/keys/{id}", 401, "DELETE", "/v1/keys/"+nk["id"].(string), nk["secret"].(string), nil, "")
	check("revokeKey", "/v1/keys/{id}", 403, "DELETE", "/v1/keys/"+nk["id"].(string), reader, nil, "")
	check("revokeKey", "/v1/keys/{id}", 404, "DELETE", "/v1/keys/key_nope", admin, nil, "")
	check("listAudit", "/v1/audit", 200, "GET", "/v1/audit?graph=main", admin, nil, "")
	check("listAudit", "/v1/audit", 400, "GET", "/v1/audit?limit=z", admin, nil, "")
	check("listAudit", "/v1/audit", 401, "GET", "/v1/audit", "", nil, "")
	check("listAudit", "/v1/audit", 403, "GET", "/v1/audit", reader, nil, "")
	hb := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.st.PutHost(bg, store.Host{ID: "a", URL: "http://10.0.0.1:7702", State: store.HostUp,
		Capacity: json.RawMessage(`{"cpus":2,"memory_mib":4096,"sandboxes":3,"disk_free_mib":10240}`), LastHeartbeat: hb, RegisteredAt: hb}); err != nil {
		t.Fatal(err)
	}
	check("listHosts", "/v1/hosts", 200, "GET", "/v1/hosts", admin, nil, "")
	check("listHosts", "/v1/hosts", 401, "GET", "/v1/hosts", "", nil, "")
	check("listHosts", "/v1/hosts", 403, "GET", "/v1/hosts", reader, nil, "")
	hostsContract(t, d, s, seen)

	stopped := level3Contract(t, s, check, admin, reader, other, sbxID)
	snapshotContract(t, s, check, admin, reader, other, sbxID, stopped)
	quotaContract(t, d, seen)
	grantContract(t, d, seen)

	// 503: a server that is shutting down takes no run.
	time.Sleep(50 * time.Millisecond)
	if err := s.svc.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	check("createSandbox", sb, 503, "POST", sb+"?graph=main", admin, idem("late"), sumBody)
	check("resumeSandbox", "/v1/sandboxes/{id}/resume", 503, "POST", sb+"/"+stopped+"/resume?graph=main", admin, nil, "")
	snapshotsAfterShutdown(t, check, admin, stopped)
	// …and one whose store is gone is not healthy.
	s.st.Close()
	check("healthz", "/healthz", 503, "GET", "/healthz", "", nil, "")

	var missing []string
	for p, ops := range d.Paths {
		for m, o := range ops {
			for code := range o.Responses {
				if k := fmt.Sprintf("%s %s %s", strings.ToUpper(m), p, code); !seen[k] {
					missing = append(missing, k)
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented answers no test produced:\n  %s", strings.Join(missing, "\n  "))
	}
	_ = http.StatusOK
}
