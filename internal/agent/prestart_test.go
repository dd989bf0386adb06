package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// isWarm is python code whose run says whether it runs in a pre-started interpreter (whose
// command line still holds the flag, though sys.argv does not).
const isWarmPy = "import sys\ndef run(input, config):\n    return {'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\\0'), 'argv': sys.argv}"

// prestartPython pre-starts a python interpreter that imports nothing.
func (ta *testAgent) prestartPython(t *testing.T) {
	t.Helper()
	ta.prestart(t, agent.PrestartRequest{Language: "python", Imports: []string{}})
}

func (ta *testAgent) prestart(t *testing.T, req agent.PrestartRequest) {
	t.Helper()
	if err := ta.c.Prestart(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
}

// runWarm runs req and answers whether it ran in a pre-started interpreter.
func (ta *testAgent) runWarm(t *testing.T, req agent.RunRequest) bool {
	t.Helper()
	_, _, ex := ta.run(t, req)
	return warmOf(t, ex)
}

func warmOf(t *testing.T, ex agent.Exit) bool {
	t.Helper()
	var r struct {
		Warm bool     `json:"warm"`
		Argv []string `json:"argv"`
	}
	if !ex.OK || json.Unmarshal(ex.Result, &r) != nil {
		t.Fatalf("run failed: %+v", ex)
	}
	if len(r.Argv) != 1 || r.Argv[0] != "-c" {
		t.Errorf("sys.argv %q, want [-c] as a spawned harness has", r.Argv)
	}
	return r.Warm
}

func TestPrestartPython(t *testing.T) {
	ta := startPython(t)
	// A module that is noisy at import: what it prints before the claim is not the run's.
	os.WriteFile(filepath.Join(ta.ws, "noisy.py"), []byte("import sys\nprint('NOISE-OUT')\nprint('NOISE-ERR', file=sys.stderr)\n"), 0o644)
	os.Mkdir(filepath.Join(ta.ws, "sub"), 0o755)
	ta.prestart(t, agent.PrestartRequest{Language: "python", Imports: []string{"noisy", "no_such_module_lbb", "json"}})
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "py"}); !agent.IsCode(err, agent.CodeExists) {
		t.Errorf("second prestart: %v, want %s", err, agent.CodeExists)
	}
	code := `import os, sys
def run(input, config):
    print('hello')
    print('oops', file=sys.stderr)
    return {'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\0'), 'argv': sys.argv,
            'env': os.environ.get('FOO'), 'cwd': os.getcwd(), 'noisy': 'noisy' in sys.modules}
`
	out, errOut, ex := ta.run(t, agent.RunRequest{ID: "warm1", Language: "python", Code: code, Input: json.RawMessage("1"),
		Env: map[string]string{"FOO": "bar"}, Cwd: "sub", TimeoutMs: 20000})
	if !warmOf(t, ex) {
		t.Errorf("the run did not use the pre-started interpreter: %s", ex.Result)
	}
	var r map[string]any
	json.Unmarshal(ex.Result, &r)
	if r["env"] != "bar" || r["cwd"] != filepath.Join(ta.ws, "sub") || r["noisy"] != true {
		t.Errorf("result %s: want env bar, cwd %s/sub, noisy imported", ex.Result, ta.ws)
	}
	if out != "hello\n" || errOut != "oops\n" {
		t.Errorf("stdout %q stderr %q: output from before the claim leaked, or the run's was lost", out, errOut)
	}
	// One run per interpreter: the next one is spawned.
	if ta.runWarm(t, agent.RunRequest{Language: "python", Code: isWarmPy}) {
		t.Error("a second run used a pre-started interpreter")
	}
}

func TestPrestartPythonErrors(t *testing.T) {
	ta := startPython(t)
	ta.prestartPython(t)
	_, errOut, ex := ta.run(t, agent.RunRequest{Language: "python", Code: "def helper():\n    return 1 / 0\n\ndef run(input, config):\n    return helper()"})
	if ex.OK || !strings.Contains(ex.Error, "ZeroDivisionError") || !strings.Contains(errOut, "line 2, in helper") || strings.Contains(errOut, "<string>") {
		t.Errorf("exit %+v\nstderr %s", ex, errOut)
	}
	ta.prestartPython(t)
	start := time.Now()
	_, _, ex = ta.run(t, agent.RunRequest{Language: "python", Code: "import time\ndef run(i, c):\n    time.sleep(100)", TimeoutMs: 300})
	if ex.OK || !ex.TimedOut || time.Since(start) > 5*time.Second {
		t.Errorf("timeout in a pre-started interpreter: %+v after %v", ex, time.Since(start))
	}
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "shell"}); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("prestart shell: %v", err)
	}
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "python", Imports: []string{"os; rm -rf /"}}); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("bad import name: %v", err)
	}
}

func TestPrestartFallsBack(t *testing.T) {
	ta := startPython(t)
	// A variable read at interpreter start needs a fresh interpreter; the waiting one goes.
	ta.prestartPython(t)
	pid := waitingInterpreter(t, ta)
	if ta.runWarm(t, agent.RunRequest{Language: "python", Code: isWarmPy, Env: map[string]string{"PYTHONHASHSEED": "0"}}) {
		t.Error("a run with PYTHONHASHSEED used the pre-started interpreter")
	}
	waitGone(t, pid)
	// A run of another language: spawned, and the waiting interpreter goes.
	ta.prestartPython(t)
	pid = waitingInterpreter(t, ta)
	ta.wantResult(t, "shell run", agent.RunRequest{Language: "shell", Code: "echo 1 > $LBB_RESULT"}, "1")
	waitGone(t, pid)
	if ta.runWarm(t, agent.RunRequest{Language: "python", Code: isWarmPy}) {
		t.Error("a pre-started interpreter survived a run of another language")
	}
}

func TestPrestartDiesWithChannel(t *testing.T) {
	ta := startPython(t)
	ta.prestartPython(t)
	pid := waitingInterpreter(t, ta)
	ta.c.Close()
	waitGone(t, pid)
}

func TestPrestartNode(t *testing.T) {
	hasProgram(t, "node")
	ta := startAgent(t)
	os.Mkdir(filepath.Join(ta.ws, "sub"), 0o755)
	ta.prestart(t, agent.PrestartRequest{Language: "node", Imports: []string{"node:path", "no-such-module-lbb"}})
	code := "const fs = require('fs');\nfunction run(input) { console.log('hi'); return {warm: fs.readFileSync('/proc/self/cmdline', 'latin1').split('\\0').includes('--lbb-prestart'), argv: process.argv.length, env: process.env.FOO, cwd: process.cwd(), x: input * 2}; }"
	out, _, ex := ta.run(t, agent.RunRequest{Language: "node", Code: code, Input: json.RawMessage("21"), Env: map[string]string{"FOO": "bar"}, Cwd: "sub"})
	var r map[string]any
	if !ex.OK || json.Unmarshal(ex.Result, &r) != nil {
		t.Fatalf("%+v", ex)
	}
	if r["warm"] != true || r["argv"] != float64(1) || r["env"] != "bar" || r["cwd"] != filepath.Join(ta.ws, "sub") || r["x"] != float64(42) || out != "hi\n" {
		t.Errorf("result %s stdout %q", ex.Result, out)
	}
	// ES modules work from a pre-started interpreter too (the temporary .mjs is in the cwd).
	ta.prestart(t, agent.PrestartRequest{Language: "node"})
	ta.wantResult(t, "esm", agent.RunRequest{Language: "node", Code: "import { join } from 'node:path';\nexport function run(input) { return join('x', input); }", Input: json.RawMessage(`"y"`)}, `"x/y"`)
}

// waitingInterpreter finds the pid of the agent's one child (the waiting interpreter).
func waitingInterpreter(t *testing.T, ta *testAgent) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(ta.cmd.Process.Pid) + "/task/" + strconv.Itoa(ta.cmd.Process.Pid) + "/children")
	kids := strings.Fields(string(b))
	if err != nil || len(kids) == 0 {
		// Children of other agent threads are not listed there; search /proc.
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			s := string(st)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(f) > 1 && f[1] == strconv.Itoa(ta.cmd.Process.Pid) {
				kids = append(kids, e.Name())
			}
		}
	}
	if len(kids) != 1 {
		t.Fatalf("the agent has children %v, want the one interpreter", kids)
	}
	pid, _ := strconv.Atoi(kids[0])
	return pid
}

// BenchmarkRunPythonWarm is BenchmarkRunPython from a pre-started interpreter (the prestart
// itself is not timed).
func BenchmarkRunPythonWarm(b *testing.B) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("no python3")
	}
	ta := startAgent(b)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		if err := ta.c.Prestart(ctx, agent.PrestartRequest{Language: "python", Imports: []string{}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ta.runSum(b)
	}
}

// The harness exits without tearing its modules down; what exit does for the run still
// happens, spawned or pre-started: threads finish, atexit handlers run, files left open are
// flushed.
func TestRunPythonExit(t *testing.T) {
	ta := startPython(t)
	code := `import atexit, threading, time
LOG = open('left-open.txt', 'w')
LOG.write('flushed')
class Keep:
    f = open('in-a-class.txt', 'w')
Keep.f.write('flushed too')
def late():
    time.sleep(0.2)
    open('thread.txt', 'w').write('done')
def run(input, config):
    atexit.register(lambda: print('atexit ran'))
    threading.Thread(target=late).start()
    return 1
`
	for _, warm := range []bool{false, true} {
		for _, f := range []string{"left-open.txt", "in-a-class.txt", "thread.txt"} {
			os.Remove(filepath.Join(ta.ws, f))
		}
		if warm {
			ta.prestartPython(t)
		}
		out, errOut, ex := ta.run(t, agent.RunRequest{Language: "python", Code: code})
		if !ex.OK || out != "atexit ran\n" || ex.ExitCode != 0 {
			t.Errorf("warm %v: %+v stdout %q stderr %q", warm, ex, out, errOut)
		}
		for f, want := range map[string]string{"left-open.txt": "flushed", "in-a-class.txt": "flushed too", "thread.txt": "done"} {
			if b, _ := os.ReadFile(filepath.Join(ta.ws, f)); string(b) != want {
				t.Errorf("warm %v: %s holds %q, want %q", warm, f, b, want)
			}
		}
	}
}

// A harness reports its exit code in its status line, and the run ends when it has closed
// its outputs: the code must be the one a waited-for process would have had.
func TestRunPythonExitCodes(t *testing.T) {
	ta := startPython(t)
	cases := []struct {
		code string
		exit int
		ok   bool
	}{
		{"def run(i, c):\n    return 1", 0, true},
		{"import sys\ndef run(i, c):\n    sys.exit(4)", 4, false},
		{"import sys\ndef run(i, c):\n    sys.exit(260)", 4, false},
		{"def run(i, c):\n    raise ValueError('x')", 1, false},
		// A background child keeps stdout open: the run ends when the harness has exited.
		{"import subprocess\ndef run(i, c):\n    subprocess.Popen(['sleep', '0.3'])\n    return 2", 0, true},
	}
	for _, warm := range []bool{false, true} {
		for _, c := range cases {
			if warm {
				ta.prestartPython(t)
			}
			_, _, ex := ta.run(t, agent.RunRequest{Language: "python", Code: c.code})
			if ex.ExitCode != c.exit || ex.OK != c.ok || ex.Signal != "" {
				t.Errorf("warm %v, %q: exit %+v, want code %d ok %v", warm, c.code, ex, c.exit, c.ok)
			}
		}
	}
}

// The node harness closes its outputs in its last 'exit' listener and exits: the user's own
// listeners still run and print, and the exit code is the harness's.
func TestRunNodeExit(t *testing.T) {
	hasProgram(t, "node")
	ta := startAgent(t)
	cases := []struct {
		code, stdout string
		exit         int
		ok           bool
	}{
		{"function run() { process.on('exit', () => console.log('bye')); return 1; }", "bye\n", 0, true},
		{"function run() { process.on('exit', () => console.log('bye')); throw new Error('x'); }", "bye\n", 1, false},
		{"function run() { require('child_process').spawn('sleep', ['0.3'], {stdio: 'inherit'}); return 2; }", "", 0, true},
	}
	for _, warm := range []bool{false, true} {
		for _, c := range cases {
			if warm {
				ta.prestart(t, agent.PrestartRequest{Language: "node"})
			}
			out, errOut, ex := ta.run(t, agent.RunRequest{Language: "node", Code: c.code})
			if ex.ExitCode != c.exit || ex.OK != c.ok || ex.Signal != "" || out != c.stdout {
				t.Errorf("warm %v, %q: exit %+v stdout %q stderr %q", warm, c.code, ex, out, errOut)
			}
		}
	}
}

// Whatever seeded random before the claim (here: a module imported at prestart that seeds
// it with a constant), the run draws from a generator seeded again at its claim.
func TestPrestartReseeds(t *testing.T) {
	ta := startPython(t)
	os.WriteFile(filepath.Join(ta.ws, "seeded.py"), []byte("import random\nrandom.seed(42)\n"), 0o644)
	ta.prestart(t, agent.PrestartRequest{Language: "python", Imports: []string{"seeded"}})
	// The seeding module is loaded, and random is reseeded.
	ta.wantResult(t, "seeded", agent.RunRequest{Language: "python", Code: "import random, sys\ndef run(i, c):\n    return ['seeded' in sys.modules, random.random() != random.Random(42).random()]"}, "[true,true]")
}

// Files written into the workspace after the prestart (a template's) import like any other.
func TestPrestartSeesNewFiles(t *testing.T) {
	ta := startPython(t)
	ta.prestart(t, agent.PrestartRequest{Language: "python", Imports: []string{"no_such_module_yet"}})
	if err := ta.c.WriteFile(ctxT(t), "helper.py", 0, strings.NewReader("VALUE = 7\n")); err != nil {
		t.Fatal(err)
	}
	ta.wantResult(t, "import of a new file", agent.RunRequest{Language: "python", Code: "import helper\ndef run(i, c):\n    return helper.VALUE"}, "7")
}
