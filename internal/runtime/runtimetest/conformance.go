package runtimetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

func (e *env) conformance(t *testing.T) {
	t.Run("true", func(t *testing.T) {
		b := e.shared(t)
		r := b.exec(agent.ExecRequest{Argv: []string{"/bin/true"}}, nil)
		if r.exit.ExitCode != 0 || r.exit.StartError != "" || r.exit.Signal != "" {
			t.Fatalf("/bin/true: %v", r)
		}
		if b.sb.ID() != b.id {
			t.Errorf("ID() = %q, want %q", b.sb.ID(), b.id)
		}
		select {
		case <-b.sb.Done():
			t.Error("Done is closed while the sandbox runs")
		default:
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		b := e.shared(t)
		if r := b.sh("exit 3"); r.exit.ExitCode != 3 {
			t.Errorf("exit 3: %v", r)
		}
		if r := b.sh("kill -KILL $$"); r.exit.Signal != "SIGKILL" || r.exit.ExitCode != 128+9 {
			t.Errorf("killed: %v", r)
		}
		if r := b.exec(agent.ExecRequest{Argv: []string{"/no/such/program"}}, nil); r.exit.StartError == "" {
			t.Errorf("missing program: %v", r)
		}
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		b := e.shared(t)
		r := b.sh("echo out; echo err >&2; printf 'no newline'")
		if r.stdout != "out\nno newline" || r.stderr != "err\n" {
			t.Errorf("%v", r)
		}
	})

	t.Run("env and cwd", func(t *testing.T) {
		b := e.shared(t)
		r := b.exec(agent.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $FOO; pwd"}, Env: map[string]string{"FOO": "bar baz"}}, nil)
		if r.stdout != "bar baz\n/workspace\n" {
			t.Errorf("env and default cwd: %v", r)
		}
		b.ok("mkdir -p /workspace/sub/dir")
		r = b.exec(agent.ExecRequest{Argv: []string{"pwd"}, Cwd: "sub/dir"}, nil)
		if r.stdout != "/workspace/sub/dir\n" {
			t.Errorf("relative cwd: %v", r)
		}
		r = b.exec(agent.ExecRequest{Argv: []string{"pwd"}, Cwd: "/workspace/sub"}, nil)
		if r.stdout != "/workspace/sub\n" {
			t.Errorf("absolute cwd: %v", r)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		b := e.shared(t)
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		r := b.exec(agent.ExecRequest{Argv: []string{"sh", "-c", "wc -c; echo done"}}, strings.NewReader(big))
		if strings.TrimSpace(r.stdout) != "1048576\ndone" {
			t.Errorf("stdin: %v", r)
		}
		r = b.exec(agent.ExecRequest{Argv: []string{"cat"}}, nil)
		if r.exit.ExitCode != 0 || r.stdout != "" {
			t.Errorf("no stdin is /dev/null: %v", r)
		}
	})

	t.Run("files", func(t *testing.T) {
		b := e.shared(t)
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i * 7)
		}
		if err := b.c.WriteFile(b.ctx, "dir/blob.bin", 0o600, strings.NewReader(string(data))); err != nil {
			t.Fatal(err)
		}
		got, err := b.readFile("/workspace/dir/blob.bin")
		if err != nil || got != string(data) {
			t.Fatalf("read back: %d bytes, %v", len(got), err)
		}
		if out := b.ok("sha256sum /workspace/dir/blob.bin | cut -c1-16; stat -c %a /workspace/dir/blob.bin"); len(strings.Fields(out)) != 2 || strings.Fields(out)[1] != "600" {
			t.Errorf("the process sees: %q", out)
		}
		if err := b.c.Mkdir(b.ctx, "a/b/c"); err != nil {
			t.Fatal(err)
		}
		ents, err := b.c.List(b.ctx, "", true)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, en := range ents {
			paths = append(paths, en.Path+":"+en.Type)
		}
		for _, want := range []string{"dir:dir", "dir/blob.bin:file", "a/b/c:dir"} {
			if !slices.Contains(paths, want) {
				t.Errorf("listing %v lacks %s", paths, want)
			}
		}
		if err := b.c.Remove(b.ctx, "dir", true); err != nil {
			t.Fatal(err)
		}
		if _, err := b.readFile("dir/blob.bin"); !isCode(err, agent.CodeNotFound) {
			t.Errorf("after remove: %v", err)
		}
	})

	t.Run("stop keeps the workspace", func(t *testing.T) {
		b := e.boot(t, runtime.Limits{})
		b.ok("echo persisted > /workspace/keep; echo gone > /tmp/lost")
		ctx := timeout(t, time.Minute)
		if err := e.d.Stop(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.sb.Done():
		case <-time.After(10 * time.Second):
			t.Error("Done not closed after Stop")
		}
		if b.pid > 0 && syscall.Kill(b.pid, 0) == nil {
			t.Errorf("init %d survives Stop", b.pid)
		}
		if err := e.d.Stop(ctx, b.id); err != nil {
			t.Errorf("second stop: %v", err)
		}
		b2 := e.start(t, b.id)
		if out := b2.ok("cat /workspace/keep; test -e /tmp/lost && echo tmp-survived || true"); out != "persisted\n" {
			t.Errorf("after restart: %q", out)
		}
	})

	t.Run("destroy", func(t *testing.T) {
		b := e.boot(t, runtime.Limits{})
		b.ok("sleep 1000 >/dev/null 2>&1 & echo x > /workspace/f")
		ctx := timeout(t, time.Minute)
		if err := e.d.Destroy(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		for _, l := range e.leftovers(ctx, b.id, b.pid) {
			t.Error(l)
		}
		if err := e.d.Destroy(ctx, b.id); err != nil {
			t.Errorf("second destroy: %v", err)
		}
		if _, err := e.d.Start(ctx, b.id); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("start after destroy: %v, want ErrNotFound", err)
		}
		if err := e.d.Stop(ctx, b.id); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("stop after destroy: %v, want ErrNotFound", err)
		}
	})

	t.Run("destroy never started", func(t *testing.T) {
		id := e.create(t, runtime.Limits{})
		ctx := timeout(t, time.Minute)
		ids, err := e.d.List(ctx)
		if err != nil || !slices.Contains(ids, id) {
			t.Errorf("List = %v, %v: lacks %s", ids, err, id)
		}
		if err := e.d.Stop(ctx, id); err != nil {
			t.Errorf("stop of a never started sandbox: %v", err)
		}
		if err := e.d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		for _, l := range e.leftovers(ctx, id, 0) {
			t.Error(l)
		}
	})

	t.Run("create twice", func(t *testing.T) {
		id := e.create(t, runtime.Limits{})
		ctx := timeout(t, time.Minute)
		if err := e.d.Create(ctx, runtime.Spec{ID: id, Image: e.opts.Image}); err == nil {
			t.Error("a second Create of the same id succeeded")
		}
		if _, err := e.d.Start(ctx, "sbx_never_created"); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("start of an unknown id: %v, want ErrNotFound", err)
		}
	})

	t.Run("destroy with a hung agent", func(t *testing.T) {
		b := e.boot(t, runtime.Limits{})
		if b.pid == 0 {
			t.Skip("the driver does not tell its init's pid (InitPID)")
		}
		b.ok("sleep 1000 >/dev/null 2>&1 &")
		if err := syscall.Kill(b.pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitState(t, b.pid, 'T')
		pctx, pcancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
		err := b.c.Ping(pctx)
		pcancel()
		if err == nil {
			t.Error("a stopped agent answered a ping")
		}
		ctx := timeout(t, 30*time.Second)
		start := time.Now()
		if err := e.d.Destroy(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		t.Logf("destroy of a hung sandbox took %v", time.Since(start))
		for _, l := range e.leftovers(ctx, b.id, b.pid) {
			t.Error(l)
		}
	})

	t.Run("stats", func(t *testing.T) {
		b := e.shared(t)
		b.ok("head -c 20000000 /dev/urandom | sha256sum >/dev/null")
		st, err := b.sb.Stats(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.CPUNanos == 0 || st.MemoryBytes == 0 || st.Pids == 0 {
			t.Errorf("stats %+v", st)
		}
		// What a run meters (runtime.UsageOf): the same accounting, the process count aside.
		u, err := runtime.UsageOf(b.ctx, b.sb)
		if err != nil {
			t.Fatal(err)
		}
		if u.CPUNanos < st.CPUNanos || u.MemoryBytes == 0 || u.OOMKills != st.OOMKills {
			t.Errorf("usage %+v after stats %+v", u, st)
		}
	})

	t.Run("freezer", func(t *testing.T) {
		f, ok := e.d.(runtime.Freezer)
		if !ok {
			t.Skip("the driver has no Freezer")
		}
		b := e.shared(t)
		if err := f.Freeze(b.ctx, b.id); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
		err := b.c.Ping(pctx)
		cancel()
		if err == nil {
			t.Error("a frozen agent answered")
		}
		if err := f.Thaw(b.ctx, b.id); err != nil {
			t.Fatal(err)
		}
		if err := b.ping(); err != nil {
			t.Fatalf("after thaw: %v", err)
		}
		b.ok("true")
	})

	t.Run("start after the agent died", func(t *testing.T) {
		b := e.boot(t, runtime.Limits{})
		if b.pid == 0 {
			t.Skip("the driver does not tell its init's pid (InitPID)")
		}
		b.ok("echo kept > /workspace/f")
		syscall.Kill(b.pid, syscall.SIGKILL)
		select {
		case <-b.sb.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after the init died")
		}
		b2 := e.start(t, b.id)
		if out := b2.ok("cat /workspace/f"); out != "kept\n" {
			t.Errorf("after restart: %q", out)
		}
	})

	t.Run("reap after a restart", func(t *testing.T) {
		// A new driver (a restarted server) finds the sandbox by List and destroys it, though
		// it did not start it.
		b := e.boot(t, runtime.Limits{})
		b.ok("sleep 1000 >/dev/null 2>&1 &")
		d2 := e.newDriver(t)
		ctx := timeout(t, time.Minute)
		ids, err := d2.List(ctx)
		if err != nil || !slices.Contains(ids, b.id) {
			t.Fatalf("List = %v, %v: lacks %s", ids, err, b.id)
		}
		if err := d2.Destroy(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.sb.Done():
		case <-time.After(10 * time.Second):
			t.Error("the sandbox's init survived a destroy by another driver")
		}
		for _, l := range e.leftovers(ctx, b.id, b.pid) {
			t.Error(l)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		for i := range 6 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				b := e.boot(t, runtime.Limits{})
				if out := b.ok(fmt.Sprintf("echo %d > /workspace/n && cat /workspace/n", i)); out != fmt.Sprintf("%d\n", i) {
					t.Errorf("sandbox %d says %q", i, out)
				}
			})
		}
	})

	t.Run("machine id", e.machineID)

	t.Run("run", e.runs)

	t.Run("start cancelled", e.startCancelled)
}

// startCancelled: a Start whose context ends while the sandbox boots (as a server's shutdown
// ends a warm pool's builds) answers soon, and what it began is gone once the sandbox is
// stopped. The context ends at several points of the boot, from before the first process
// to about when the agent answers.
func (e *env) startCancelled(t *testing.T) {
	for _, after := range []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond,
		80 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond} {
		id := e.create(t, runtime.Limits{})
		ctx, cancel := context.WithTimeout(context.Background(), after)
		t0 := time.Now()
		sb, err := e.d.Start(ctx, id)
		took := time.Since(t0)
		cancel()
		t.Logf("cancelled after %v: answered in %v (%v)", after, took.Round(time.Millisecond), err)
		// Far longer than any boot, far shorter than a wait that ignores the context.
		if took > after+10*time.Second {
			t.Errorf("a Start cancelled after %v answered only after %v", after, took)
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.d.Stop(sctx, id); err != nil {
			t.Errorf("stop after a cancelled start: %v", err)
		}
		scancel()
		if err == nil {
			select {
			case <-sb.Done():
			case <-time.After(10 * time.Second):
				t.Errorf("the sandbox started before the cancel is not done after Stop")
			}
		}
		if e.opts.Leftovers != nil {
			for _, l := range e.opts.Leftovers(id) {
				// A stopped sandbox keeps its state directory and its host ids.
				if !strings.HasPrefix(l, "state directory") && !strings.HasPrefix(l, "host ids") {
					t.Errorf("stopped after a start cancelled after %v: %s", after, l)
				}
			}
		}
	}
}

// runs checks the run(input, config) harnesses of the three bases.
func (e *env) runs(t *testing.T) {
	b := e.shared(t)
	for _, tc := range []struct {
		name, lang, code string
		input, config    string
		want             string // JSON; empty: the run must fail
		stderr           string // must appear in stderr
	}{
		{name: "python numpy pandas", lang: agent.LangPython, code: `
import numpy as np, pandas as pd
def run(input, config):
    return {"sum": np.int64(sum(input)), "arr": np.arange(3), "mean": np.float64(1.5),
            "df": pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}), "cfg": config}
`, input: `[1,2,3]`, config: `{"k":"v"}`,
			want: `{"sum":6,"arr":[0,1,2],"mean":1.5,"df":[{"a":1,"b":"x"},{"a":2,"b":"y"}],"cfg":{"k":"v"}}`},
		{name: "python async", lang: agent.LangPython, code: `
import asyncio
async def run(input, config):
    await asyncio.sleep(0.01)
    return input * 2
`, input: `21`, want: `42`},
		{name: "python raises", lang: agent.LangPython, code: "def run(input, config):\n    return 1 / 0\n",
			input: `1`, stderr: "ZeroDivisionError"},
		{name: "node sync", lang: agent.LangNode, code: `function run(input, config) { return input.map(x => x * 2) }`,
			input: `[1,2]`, want: `[2,4]`},
		{name: "node async exported", lang: agent.LangNode, code: `module.exports.run = async (input, config) => { await new Promise(r => setTimeout(r, 10)); return {got: input, c: config.c} }`,
			input: `"hi"`, config: `{"c":1}`, want: `{"got":"hi","c":1}`},
		{name: "node esm", lang: agent.LangNode, code: `export default async function run(input) { return input + 1 }`,
			input: `41`, want: `42`},
		{name: "shell", lang: agent.LangShell, code: `jq '. + 1' <<<"$LBB_INPUT" > "$LBB_RESULT"`,
			input: `41`, want: `42`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := agent.RunRequest{ID: "run_" + strings.ReplaceAll(tc.name, " ", "_"), Language: tc.lang, Code: tc.code}
			if tc.input != "" {
				req.Input = json.RawMessage(tc.input)
			}
			if tc.config != "" {
				req.Config = json.RawMessage(tc.config)
			}
			p, err := b.c.Run(b.ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			ex, err := p.Wait(&stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if ex.OK {
					t.Errorf("run succeeded: %s", ex.Result)
				}
			} else if !ex.OK || !jsonEqual(ex.Result, tc.want) {
				t.Errorf("run: ok=%v result=%s error=%q, want %s\nstderr: %s", ex.OK, ex.Result, ex.Error, tc.want, stderr.String())
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q: %s", tc.stderr, stderr.String())
			}
		})
	}
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// waitState waits until process pid is in state (a letter of /proc/pid/stat).
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c: %s", pid, state, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
