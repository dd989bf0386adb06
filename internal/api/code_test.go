package api_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCodeContexts runs cells in a Python context on the local driver: the host's python3
// must have jupyter_client and ipykernel (Debian's python3-ipykernel); the base image has
// them, and test/e2e runs the same on the real drivers.
func TestCodeContexts(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin:"+os.Getenv("PATH"))
	if err := exec.Command("python3", "-c", "import jupyter_client, ipykernel").Run(); err != nil {
		t.Skip("the host's python3 has no jupyter_client and ipykernel (apt-get install python3-ipykernel); test/e2e covers contexts on the base image")
	}
	s := newServer(t, nil)
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, idem("c-sb"), `{"expires_in_seconds": 600}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	sb := r.json(t)["id"].(string)
	cell := func(key, body string) map[string]any {
		t.Helper()
		r := s.do("POST", "/v1/sandboxes/"+sb+"/code?graph=main", s.admin, idem(key), body)
		if r.status != 200 {
			t.Fatalf("cell %s: %d %s", key, r.status, r.body)
		}
		return r.json(t)
	}
	text := func(m map[string]any) string {
		rs := m["results"].([]any)
		if len(rs) == 0 {
			return ""
		}
		return rs[len(rs)-1].(map[string]any)["data"].(map[string]any)["text/plain"].(string)
	}
	c1 := cell("c1", `{"code": "x = 1\nimport math\ndef f(n):\n    return n * 2\n"}`)
	if c1["status"] != "succeeded" || len(c1["results"].([]any)) != 0 {
		t.Fatalf("c1: %v", c1)
	}
	ctxID := c1["context"].(string)
	if c2 := cell("c2", `{"code": "print('hi')\nf(x + 1) + math.floor(0.5)"}`); text(c2) != "4" || c2["stdout"] != "hi\n" || c2["context"] != ctxID {
		t.Fatalf("c2: %v", c2)
	}
	// A retry answers the same, without running again.
	if r := s.do("POST", "/v1/sandboxes/"+sb+"/code?graph=main", s.admin, idem("c2"), `{"code": "print('hi')\nf(x + 1) + math.floor(0.5)"}`); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %v %s", r.header, r.body)
	}
	c3 := cell("c3", `{"code": "1/0"}`)
	if e, _ := c3["error"].(map[string]any); c3["status"] != "failed" || e["name"] != "ZeroDivisionError" || !strings.Contains(strings.Join(anyStrings(e["traceback"]), "\n"), "1/0") {
		t.Fatalf("c3: %v", c3)
	}
	c4 := cell("c4", `{"code": "while True: pass", "timeout_ms": 1500}`)
	if c4["status"] != "timed_out" {
		t.Fatalf("c4: %v", c4)
	}
	if c5 := cell("c5", `{"code": "x"}`); text(c5) != "1" {
		t.Fatalf("after the timeout: %v", c5)
	}
	// The record of a cell.
	r = s.do("GET", "/v1/commands/"+c1["command"].(string)+"?graph=main", s.admin, nil, "")
	if rec := r.json(t); rec["kind"] != "code" || rec["code"] == "" || rec["status"] != "succeeded" {
		t.Fatalf("record: %s", r.body)
	}
	// A stream: events in order, then end.
	r = s.do("POST", "/v1/sandboxes/"+sb+"/code?graph=main", s.admin, map[string]string{"Idempotency-Key": "c6", "Accept": "text/event-stream"},
		`{"code": "print('a')\nimport sys; print('b', file=sys.stderr)\n21 * 2"}`)
	if got := eventNames(string(r.body)); got != "stdout stderr result end" {
		t.Fatalf("stream events %q: %s", got, r.body)
	}
	// Restart clears the state.
	if r := s.do("POST", "/v1/sandboxes/"+sb+"/contexts/"+ctxID+"/restart?graph=main", s.admin, nil, ""); r.status != 200 {
		t.Fatalf("restart: %d %s", r.status, r.body)
	}
	if c7 := cell("c7", `{"code": "x", "context": "`+ctxID+`"}`); c7["error"].(map[string]any)["name"] != "NameError" {
		t.Fatalf("after restart: %v", c7)
	}
	r = s.do("GET", "/v1/sandboxes/"+sb+"/contexts?graph=main", s.admin, nil, "")
	var l struct{ Data []map[string]any }
	if json.Unmarshal(r.body, &l); len(l.Data) != 1 || l.Data[0]["restarts"] != 1.0 || l.Data[0]["status"] != "ready" {
		t.Fatalf("list: %s", r.body)
	}
	if r := s.do("DELETE", "/v1/sandboxes/"+sb+"/contexts/"+ctxID+"?graph=main", s.admin, nil, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/v1/sandboxes/"+sb+"/code?graph=main", s.admin, idem("c8"), `{"code": "1", "context": "`+ctxID+`"}`); r.status != 404 {
		t.Fatalf("a deleted context: %d %s", r.status, r.body)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func eventNames(body string) string {
	var names []string
	for _, line := range strings.Split(body, "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	return strings.Join(names, " ")
}

// codeContractRunning exercises the code routes on a running sandbox A (path /v1/sandboxes/A)
// and answers the context it made; codeContractStopped the same routes once A is stopped.
func codeContractRunning(t *testing.T, check checkFunc, admin, reader, other, A string) string {
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	q := "?graph=main"
	const cx, cr, cd, co = "/v1/sandboxes/{id}/contexts", "/v1/sandboxes/{id}/contexts/{context}/restart", "/v1/sandboxes/{id}/contexts/{context}", "/v1/sandboxes/{id}/code"
	c := check("createContext", cx, 201, "POST", A+"/contexts"+q, admin, nil, `{"language": "python"}`).json(t)["id"].(string)
	check("createContext", cx, 400, "POST", A+"/contexts"+q, admin, nil, `{"language": "cobol"}`)
	check("createContext", cx, 401, "POST", A+"/contexts"+q, "", nil, "")
	check("createContext", cx, 403, "POST", A+"/contexts"+q, reader, nil, "")
	check("createContext", cx, 404, "POST", "/v1/sandboxes/sbx_nope/contexts"+q, admin, nil, "")
	check("listContexts", cx, 200, "GET", A+"/contexts"+q, reader, nil, "")
	check("listContexts", cx, 401, "GET", A+"/contexts"+q, "", nil, "")
	check("listContexts", cx, 404, "GET", A+"/contexts?graph=other", other, nil, "")
	body := `{"code": "y = 20\ny + 1", "context": "` + c + `"}`
	if r := check("runCode", co, 200, "POST", A+"/code"+q, admin, idem("code-1"), body).json(t); r["status"] != "succeeded" {
		t.Fatalf("cell: %v", r)
	}
	check("runCode", co, 400, "POST", A+"/code"+q, admin, nil, body)
	check("runCode", co, 401, "POST", A+"/code"+q, "", idem("code-2"), body)
	check("runCode", co, 403, "POST", A+"/code"+q, reader, idem("code-2"), body)
	check("runCode", co, 404, "POST", A+"/code"+q, admin, idem("code-3"), `{"code": "1", "context": "ctx_nope"}`)
	check("runCode", co, 422, "POST", A+"/code"+q, admin, idem("code-1"), `{"code": "2"}`)
	check("restartContext", cr, 200, "POST", A+"/contexts/"+c+"/restart"+q, admin, nil, "")
	check("restartContext", cr, 401, "POST", A+"/contexts/"+c+"/restart"+q, "", nil, "")
	check("restartContext", cr, 403, "POST", A+"/contexts/"+c+"/restart"+q, reader, nil, "")
	check("restartContext", cr, 404, "POST", A+"/contexts/ctx_nope/restart"+q, admin, nil, "")
	d := check("createContext", cx, 201, "POST", A+"/contexts"+q, admin, nil, "").json(t)["id"].(string)
	check("deleteContext", cd, 200, "DELETE", A+"/contexts/"+d+q, admin, nil, "")
	check("deleteContext", cd, 401, "DELETE", A+"/contexts/"+d+q, "", nil, "")
	check("deleteContext", cd, 403, "DELETE", A+"/contexts/"+d+q, reader, nil, "")
	check("deleteContext", cd, 404, "DELETE", A+"/contexts/"+d+q, admin, nil, "")
	return c
}

func codeContractStopped(t *testing.T, check checkFunc, admin, A, c string) {
	q := "?graph=main"
	check("createContext", "/v1/sandboxes/{id}/contexts", 409, "POST", A+"/contexts"+q, admin, nil, "")
	check("restartContext", "/v1/sandboxes/{id}/contexts/{context}/restart", 409, "POST", A+"/contexts/"+c+"/restart"+q, admin, nil, "")
	check("runCode", "/v1/sandboxes/{id}/code", 409, "POST", A+"/code"+q, admin, map[string]string{"Idempotency-Key": "code-stopped"}, `{"code": "1"}`)
}

// TestRunScript: a plain program in one call is a command record of kind script, replayed by
// its key (the host agent's tests run scripts for real; here the fake runner answers).
func TestRunScript(t *testing.T) {
	s := newServer(t, nil)
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	body := `{"run": {"script": "import math\nprint(math.factorial(20))", "language": "python"}}`
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, idem("s1"), body)
	m := r.json(t)
	if r.status != 200 || m["ok"] != true || m["exit_code"] != 0.0 || m["duration_ms"] == nil {
		t.Fatalf("script: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, idem("s1"), body); r.header.Get("Idempotent-Replayed") != "true" || r.json(t)["command"] != m["command"] {
		t.Fatalf("replay: %v %s", r.header, r.body)
	}
	r = s.do("GET", "/v1/commands/"+m["command"].(string)+"?graph=main", s.admin, nil, "")
	if rec := r.json(t); rec["kind"] != "script" || rec["code"] != "import math\nprint(math.factorial(20))" {
		t.Fatalf("record: %s", r.body)
	}
	if r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, idem("s3"), `{"run": {"script": "1", "code": "def run(i, c): return 1"}}`); r.status != 400 {
		t.Fatalf("script and code: %d %s", r.status, r.body)
	}
}

// TestCodeNode runs cells in a Node context on the local driver (the host's node): top-level
// await, declarations that stay, the last expression as a result, an error with its stack,
// and a synchronous loop interrupted at its timeout.
func TestCodeNode(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("the local driver runs the host's node, and there is none")
	}
	s := newServer(t, nil)
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, idem("n-sb"), `{"expires_in_seconds": 600}`)
	sb := r.json(t)["id"].(string)
	n := 0
	cell := func(body string) map[string]any {
		t.Helper()
		n++
		r := s.do("POST", "/v1/sandboxes/"+sb+"/code?graph=main", s.admin, idem(fmt.Sprint("n", n)), body)
		if r.status != 200 {
			t.Fatalf("cell %s: %d %s", body, r.status, r.body)
		}
		return r.json(t)
	}
	plain := func(m map[string]any) string {
		rs, _ := m["results"].([]any)
		if len(rs) == 0 {
			return ""
		}
		return rs[len(rs)-1].(map[string]any)["data"].(map[string]any)["text/plain"].(string)
	}
	cell(`{"language": "node", "code": "const base = await Promise.resolve(40)\nfunction add(a, b) { return a + b }"}`)
	if got := cell(`{"language": "node", "code": "console.log('hi')\nadd(base, 2)"}`); plain(got) != "42" || got["stdout"] != "hi\n" {
		t.Fatalf("state: %v", got)
	}
	e := cell(`{"language": "node", "code": "throw new RangeError('too far')"}`)
	if er, _ := e["error"].(map[string]any); er["name"] != "RangeError" || !strings.Contains(fmt.Sprint(er["traceback"]), "RangeError: too far") {
		t.Fatalf("error: %v", e)
	}
	if l := cell(`{"language": "node", "code": "while (true) {}", "timeout_ms": 1000}`); l["status"] != "timed_out" {
		t.Fatalf("loop: %v", l)
	}
	if got := cell(`{"language": "node", "code": "base"}`); plain(got) != "40" {
		t.Fatalf("after the interrupt: %v", got)
	}
}
