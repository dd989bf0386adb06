package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// grantContract exercises grants, workflow budgets and usage on a server of its own: every
// status the document gives their routes, 402 budget_exceeded on the routes that start
// runs, and 401 grant_expired and grant_revoked.
func grantContract(t *testing.T, d doc, seen map[string]bool) {
	s := newServer(t, nil)
	check := checker(t, d, s, seen)
	admin, q := s.admin, "?graph=main"
	worker := s.key([]string{"main"}, []string{store.ScopeSandboxesRead, store.ScopeSandboxesWrite, store.ScopeFilesWrite})
	filesOnly := s.key([]string{"main"}, []string{store.ScopeFilesRead})
	other := s.key([]string{"other"}, nil)
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	wantCode := func(r reply, code string) {
		t.Helper()
		if got := r.json(t)["error"].(map[string]any)["code"]; got != code {
			t.Fatalf("code %v, want %s: %s", got, code, r.body)
		}
	}

	const gr = "/v1/grants"
	g := check("mintGrant", gr, 201, "POST", gr+q, worker, nil,
		`{"ttl_seconds": 600, "origin": {"workflow": "etl", "run": "r1", "step": "s1", "attempt": "1"}, "budget": {"runs": 1}}`).json(t)
	token, id := g["token"].(string), g["id"].(string)
	if !strings.HasPrefix(token, "lbb_gt_") || g["created_by"] == "" {
		t.Fatalf("grant: %v", g)
	}
	check("mintGrant", gr, 400, "POST", gr+q, worker, nil, `{"ttl_seconds": 7200}`)
	check("mintGrant", gr, 401, "POST", gr+q, "", nil, `{}`)
	wantCode(check("mintGrant", gr, 403, "POST", gr+q, worker, nil, `{"scopes": ["templates:write"]}`), "forbidden")
	check("mintGrant", gr, 404, "POST", gr+"?graph=other", worker, nil, `{}`)
	check("listGrants", gr, 200, "GET", gr+q, worker, nil, "")
	check("listGrants", gr, 400, "GET", gr+q+"&limit=x", worker, nil, "")
	check("listGrants", gr, 401, "GET", gr+q, "", nil, "")
	check("listGrants", gr, 404, "GET", gr+q, other, nil, "")

	// A run made with the grant carries its origin; its budget counts it.
	run := check("createSandbox", "/v1/sandboxes", 200, "POST", "/v1/sandboxes"+q, token, idem("g1"), sumBody).json(t)
	o := run["origin"].(map[string]any)
	if o["grant"] != id || o["workflow"] != "etl" || o["run"] != "r1" || o["step"] != "s1" || o["attempt"] != "1" || o["key"] == "" {
		t.Fatalf("origin of a run made with a grant: %v", o)
	}
	if left := run["budget"].(map[string]any)["grant"].(map[string]any); left["runs"] != 0.0 {
		t.Fatalf("budget left: %v", run["budget"])
	}
	// So do a sandbox, and a run in it, made with a grant.
	sg := check("mintGrant", gr, 201, "POST", gr+q, worker, nil, `{"origin": {"workflow": "etl", "run": "r0", "step": "s0", "attempt": "2"}}`).json(t)
	gsb := check("createSandbox", "/v1/sandboxes", 201, "POST", "/v1/sandboxes"+q, sg["token"].(string), idem("g-sb0"), `{}`).json(t)
	if o := gsb["origin"].(map[string]any); o["grant"] != sg["id"] || o["step"] != "s0" || o["attempt"] != "2" {
		t.Fatalf("a sandbox's origin: %v", o)
	}
	gr0 := check("runInSandbox", "/v1/sandboxes/{id}/run", 200, "POST", "/v1/sandboxes/"+gsb["id"].(string)+"/run"+q, sg["token"].(string), idem("g-run0"),
		`{"code": "def run(i, c):\n    return 1", "wait_ms": 30000}`).json(t)
	if o := gr0["origin"].(map[string]any); o["grant"] != sg["id"] || o["run"] != "r0" {
		t.Fatalf("a run in a sandbox's origin: %v", o)
	}
	check("deleteSandbox", "/v1/sandboxes/{id}", 200, "DELETE", "/v1/sandboxes/"+gsb["id"].(string)+q, admin, nil, "")
	// A File kept with a grant carries the step too.
	gf := check("createFile", "/v1/files", 201, "POST", "/v1/files"+q+"&name=step-out", token, nil, "out").json(t)["origin"].(map[string]any)
	if gf["grant"] != id || gf["workflow"] != "etl" || gf["step"] != "s1" || gf["attempt"] != "1" {
		t.Fatalf("a File's origin: %v", gf)
	}
	// The same call again replays; a new one is past the grant's budget.
	check("createSandbox", "/v1/sandboxes", 200, "POST", "/v1/sandboxes"+q, token, idem("g1"), sumBody)
	wantCode(check("createSandbox", "/v1/sandboxes", 402, "POST", "/v1/sandboxes"+q, token, idem("g2"), sumBody), "budget_exceeded")
	const gi = "/v1/grants/{id}"
	if got := check("getGrant", gi, 200, "GET", gr+"/"+id+q, worker, nil, "").json(t); got["used"].(map[string]any)["runs"] != 1.0 || got["token"] != nil {
		t.Fatalf("grant record: %v", got)
	}
	check("getGrant", gi, 401, "GET", gr+"/"+id+q, "", nil, "")
	check("getGrant", gi, 404, "GET", gr+"/"+id+q, filesOnly, nil, "") // not its grant
	check("getGrant", gi, 404, "GET", gr+"/key_nope"+q, worker, nil, "")
	check("revokeGrant", gi, 200, "DELETE", gr+"/"+id+q, worker, nil, "")
	wantCode(check("getSandbox", "/v1/sandboxes/{id}", 401, "GET", "/v1/sandboxes/"+run["sandbox"].(string)+q, token, nil, ""), "grant_revoked")
	check("revokeGrant", gi, 401, "DELETE", gr+"/"+id+q, "", nil, "")
	check("revokeGrant", gi, 404, "DELETE", gr+"/key_nope"+q, worker, nil, "")

	// An expired grant.
	short := check("mintGrant", gr, 201, "POST", gr+q, worker, nil, `{"ttl_seconds": 1}`).json(t)["token"].(string)
	time.Sleep(1100 * time.Millisecond)
	wantCode(check("listSandboxes", "/v1/sandboxes", 401, "GET", "/v1/sandboxes"+q, short, nil, ""), "grant_expired")

	// A workflow run's budget: one run, then 402 on every route that starts one.
	const bu = "/v1/budgets/{workflow}/{run}"
	if b := check("putWorkflowBudget", bu, 200, "PUT", "/v1/budgets/etl/r2"+q, worker, nil, `{"runs": 2}`).json(t); b["left"].(map[string]any)["runs"] != 2.0 {
		t.Fatalf("budget: %v", b)
	}
	check("putWorkflowBudget", bu, 400, "PUT", "/v1/budgets/etl/r2"+q, worker, nil, `{"runs": -1}`)
	check("putWorkflowBudget", bu, 401, "PUT", "/v1/budgets/etl/r2"+q, "", nil, `{}`)
	check("putWorkflowBudget", bu, 403, "PUT", "/v1/budgets/etl/r2"+q, filesOnly, nil, `{}`)
	check("putWorkflowBudget", bu, 404, "PUT", "/v1/budgets/etl/r2?graph=nope", worker, nil, `{}`)
	sbx := check("createSandbox", "/v1/sandboxes", 201, "POST", "/v1/sandboxes"+q, worker, idem("g-sb"), `{}`).json(t)["id"].(string)
	wf := `"origin": {"workflow": "etl", "run": "r2"}`
	check("createSandbox", "/v1/sandboxes", 200, "POST", "/v1/sandboxes"+q, worker, idem("g3"), strings.Replace(sumBody, `"wait_ms"`, wf+`, "wait_ms"`, 1))
	wg := check("mintGrant", gr, 201, "POST", gr+q, worker, nil, `{"origin": {"workflow": "etl", "run": "r2", "step": "s2"}}`).json(t)["token"].(string)
	ran := check("execCommand", "/v1/sandboxes/{id}/commands", 200, "POST", "/v1/sandboxes/"+sbx+"/commands"+q, wg, idem("g4"), `{"argv": ["true"], "wait_ms": 30000}`).json(t)
	if ran["origin"].(map[string]any)["step"] != "s2" || ran["usage"] == nil || ran["budget"].(map[string]any)["workflow"].(map[string]any)["runs"] != 0.0 {
		t.Fatalf("command made with a grant: %v", ran)
	}
	wantCode(check("execCommand", "/v1/sandboxes/{id}/commands", 402, "POST", "/v1/sandboxes/"+sbx+"/commands"+q, wg, idem("g5"), `{"argv": ["true"]}`), "budget_exceeded")
	wantCode(check("runInSandbox", "/v1/sandboxes/{id}/run", 402, "POST", "/v1/sandboxes/"+sbx+"/run"+q, wg, idem("g6"), `{"code": "def run(i, c):\n    return 1"}`), "budget_exceeded")
	wantCode(check("createSandbox", "/v1/sandboxes", 402, "POST", "/v1/sandboxes"+q, worker, idem("g7"), strings.Replace(sumBody, `"wait_ms"`, wf+`, "wait_ms"`, 1)), "budget_exceeded")
	if b := check("getWorkflowBudget", bu, 200, "GET", "/v1/budgets/etl/r2"+q, worker, nil, "").json(t); b["used"].(map[string]any)["runs"] != 2.0 {
		t.Fatalf("budget after its runs: %v", b)
	}
	check("getWorkflowBudget", bu, 401, "GET", "/v1/budgets/etl/r2"+q, "", nil, "")
	check("getWorkflowBudget", bu, 403, "GET", "/v1/budgets/etl/r2"+q, filesOnly, nil, "")
	check("getWorkflowBudget", bu, 404, "GET", "/v1/budgets/etl/nope"+q, worker, nil, "")

	// Usage: every ended run and command, grouped.
	const us = "/v1/usage"
	u := check("getUsage", us, 200, "GET", us+q+"&group_by=workflow", worker, nil, "").json(t)
	if u["total"].(map[string]any)["commands"] != 4.0 || len(u["groups"].([]any)) != 1 { // g1, g3, g4 and the run in a sandbox
		t.Fatalf("usage: %v", u)
	}
	check("getUsage", us, 400, "GET", us+q+"&group_by=colour", worker, nil, "")
	check("getUsage", us, 401, "GET", us+q, "", nil, "")
	check("getUsage", us, 403, "GET", us+q, filesOnly, nil, "")
	check("getUsage", us, 404, "GET", us+"?graph=nope", worker, nil, "")

	// A key with a spend cap: its runs, and its grants', count; at the cap nothing starts.
	capped := check("createKey", "/v1/keys", 201, "POST", "/v1/keys", admin, nil,
		`{"graphs": ["main"], "scopes": ["admin"], "spend_cap": {"gib_ms": 1, "period": "day"}}`).json(t)
	cg := check("mintGrant", gr, 201, "POST", gr+q, capped["secret"].(string), nil, `{}`).json(t)["token"].(string)
	check("execCommand", "/v1/sandboxes/{id}/commands", 200, "POST", "/v1/sandboxes/"+sbx+"/commands"+q, cg, idem("cap1"), `{"argv": ["sleep", "0.2"], "wait_ms": 30000}`)
	wantCode(check("execCommand", "/v1/sandboxes/{id}/commands", 402, "POST", "/v1/sandboxes/"+sbx+"/commands"+q, capped["secret"].(string), idem("cap2"), `{"argv": ["true"]}`), "spend_cap_reached")
	wantCode(check("createSandbox", "/v1/sandboxes", 402, "POST", "/v1/sandboxes"+q, cg, idem("cap3"), `{}`), "spend_cap_reached")
	// It makes keys within its cap only.
	if r := check("createKey", "/v1/keys", 403, "POST", "/v1/keys", capped["secret"].(string), nil, `{"spend_cap": {"gib_ms": 5, "period": "day"}}`); !strings.Contains(string(r.body), "spend cap") {
		t.Fatalf("a key past its maker's cap: %s", r.body)
	}

	// No token in the audit trail.
	if a := s.do("GET", "/v1/audit?graph=main&limit=200", admin, nil, ""); strings.Contains(string(a.body), "lbb_gt_") || a.status != 200 {
		t.Fatalf("audit: %d %s", a.status, a.body)
	}
}
