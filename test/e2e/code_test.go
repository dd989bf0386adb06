//go:build linux

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestCodeContexts: Python contexts (a Jupyter kernel in the base image) on the ns driver and
// on gvisor: state across cells, a matplotlib figure as a PNG, a DataFrame as HTML, an
// exception with its traceback, a loop interrupted at its timeout with the context alive, a
// stop and resume that restarts the context and says so, a pause that keeps its state (and on
// gvisor a snapshot that does, and a fork with a copy of it), a shell context (cwd and exports
// kept, exit status, timeout), and a plain script in one call.
func TestCodeContexts(t *testing.T) {
	isolations := []string{"ns"}
	if _, why := runsc(); why == "" {
		isolations = append(isolations, "gvisor")
	} else if strings.TrimSpace(why) != "" {
		t.Logf("gvisor not tested: %s", why)
	}
	s := startServer(t, "--pool-min", "0", "--pool-max", "1")
	n := 0
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "code-sb-" + iso},
				fmt.Sprintf(`{"expires_in_seconds": 600, "isolation": %q}`, iso))
			if r.status != 201 {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			sb := r.obj(t)["id"].(string)
			defer s.call("DELETE", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "")
			cell := func(body string) map[string]any {
				t.Helper()
				n++
				r := s.call("POST", "/v1/sandboxes/"+sb+"/code?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprintf("cell-%s-%d", iso, n)}, body)
				if r.status != 200 {
					t.Fatalf("cell %s: %d %s", body, r.status, r.body)
				}
				return r.obj(t)
			}
			code := func(c string) map[string]any { b, _ := json.Marshal(map[string]any{"code": c}); return cell(string(b)) }
			last := func(m map[string]any, mime string) string {
				rs, _ := m["results"].([]any)
				for i := len(rs) - 1; i >= 0; i-- {
					if v, ok := rs[i].(map[string]any)["data"].(map[string]any)[mime].(string); ok {
						return v
					}
				}
				return ""
			}
			t0 := time.Now()
			code("x = 1\nimport math\ndef double(n):\n    return 2 * n")
			t.Logf("%s: the first cell of a new context took %s", iso, time.Since(t0))
			if got := code("double(x + 1) + math.floor(0.5)"); last(got, "text/plain") != "4" {
				t.Fatalf("state: %v", got)
			}
			fig := code("import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=50)\nplt.plot([1, 3, 2])")
			b, err := base64.StdEncoding.DecodeString(last(fig, "image/png"))
			if err != nil {
				t.Fatalf("figure: %v: %v", err, fig)
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(b))
			if err != nil || cfg.Width != 200 || cfg.Height != 150 {
				t.Fatalf("the PNG: %+v %v", cfg, err)
			}
			files := fig["results"].([]any)[len(fig["results"].([]any))-1].(map[string]any)["files"].(map[string]any)
			if r := s.call("GET", "/v1/files/"+files["image/png"].(string)+"/content?graph=main", "", nil, ""); r.status != 200 || !bytes.Equal(r.body, b) {
				t.Fatalf("the figure's File: %d, %d bytes", r.status, len(r.body))
			}
			if html := last(code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"), "text/html"); !strings.Contains(html, "<td>x</td>") {
				t.Fatalf("DataFrame: %q", html)
			}
			e := code("print('before')\n1/0")
			if er, _ := e["error"].(map[string]any); e["status"] != "failed" || er["name"] != "ZeroDivisionError" || e["stdout"] != "before\n" ||
				!strings.Contains(fmt.Sprint(er["traceback"]), "1/0") {
				t.Fatalf("exception: %v", e)
			}
			t0 = time.Now()
			if l := cell(`{"code": "while True:\n    pass", "timeout_ms": 2000}`); l["status"] != "timed_out" || time.Since(t0) > 15*time.Second {
				t.Fatalf("loop: %v after %s", l, time.Since(t0))
			}
			if got := code("x"); last(got, "text/plain") != "1" {
				t.Fatalf("after the interrupt: %v", got)
			}
			// Hostile cells: a flood of output is kept as head and tail; a memory bomb kills the
			// kernel, not the sandbox, and the context answers the next cell.
			t0 = time.Now()
			if f := code("for i in range(20000):\n    print('x' * 99)"); f["status"] != "succeeded" || len(f["stdout"].(string)) > 1<<20 {
				t.Fatalf("flood: %v, %d bytes of stdout", f["status"], len(f["stdout"].(string)))
			}
			if m := cell(`{"code": "x = bytearray(2 << 30)\nx[::4096] = b'y' * len(x[::4096])", "timeout_ms": 60000}`); m["status"] == "succeeded" {
				t.Fatalf("memory bomb: %v", m)
			} else {
				t.Logf("%s: the memory bomb's cell ended %v: %v (flood and bomb: %s)", iso, m["status"], m["error"], time.Since(t0))
			}
			if got := code("'alive'"); last(got, "text/plain") != "'alive'" {
				t.Fatalf("after the memory bomb: %v", got)
			}
			code("x = 1")

			// Node: top-level await, the last expression, an error with its stack.
			if got := cell(`{"language": "node", "code": "const v = await Promise.resolve(6)\nv * 7"}`); last(got, "text/plain") != "42" {
				t.Fatalf("node: %v", got)
			}
			if got := cell(`{"language": "node", "code": "null.x"}`); got["error"].(map[string]any)["name"] != "TypeError" || !strings.Contains(fmt.Sprint(got["error"].(map[string]any)["traceback"]), "TypeError") {
				t.Fatalf("node error: %v", got)
			}

			// Shell: one bash keeps cwd, exports and functions; a non-zero exit is ExitStatus; a
			// timeout interrupts the cell and the shell (bash is the same context) lives on.
			cell(`{"language": "shell", "code": "cd /tmp && export A=7 && f() { echo fn $1; }"}`)
			if got := cell(`{"language": "shell", "code": "pwd; echo $A; f x; echo e >&2"}`); got["stdout"] != "/tmp\n7\nfn x\n" || got["stderr"] != "e\n" || got["status"] != "succeeded" {
				t.Fatalf("shell state: %v", got)
			}
			if got := cell(`{"language": "shell", "code": "echo no; exit_3() { return 3; }; exit_3"}`); got["status"] != "failed" || got["error"].(map[string]any)["name"] != "ExitStatus" || got["stdout"] != "no\n" {
				t.Fatalf("shell exit status: %v", got)
			}
			t0 = time.Now()
			if got := cell(`{"language": "shell", "code": "echo a; sleep 60; echo b", "timeout_ms": 1000}`); got["status"] != "timed_out" || got["stdout"] != "a\n" || time.Since(t0) > 15*time.Second {
				t.Fatalf("shell timeout: %v after %s", got, time.Since(t0))
			}
			if got := cell(`{"language": "bash", "code": "echo $A $(pwd)"}`); got["stdout"] != "7 /tmp\n" {
				t.Fatalf("shell after its timeout: %v", got)
			}

			// Latency of a trivial cell in a warm context, beside a python3 -c process.
			var cells, procs []time.Duration
			for i := 0; i < 7; i++ {
				t0 := time.Now()
				code("1")
				cells = append(cells, time.Since(t0))
				t0 = time.Now()
				r := s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprintf("p-%s-%d", iso, i)},
					`{"argv": ["python3", "-c", "pass"], "wait_ms": 30000}`)
				procs = append(procs, time.Since(t0))
				if r.status != 200 {
					t.Fatalf("python3 -c: %d %s", r.status, r.body)
				}
			}
			t.Logf("%s: a warm cell %s, a python3 -c command %s (medians of 7, through the API)", iso, median(cells), median(procs))

			// A stop ends the interpreter; the next cell starts a fresh one and says so.
			if r := s.call("POST", "/v1/sandboxes/"+sb+"/stop?graph=main", "", nil, ""); r.status != 200 {
				t.Fatalf("stop: %d %s", r.status, r.body)
			}
			if r := s.call("POST", "/v1/sandboxes/"+sb+"/resume?graph=main", "", nil, ""); r.status != 200 {
				t.Fatalf("resume: %d %s", r.status, r.body)
			}
			if got := code("x"); got["context_restarted"] != true || got["error"].(map[string]any)["name"] != "NameError" {
				t.Fatalf("after stop and resume: %v", got)
			}

			// A pause freezes the interpreters: the next cell sees the same variables.
			code("y = 2")
			if r := s.call("POST", "/v1/sandboxes/"+sb+"/pause?graph=main", "", nil, ""); r.status != 200 {
				t.Fatalf("pause: %d %s", r.status, r.body)
			}
			if r := s.call("POST", "/v1/sandboxes/"+sb+"/resume?graph=main", "", nil, ""); r.status != 200 {
				t.Fatalf("resume after pause: %d %s", r.status, r.body)
			}
			got := code("y * 10")
			if got["context_restarted"] == true || last(got, "text/plain") != "20" {
				t.Fatalf("after pause and resume: %v", got)
			}
			// A cell is metered like a command.
			if r := s.call("GET", "/v1/commands/"+got["command"].(string)+"?graph=main", "", nil, ""); r.status != 200 ||
				r.obj(t)["usage"] == nil || r.obj(t)["usage"].(map[string]any)["gib_ms"] == nil {
				t.Fatalf("the cell's record: %d %s", r.status, r.body)
			}
			if iso == "gvisor" {
				// A snapshot carries the interpreter on; a fork gets a copy of the context with
				// its variables, its own from then on.
				if r := s.call("POST", "/v1/sandboxes/"+sb+"/snapshot?graph=main", "", nil, "{}"); r.status != 201 {
					t.Fatalf("snapshot: %d %s", r.status, r.body)
				}
				if got := code("y = y + 1\ny"); got["context_restarted"] == true || last(got, "text/plain") != "3" {
					t.Fatalf("after a snapshot: %v", got)
				}
				r := s.call("POST", "/v1/sandboxes/"+sb+"/fork?graph=main", "", nil, "{}")
				if r.status != 201 {
					t.Fatalf("fork: %d %s", r.status, r.body)
				}
				fork := r.obj(t)["id"].(string)
				defer s.call("DELETE", "/v1/sandboxes/"+fork+"?graph=main", "", nil, "")
				r = s.call("GET", "/v1/sandboxes/"+fork+"/contexts?graph=main", "", nil, "")
				if r.status != 200 || !strings.Contains(string(r.body), `"forked_from"`) {
					t.Fatalf("the fork's contexts: %d %s", r.status, r.body)
				}
				fcell := func(c string) map[string]any {
					n++
					b, _ := json.Marshal(map[string]any{"code": c})
					r := s.call("POST", "/v1/sandboxes/"+fork+"/code?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprintf("cell-%s-%d", iso, n)}, string(b))
					if r.status != 200 {
						t.Fatalf("a cell in the fork: %d %s", r.status, r.body)
					}
					return r.obj(t)
				}
				if got := fcell("y = y * 100\ny"); got["context_restarted"] == true || last(got, "text/plain") != "300" {
					t.Fatalf("in the fork: %v", got)
				}
				if got := code("y"); last(got, "text/plain") != "3" {
					t.Fatalf("the source after the fork's cell: %v", got)
				}
			}

			// A plain script in one call (seed 003): a non-zero exit is an answer.
			r = s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "script-" + iso},
				fmt.Sprintf(`{"run": {"script": "import math, sys\nprint(math.factorial(20))\nsys.exit(3)", "language": "python"}, "isolation": %q}`, iso))
			if m := r.obj(t); r.status != 200 || m["exit_code"] != 3.0 || m["ok"] != false ||
				!strings.Contains(fmt.Sprint(m["stdout"]), "2432902008176640000") || m["duration_ms"] == nil {
				t.Fatalf("script: %d %s", r.status, r.body)
			}
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(100 * time.Microsecond)
}

// TestCodeGoSDK: seed 003's recipe (a factorial snippet in one call) and a context's cells
// through the Go SDK.
func TestCodeGoSDK(t *testing.T) {
	s := startServer(t, "--pool-min", "0", "--pool-max", "1")
	c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	run, err := c.Sandboxes.RunCode(bg, lbb.RunCodeParams{Language: "python", Code: "import math\nprint(math.factorial(20))", TimeoutMs: 30000})
	if err != nil || run.ExitCode == nil || *run.ExitCode != 0 || run.Stdout.String() != "2432902008176640000\n" || run.DurationMs <= 0 {
		t.Fatalf("runCode: %+v %v", run, err)
	}
	again, err := c.Sandboxes.RunCode(bg, lbb.RunCodeParams{Code: "import math\nprint(math.factorial(20))", TimeoutMs: 30000, IdempotencyKey: run.IdempotencyKey})
	if err != nil || !again.Replayed || again.Command != run.Command {
		t.Fatalf("a retry: %+v %v", again, err)
	}
	bad, err := c.Sandboxes.RunCode(bg, lbb.RunCodeParams{Language: "shell", Code: "echo no >&2; exit 2"})
	if err != nil || *bad.ExitCode != 2 || bad.Stderr.String() != "no\n" {
		t.Fatalf("exit 2: %+v %v", bad, err)
	}
	cc, err := c.Code.CreateContext(bg, sb.ID, lbb.ContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Code.Run(bg, sb.ID, lbb.CellParams{Context: cc.ID, Code: "x = 41"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Code.Run(bg, sb.ID, lbb.CellParams{Context: cc.ID, Code: "x + 1"})
	if err != nil || r.Text() != "42" || r.Error != nil {
		t.Fatalf("x + 1: %+v %v", r, err)
	}
	if _, err := c.Code.RestartContext(bg, sb.ID, cc.ID); err != nil {
		t.Fatal(err)
	}
	r, err = c.Code.Run(bg, sb.ID, lbb.CellParams{Context: cc.ID, Code: "x"})
	if err != nil || r.Error == nil || r.Error.Name != "NameError" {
		t.Fatalf("after restart: %+v %v", r, err)
	}
	// The CLI: a cell's text result on stdout, an image saved as a file.
	dir := t.TempDir()
	if out, errOut, err := s.cli("code", sb.ID, "-c", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n6 * 7", "--images", dir); err != nil || out != "42\n" || !strings.Contains(errOut, ".png") {
		t.Fatalf("lbb code: %q %q %v", out, errOut, err)
	}
	if pngs, _ := filepath.Glob(filepath.Join(dir, "*.png")); len(pngs) != 1 {
		t.Fatalf("lbb code saved %v", pngs)
	}
	if _, _, err := s.cli("code", sb.ID, "-c", "1/0"); err == nil {
		t.Fatal("lbb code of a cell that raises exited 0")
	}
	// A code-interpreter sandbox starts with its Python context: the first cell finds it
	// ready (or being started) rather than starting it.
	ci := newSandbox(t, c, lbb.CreateParams{Base: "lbb/code-interpreter", ExpiresInSeconds: 600})
	defer c.Sandboxes.Delete(bg, ci.ID)
	time.Sleep(3 * time.Second) // as a person would take to type the first cell
	t0 := time.Now()
	first, err := c.Code.Run(bg, ci.ID, lbb.CellParams{Code: "1 + 1"})
	if err != nil || first.Text() != "2" {
		t.Fatalf("first cell of a code-interpreter sandbox: %+v %v", first, err)
	}
	t.Logf("the first cell of a code-interpreter sandbox (3 s after its create) took %s", time.Since(t0))
	if cl, err := c.Code.Contexts(bg, ci.ID); err != nil || len(cl.Data) != 1 || cl.Data[0].ID != first.Context {
		t.Fatalf("code-interpreter contexts: %+v %v", cl, err)
	}

	l, err := c.Code.Contexts(bg, sb.ID)
	if err != nil || len(l.Data) != 1 || l.Data[0].Restarts != 1 {
		t.Fatalf("contexts: %+v %v", l, err)
	}
}
