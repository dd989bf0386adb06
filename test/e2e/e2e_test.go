//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api"
)

const sumCode = "def run(input, config):\n    return sum(input)"

// TestService runs the Level 1 and Level 2 checks against one server.
func TestService(t *testing.T) {
	s := startServer(t)

	t.Run("SeedCurl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl")
		}
		// The seed's call, as written.
		out, err := exec.Command("curl", "-s", "-X", "POST", s.url+"/v1/sandboxes?graph=main",
			"-H", "Authorization: Bearer "+s.key,
			"-H", "Idempotency-Key: sum-a", "-H", "Content-Type: application/json",
			"-d", `{"run": {"code": "def run(input, config):\n    return sum(input)", "input": [1,2,3]}, "wait_ms": 30000}`).Output()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if m["ok"] != true || m["result"] != 6.0 || m["status"] != "succeeded" || m["exit_code"] != 0.0 ||
			!strings.HasPrefix(m["command"].(string), "cmd_") || !strings.HasPrefix(m["sandbox"].(string), "sbx_") {
			t.Fatalf("seed call: %s", out)
		}
		// The sandbox is destroyed; its record is kept.
		sb := s.call("GET", "/v1/sandboxes/"+m["sandbox"].(string)+"?graph=main", "", nil, "").obj(t)
		if sb["status"] != "destroyed" || sb["end_reason"] != "run_finished" || sb["ended_at"] == nil {
			t.Fatalf("sandbox record: %v", sb)
		}
		cmd := s.call("GET", "/v1/commands/"+m["command"].(string)+"?graph=main", "", nil, "").obj(t)
		if cmd["status"] != "succeeded" || cmd["result"] != 6.0 || cmd["code"] != sumCode || cmd["idempotency_key"] != "sum-a" {
			t.Fatalf("command record: %v", cmd)
		}
	})

	t.Run("Python", func(t *testing.T) {
		code := "import numpy as np, pandas as pd\n" +
			"def run(input, config):\n" +
			"    print('rows', len(input))\n" +
			"    df = pd.DataFrame(input)\n" +
			"    return {'total': np.int64(df['x'].sum()), 'mean': df['x'].mean(), 'unit': config['unit'], 'rows': df}\n"
		_, m := s.run("py-1", jsonBody(t, map[string]any{"run": map[string]any{"code": code, "input": []map[string]int{{"x": 1}, {"x": 3}}, "config": map[string]string{"unit": "cm"}}}))
		res, _ := m["result"].(map[string]any)
		if m["ok"] != true || res["total"] != 4.0 || res["mean"] != 2.0 || res["unit"] != "cm" || len(res["rows"].([]any)) != 2 {
			t.Fatalf("numpy and pandas result: %v", m)
		}
		// A short output is all in the tail; the head holds what the tail does not.
		if so := m["stdout"].(map[string]any); so["tail"] != "rows 2\n" || so["head"] != "" || so["bytes"] != 7.0 {
			t.Fatalf("stdout: %v", so)
		}
	})

	t.Run("PythonAsync", func(t *testing.T) {
		_, m := s.run("py-async", jsonBody(t, map[string]any{"run": map[string]any{
			"code": "import asyncio\nasync def run(input, config):\n    await asyncio.sleep(0.01)\n    return input * 2", "input": 21}}))
		if m["ok"] != true || m["result"] != 42.0 {
			t.Fatalf("%v", m)
		}
	})

	t.Run("Node", func(t *testing.T) {
		_, m := s.run("node-1", jsonBody(t, map[string]any{"run": map[string]any{"language": "node",
			"code": "async function run(input, config) { console.log('hi'); return input.map(x => x * config.k) }", "input": []int{1, 2}, "config": map[string]int{"k": 3}}}))
		if m["ok"] != true || fmt.Sprint(m["result"]) != "[3 6]" || m["base"] != "lbb/node" || m["stdout"].(map[string]any)["tail"] != "hi\n" {
			t.Fatalf("%v", m)
		}
	})

	t.Run("Shell", func(t *testing.T) {
		_, m := s.run("shell-1", jsonBody(t, map[string]any{"run": map[string]any{"base": "lbb/shell",
			"code": "jq -c '[.[] * 2]' > \"$LBB_RESULT\"\necho \"$LBB_CONFIG\"", "input": []int{1, 2}, "config": map[string]int{"a": 1}}}))
		if m["ok"] != true || fmt.Sprint(m["result"]) != "[2 4]" || m["stdout"].(map[string]any)["tail"] != "{\"a\":1}\n" {
			t.Fatalf("%v", m)
		}
	})

	t.Run("Raises", func(t *testing.T) {
		_, m := s.run("raise-1", jsonBody(t, map[string]any{"run": map[string]any{
			"code": "def run(input, config):\n    raise ValueError('bad input')"}}))
		se := m["stderr"].(map[string]any)
		all := se["head"].(string) + se["tail"].(string)
		if m["ok"] != false || m["status"] != "failed" || !strings.Contains(all, "Traceback") || !strings.Contains(all, "ValueError: bad input") {
			t.Fatalf("%v", m)
		}
	})

	t.Run("EnvMasked", func(t *testing.T) {
		r, m := s.run("env-1", jsonBody(t, map[string]any{"run": map[string]any{
			"code": "import os\ndef run(input, config):\n    print(os.environ['TOKEN'])\n    return os.environ['TOKEN']",
			"env":  map[string]string{"TOKEN": "tok-5ecret-value"}}}))
		cmd := s.call("GET", "/v1/commands/"+m["command"].(string)+"?graph=main", "", nil, "")
		if m["ok"] != true || strings.Contains(string(r.body), "5ecret") || strings.Contains(string(cmd.body), "5ecret") || !strings.Contains(string(cmd.body), `"TOKEN"`) {
			t.Fatalf("answer %s\nrecord %s", r.body, cmd.body)
		}
	})

	// A limit below what the code takes ends the run with the limit's status.
	for _, tc := range []struct {
		name, key, limit string
		mib              int
		code, status     string
	}{
		{"LimitMemory", "oom-1", "memory_mib", 128, "def run(input, config):\n    x = bytearray(1024 * 1024 * 1024)\n    return len(x)", "oom"},
		{"LimitDisk", "disk-1", "disk_mib", 64, "def run(input, config):\n    with open('big', 'wb') as f:\n        for i in range(200):\n            f.write(b'x' * 1024 * 1024)", "disk_full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m := s.run(tc.key, jsonBody(t, map[string]any{"limits": map[string]int{tc.limit: tc.mib}, "run": map[string]any{"code": tc.code}}))
			if m["ok"] != false || m["status"] != tc.status {
				t.Fatalf("%v", m)
			}
		})
	}

	t.Run("LimitTimeout", func(t *testing.T) {
		t0 := time.Now()
		_, m := s.run("timeout-1", jsonBody(t, map[string]any{"timeout_ms": 1000, "run": map[string]any{
			"code": "import time\ndef run(input, config):\n    time.sleep(60)"}}))
		if m["ok"] != false || m["status"] != "timed_out" || time.Since(t0) > 20*time.Second {
			t.Fatalf("%v after %s", m, time.Since(t0))
		}
	})

	t.Run("LimitCaps", func(t *testing.T) {
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "cap-1"},
			`{"run": {"code": "x"}, "limits": {"memory_mib": 999999}}`)
		if r.status != 400 || r.errCode(t) != "limit_exceeded" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		body := `{"run": {"code": "def run(input, config):\n    return 1"}}`
		for _, tc := range []struct {
			name, key string
			hdr       map[string]string
			body      string
			status    int
			code      string
		}{
			{"no API key", "-", map[string]string{"Idempotency-Key": "e1"}, body, 401, "unauthorized"},
			{"wrong API key", "lbb_sk_wrong", map[string]string{"Idempotency-Key": "e1"}, body, 401, "unauthorized"},
			{"no Idempotency-Key", "", nil, body, 400, "idempotency_key_required"},
			{"bad JSON", "", map[string]string{"Idempotency-Key": "e2"}, `{"run": {"code": `, 400, "invalid_request"},
			{"unknown base", "", map[string]string{"Idempotency-Key": "e3"}, `{"run": {"code": "x", "base": "lbb/cobol"}}`, 400, "invalid_request"},
		} {
			r := s.call("POST", "/v1/sandboxes?graph=main", tc.key, tc.hdr, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code || r.obj(t)["error"].(map[string]any)["request_id"] == "" {
				t.Errorf("%s: %d %s", tc.name, r.status, r.body)
			}
		}
	})

	t.Run("Templates", func(t *testing.T) {
		mk := func(mult int) map[string]any {
			r := s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil, jsonBody(t, map[string]any{
				"name": "normalize", "base": "lbb/python", "limits": map[string]int{"memory_mib": 256}, "timeout_ms": 60000,
				"config": map[string]any{"unit": "cm", "scale": 1},
				"code":   fmt.Sprintf("def run(input, config):\n    return {'v': %d, 'sum': sum(input) * %d, 'unit': config['unit'], 'scale': config['scale']}", mult, mult)}))
			if r.status != 201 {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			return r.obj(t)
		}
		v1, v2 := mk(1), mk(10)
		if v1["version"] != 1.0 || v2["version"] != 2.0 || v1["id"] != v2["id"] {
			t.Fatalf("versions: %v %v", v1, v2)
		}
		_, m := s.run("tpl-newest", `{"run": {"template": "normalize", "input": [1, 2, 3], "config": {"unit": "mm"}}}`)
		res := m["result"].(map[string]any)
		if res["v"] != 10.0 || res["sum"] != 60.0 || res["unit"] != "mm" || res["scale"] != 1.0 {
			t.Fatalf("newest: %v", m)
		}
		if tr := m["template"].(map[string]any); tr["version"] != 2.0 || tr["name"] != "normalize" || m["limits"].(map[string]any)["memory_mib"] != 256.0 {
			t.Fatalf("record of the newest: %v", m)
		}
		_, m = s.run("tpl-pinned", `{"run": {"template": "normalize@1", "input": [1, 2, 3]}}`)
		if m["result"].(map[string]any)["v"] != 1.0 || m["template"].(map[string]any)["version"] != 1.0 {
			t.Fatalf("pinned: %v", m)
		}
		cmd := s.call("GET", "/v1/commands/"+m["command"].(string)+"?graph=main", "", nil, "").obj(t)
		if cmd["template"].(map[string]any)["version"] != 1.0 {
			t.Fatalf("command record: %v", cmd)
		}
		l := s.call("GET", "/v1/sandboxes/templates?graph=main", "", nil, "").obj(t)
		bases := l["bases"].([]any)
		py := bases[0].(map[string]any)
		if len(l["data"].([]any)) != 1 || len(bases) != 4 || py["name"] != "lbb/python" || !strings.HasPrefix(py["versions"].(map[string]any)["python"].(string), "3.13") {
			t.Fatalf("list: %v", l)
		}
		node := s.call("GET", "/v1/sandboxes/templates/lbb/node?graph=main", "", nil, "").obj(t)
		if !strings.HasPrefix(node["versions"].(map[string]any)["node"].(string), "24.") && !strings.HasPrefix(node["versions"].(map[string]any)["node"].(string), "v24.") {
			t.Fatalf("lbb/node: %v", node)
		}
	})

	t.Run("Idempotency", func(t *testing.T) {
		body := `{"run": {"code": "def run(input, config):\n    return input + 1", "input": 1}}`
		first, m := s.run("idem-1", body)
		again, m2 := s.run("idem-1", body)
		if first.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotent-Replayed") != "true" || m["command"] != m2["command"] {
			t.Fatalf("replay: %v %v", again.header, m2)
		}
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "idem-1"}, `{"run": {"code": "x", "input": 2}}`)
		if r.status != 422 || r.errCode(t) != "idempotency_key_reused" {
			t.Fatalf("different body: %d %s", r.status, r.body)
		}
	})

	t.Run("ConcurrentSameKey", func(t *testing.T) {
		body := `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(1)\n    return input", "input": "once"}}`
		const n = 10
		var wg sync.WaitGroup
		cmds := make([]string, n)
		replayed := make([]bool, n)
		for i := range n {
			wg.Go(func() {
				r, m := s.run("concurrent-1", body)
				cmds[i], replayed[i] = fmt.Sprint(m["command"]), r.header.Get("Idempotent-Replayed") == "true"
				if m["result"] != "once" {
					t.Errorf("call %d: %v", i, m)
				}
			})
		}
		wg.Wait()
		firsts := 0
		for i := range n {
			if cmds[i] != cmds[0] {
				t.Fatalf("two commands for one key: %v", cmds)
			}
			if !replayed[i] {
				firsts++
			}
		}
		if firsts != 1 {
			t.Fatalf("%d calls were answered as the first", firsts)
		}
		// Exactly one command record ran for the key.
		l := s.call("GET", "/v1/commands?graph=main&limit=1000", "", nil, "").obj(t)
		count := 0
		for _, c := range l["data"].([]any) {
			if c.(map[string]any)["idempotency_key"] == "concurrent-1" {
				count++
			}
		}
		if count != 1 {
			t.Fatalf("%d command records for one key", count)
		}
	})

	t.Run("WaitAnd202", func(t *testing.T) {
		r, m := s.run("wait-1", `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(1.5)\n    return 'late'"}, "wait_ms": 0}`)
		if r.status != 202 || m["status"] != "running" {
			t.Fatalf("%d %v", r.status, m)
		}
		cmd := s.call("GET", "/v1/commands/"+m["command"].(string)+"?graph=main&wait_ms=20000", "", nil, "").obj(t)
		if cmd["status"] != "succeeded" || cmd["result"] != "late" {
			t.Fatalf("after wait: %v", cmd)
		}
	})

	t.Run("CrossGraph", func(t *testing.T) {
		_, m := s.run("xg-1", `{"run": {"code": "def run(input, config):\n    return 1"}}`)
		k := s.call("POST", "/v1/keys", "", nil, `{"name": "other", "graphs": ["other"]}`)
		if k.status != 201 {
			t.Fatalf("key: %d %s", k.status, k.body)
		}
		other := k.obj(t)["secret"].(string)
		for _, path := range []string{
			"/v1/commands/" + m["command"].(string) + "?graph=other",
			"/v1/sandboxes/" + m["sandbox"].(string) + "?graph=other",
			"/v1/commands/" + m["command"].(string) + "?graph=main",
			"/v1/sandboxes?graph=main",
		} {
			if r := s.call("GET", path, other, nil, ""); r.status != 404 || r.errCode(t) != "not_found" {
				t.Errorf("%s: %d %s", path, r.status, r.body)
			}
		}
		// The same idempotency key in the other graph is its own.
		r := s.call("POST", "/v1/sandboxes?graph=other", other, map[string]string{"Idempotency-Key": "xg-1"}, `{"run": {"code": "def run(input, config):\n    return 2"}}`)
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" || r.obj(t)["result"] != 2.0 {
			t.Fatalf("other graph's run: %d %s", r.status, r.body)
		}
	})

	t.Run("OpenAPI", func(t *testing.T) {
		r := s.call("GET", "/v1/openapi.json", "-", nil, "")
		if r.status != 200 || string(r.body) != string(api.OpenAPI())+"\n" && string(r.body) != string(api.OpenAPI()) {
			t.Fatalf("openapi.json: %d", r.status)
		}
		h := s.call("GET", "/healthz", "-", nil, "")
		m := s.call("GET", "/metrics", "", nil, "")
		if h.status != 200 || m.status != 200 || !strings.Contains(string(m.body), `lbb_runs_total{status="succeeded"}`) {
			t.Fatalf("healthz %d, metrics %d", h.status, m.status)
		}
		a := s.call("GET", "/v1/audit?graph=main", "", nil, "").obj(t)
		if len(a["data"].([]any)) == 0 {
			t.Fatal("empty audit trail")
		}
	})

	t.Run("CLI", func(t *testing.T) {
		dir := t.TempDir()
		py := filepath.Join(dir, "sum.py")
		os.WriteFile(py, []byte(sumCode+"\n"), 0o644)
		out, errOut, err := s.cli("run", py, "--input", "[1,2,3]")
		if err != nil || strings.TrimSpace(out) != "6" {
			t.Fatalf("lbb run: %v %q %q", err, out, errOut)
		}
		out, _, err = s.cli("run", py, "--input", "[1,2]", "--json")
		var run map[string]any
		if err != nil || json.Unmarshal([]byte(out), &run) != nil || run["result"] != 3.0 {
			t.Fatalf("lbb run --json: %v %s", err, out)
		}
		bad := filepath.Join(dir, "bad.py")
		os.WriteFile(bad, []byte("def run(input, config):\n    raise KeyError('x')\n"), 0o644)
		if _, errOut, err := s.cli("run", bad); err == nil || !strings.Contains(errOut, "KeyError") {
			t.Fatalf("a raising run: %v %q", err, errOut)
		}
		js := filepath.Join(dir, "double.js")
		os.WriteFile(js, []byte("exports.run = (input) => input * 2\n"), 0o644)
		if out, errOut, err := s.cli("run", js, "--input", "21"); err != nil || strings.TrimSpace(out) != "42" {
			t.Fatalf("lbb run node: %v %q %q", err, out, errOut)
		}
		if _, errOut, err := s.cli("templates", "create", "cli-tpl", "--file", py, "--config", `{"a": 1}`); err != nil {
			t.Fatalf("templates create: %v %s", err, errOut)
		}
		if out, errOut, err := s.cli("run", "--template", "cli-tpl", "--input", "[4,5]"); err != nil || strings.TrimSpace(out) != "9" {
			t.Fatalf("run --template: %v %q %q", err, out, errOut)
		}
		if out, _, err := s.cli("templates", "list"); err != nil || !strings.Contains(out, "cli-tpl") || !strings.Contains(out, "lbb/python") {
			t.Fatalf("templates list: %v %s", err, out)
		}
		if out, _, err := s.cli("templates", "show", "cli-tpl@1"); err != nil || !strings.Contains(out, "version 1") {
			t.Fatalf("templates show: %v %s", err, out)
		}
		out, _, err = s.cli("run", py, "--input", "[1]", "--json")
		json.Unmarshal([]byte(out), &run)
		if out, _, err := s.cli("commands", "get", run["command"].(string)); err != nil || !strings.Contains(out, "succeeded") {
			t.Fatalf("commands get: %v %s", err, out)
		}
		out, _, err = s.cli("keys", "create", "--name", "cli", "--for-graph", "cli-graph", "--json")
		var key map[string]any
		if err != nil || json.Unmarshal([]byte(out), &key) != nil || !strings.HasPrefix(key["secret"].(string), "lbb_sk_") {
			t.Fatalf("keys create: %v %s", err, out)
		}
		if out, _, err := s.cli("keys", "list"); err != nil || !strings.Contains(out, key["id"].(string)) {
			t.Fatalf("keys list: %v %s", err, out)
		}
		if _, _, err := s.cli("keys", "revoke", key["id"].(string)); err != nil {
			t.Fatalf("keys revoke: %v", err)
		}
		if r := s.call("GET", "/v1/sandboxes?graph=cli-graph", key["secret"].(string), nil, ""); r.status != 401 {
			t.Fatalf("a revoked key: %d", r.status)
		}
	})
}
