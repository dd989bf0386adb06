//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Level 3 against a real `lbb serve` with the ns driver: long-lived sandboxes, commands,
// streams, files and Files of the graph.

var bg = context.Background()

func (s *server) client(t *testing.T, graph string) *lbb.Client {
	t.Helper()
	c, err := lbb.New(lbb.Options{BaseURL: s.url, APIKey: s.key, Graph: graph, MaxRetries: 3})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newSandbox(t *testing.T, c *lbb.Client, p lbb.CreateParams) *lbb.Sandbox {
	t.Helper()
	sb, err := c.Sandboxes.Create(bg, p)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Status != "running" || !strings.HasPrefix(sb.ID, "sbx_") {
		t.Fatalf("created: %+v", sb)
	}
	return sb
}

// sandbox answers a client of graph main and a sandbox of it made with p, deleted when t
// ends.
func (s *server) sandbox(t *testing.T, p lbb.CreateParams) (*lbb.Client, *lbb.Sandbox) {
	t.Helper()
	c := s.client(t, "main")
	sb := newSandbox(t, c, p)
	t.Cleanup(func() { c.Sandboxes.Delete(bg, sb.ID) })
	return c, sb
}

func write(t *testing.T, c *lbb.Client, sb, path, content string) {
	t.Helper()
	if _, err := c.Files.Write(bg, sb, path, strings.NewReader(content)); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

func read(t *testing.T, c *lbb.Client, sb, path string) string {
	t.Helper()
	return testkit.Content(t)(c.Files.Read(bg, sb, path))
}

func execOK(t *testing.T, c *lbb.Client, sb string, argv ...string) *lbb.Command {
	t.Helper()
	cmd, err := c.Sandboxes.Exec(bg, sb, lbb.ExecParams{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Status != lbb.StatusSucceeded {
		t.Fatalf("%q: %s (%s) stdout %q stderr %q", argv, cmd.Status, cmd.Error, cmd.Stdout.String(), cmd.Stderr.String())
	}
	return cmd
}

// TestLevel3Seed000 is seed 000's Level 3 sample over plain HTTP: write data.csv and
// upper.py, run count_lines in the sandbox, run upper.py, read the tail; then the create /
// stop / resume / delete sample.
func TestLevel3Seed000(t *testing.T) {
	s := startServer(t)
	created := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{}`)
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	sb := created.obj(t)["id"].(string)
	defer s.call("DELETE", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "")
	put := func(path, body string) {
		r := s.call("PUT", "/v1/sandboxes/"+sb+"/files/content?graph=main&path="+path, "", map[string]string{"Content-Type": "application/octet-stream"}, body)
		if r.status != 200 {
			t.Fatalf("put %s: %d %s", path, r.status, r.body)
		}
	}
	put("data.csv", "1,2\n3,4\n")
	put("upper.py", "\nprint(open(\"data.csv\").read().upper())\n")
	rows := s.call("POST", "/v1/sandboxes/"+sb+"/run?graph=main", "", map[string]string{"Idempotency-Key": "rows"},
		jsonBody(t, map[string]any{"code": "\ndef run(input, config):\n    return len(open(input[\"file\"]).read().splitlines())\n", "input": map[string]any{"file": "data.csv"}}))
	if rows.status != 200 || rows.obj(t)["result"] != 2.0 || rows.obj(t)["ok"] != true {
		t.Fatalf("count_lines: %d %s", rows.status, rows.body)
	}
	upper := s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "upper"},
		`{"argv": ["python", "upper.py"], "wait_ms": 30000}`)
	if upper.status != 200 {
		t.Fatalf("upper: %d %s", upper.status, upper.body)
	}
	out := map[string]any{"lines": rows.obj(t)["result"], "upper": upper.obj(t)["stdout"].(map[string]any)["tail"]}
	if out["lines"] != 2.0 || out["upper"] != "1,2\n3,4\n\n" {
		t.Fatalf("out = %v", out)
	}

	// sandboxes.create: the disk stays across stop and resume.
	c := s.client(t, "main")
	sb2 := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 600})
	write(t, c, sb2.ID, "data.csv", "1,2\n3,4\n")
	if st, err := c.Sandboxes.Stop(bg, sb2.ID); err != nil || st.Status != "stopped" {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if st, err := c.Sandboxes.Resume(bg, sb2.ID); err != nil || st.Status != "running" {
		t.Fatalf("resume: %+v %v", st, err)
	}
	if got := read(t, c, sb2.ID, "data.csv"); got != "1,2\n3,4\n" {
		t.Fatalf("after resume: %q", got)
	}
	if d, err := c.Sandboxes.Delete(bg, sb2.ID); err != nil || d.Status != "destroyed" || d.EndReason != "deleted" {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if left := sandboxTraces(sb2.ID); len(left) > 0 {
		t.Fatalf("left after delete: %v", left)
	}
}

// TestLevel3Seed003 is seed 003's recipe for untrusted code: one-shot, no network, small
// limits, a hard wall-clock timeout, and a lifetime ceiling as the backstop; the sandbox is
// destroyed at the end, also after an error.
func TestLevel3Seed003(t *testing.T) {
	s := startServer(t)
	c := s.client(t, "main")
	runUntrusted := func(code string, timeoutMs int64) (*lbb.Run, string) {
		var run *lbb.Run
		var id string
		err := c.Sandboxes.Scoped(bg, lbb.CreateParams{
			ExpiresInSeconds: 1800, // the ceiling, even if the delete below never came
			Limits:           &lbb.Limits{CPUs: 0.5, MemoryMiB: 512, DiskMiB: 2048},
		}, func(sb *lbb.Sandbox) error {
			id = sb.ID
			var err error
			run, err = c.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: code, TimeoutMs: timeoutMs})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return run, id
	}
	run, id := runUntrusted("import math\ndef run(input, config):\n    print(math.factorial(20))\n    return math.factorial(20)", 30000)
	if !run.OK || string(run.Result) != "2432902008176640000" || run.Stdout.Tail != "2432902008176640000\n" {
		t.Fatalf("factorial: %+v", run)
	}
	if sb, err := c.Sandboxes.Get(bg, id); err != nil || sb.Status != "destroyed" {
		t.Fatalf("after the recipe: %+v %v", sb, err)
	}
	// No network: nothing but loopback.
	netCode := "import socket\ndef run(input, config):\n    try:\n        socket.create_connection(('1.1.1.1', 53), timeout=2)\n        return 'connected'\n    except OSError as e:\n        return 'refused: ' + str(e)"
	run, _ = runUntrusted(netCode, 30000)
	if !run.OK || !strings.HasPrefix(string(run.Result), `"refused`) {
		t.Fatalf("network: %+v", run)
	}
	// The hard timeout kills a loop that never ends.
	t0 := time.Now()
	run, _ = runUntrusted("def run(input, config):\n    while True:\n        pass", 1500)
	if run.OK || run.Status != lbb.StatusTimedOut || time.Since(t0) > 20*time.Second {
		t.Fatalf("timeout: %+v after %s", run, time.Since(t0))
	}
	// The same recipe as one call: the sandbox lives for the run alone.
	one, err := c.Sandboxes.Run(bg, lbb.RunParams{Code: "def run(input, config):\n    while True:\n        pass", TimeoutMs: 1000,
		Limits: &lbb.Limits{CPUs: 0.5, MemoryMiB: 512}})
	if err != nil || one.Status != lbb.StatusTimedOut {
		t.Fatalf("one call: %+v %v", one, err)
	}
	if sb, _ := c.Sandboxes.Get(bg, one.Sandbox); sb.Status != "destroyed" {
		t.Fatalf("one-call sandbox: %+v", sb)
	}
}

// TestLevel3StopResumeKeepsFiles: stop ends processes (a running command is killed), the disk
// stays, resume brings it back; a stopped sandbox frees its place under the graph's cap.
func TestLevel3StopResumeKeepsFiles(t *testing.T) {
	s := startServer(t, "--max-running-per-graph", "1")
	c := s.client(t, "main")
	sb := newSandbox(t, c, lbb.CreateParams{})
	write(t, c, sb.ID, "keep/me.txt", "still here")
	execOK(t, c, sb.ID, "bash", "-c", "mkdir -p /workspace/made && echo by-a-command > /workspace/made/f && pip --version >/dev/null 2>&1; true")
	bgCmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"sleep", "600"}, WaitMs: -1})
	if err != nil || bgCmd.Status != "running" {
		t.Fatalf("background: %+v %v", bgCmd, err)
	}
	// The cap: one running sandbox.
	if _, err := c.Sandboxes.Create(bg, lbb.CreateParams{}); lbb.CodeOf(err) != "too_many_sandboxes" || lbb.StatusOf(err) != 429 {
		t.Fatalf("over the cap: %v", err)
	}
	st, err := c.Sandboxes.Stop(bg, sb.ID)
	if err != nil || st.Status != "stopped" || st.EndReason != "stopped" {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if k, _ := c.Commands.Get(bg, bgCmd.ID, 0); k.Status != "killed" {
		t.Fatalf("a command running at stop: %+v", k)
	}
	if _, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"true"}}); !lbb.IsConflict(err) {
		t.Fatalf("exec in a stopped sandbox: %v", err)
	}
	// Stopped, it no longer counts: another may run, and then this one may not resume.
	other := newSandbox(t, c, lbb.CreateParams{})
	if _, err := c.Sandboxes.Resume(bg, sb.ID); lbb.CodeOf(err) != "too_many_sandboxes" {
		t.Fatalf("resume over the cap: %v", err)
	}
	c.Sandboxes.Delete(bg, other.ID)
	if r, err := c.Sandboxes.Resume(bg, sb.ID); err != nil || r.Status != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if got := read(t, c, sb.ID, "keep/me.txt"); got != "still here" {
		t.Fatalf("after resume: %q", got)
	}
	if got := read(t, c, sb.ID, "made/f"); got != "by-a-command\n" {
		t.Fatalf("after resume: %q", got)
	}
	if out := execOK(t, c, sb.ID, "cat", "keep/me.txt"); out.Stdout.Tail != "still here" {
		t.Fatalf("exec after resume: %+v", out)
	}
	c.Sandboxes.Delete(bg, sb.ID)
}

// TestLevel3Expiry: a sandbox ends at its expiry while the server runs; one whose expiry
// passes while the server is down is ended at start; one that was running when the server
// crashed is stopped with its disk kept, its command lost, and resumes.
func TestLevel3Expiry(t *testing.T) {
	s := startServer(t)
	c := s.client(t, "main")
	if _, err := c.Sandboxes.Create(bg, lbb.CreateParams{ExpiresInSeconds: 7200}); lbb.CodeOf(err) != "limit_exceeded" {
		t.Fatalf("past the lifetime cap: %v", err)
	}
	onTime := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 2})
	waitFor(t, 15*time.Second, "the sandbox to expire", func() bool {
		sb, err := c.Sandboxes.Get(bg, onTime.ID)
		return err == nil && sb.Status == "destroyed" && sb.EndReason == "expired"
	})
	if left := sandboxTraces(onTime.ID); len(left) > 0 {
		t.Fatalf("left after expiry: %v", left)
	}

	short := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 3})
	long := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 600})
	write(t, c, long.ID, "work.txt", "my work")
	running, err := c.Sandboxes.Exec(bg, long.ID, lbb.ExecParams{Argv: []string{"sleep", "600"}, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.kill9()
	time.Sleep(4 * time.Second)
	s.start()
	c = s.client(t, "main")
	if sb, _ := c.Sandboxes.Get(bg, short.ID); sb.Status != "destroyed" || sb.EndReason != "expired" {
		t.Fatalf("expired while the server was down: %+v", sb)
	}
	if left := sandboxTraces(short.ID); len(left) > 0 {
		t.Fatalf("left of the expired sandbox: %v", left)
	}
	sb, _ := c.Sandboxes.Get(bg, long.ID)
	if sb.Status != "stopped" || sb.EndReason != "server_restart" {
		t.Fatalf("running at the crash: %+v", sb)
	}
	if cmd, _ := c.Commands.Get(bg, running.ID, 0); cmd.Status != "lost" {
		t.Fatalf("its command: %+v", cmd)
	}
	if r, err := c.Sandboxes.Resume(bg, long.ID); err != nil || r.Status != "running" {
		t.Fatalf("resume after the crash: %+v %v", r, err)
	}
	if got := read(t, c, long.ID, "work.txt"); got != "my work" {
		t.Fatalf("the workspace after the crash: %q", got)
	}
	// A graceful stop stops it too, and a restart finds it stopped.
	s.stop()
	s.start()
	c = s.client(t, "main")
	if sb, _ := c.Sandboxes.Get(bg, long.ID); sb.Status != "stopped" || sb.EndReason != "server_shutdown" {
		t.Fatalf("after a graceful stop: %+v", sb)
	}
	if _, err := c.Sandboxes.Resume(bg, long.ID); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c, long.ID, "work.txt"); got != "my work" {
		t.Fatalf("the workspace after a graceful stop: %q", got)
	}
	c.Sandboxes.Delete(bg, long.ID)
}

// collect reads an output stream to its end.
func collect(t *testing.T, s *lbb.OutputStream) (map[string]string, []lbb.OutputChunk) {
	t.Helper()
	defer s.Close()
	out := map[string]string{}
	var chunks []lbb.OutputChunk
	for s.Next() {
		ch := s.Chunk()
		out[ch.Stream] += string(ch.Data)
		chunks = append(chunks, ch)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out, chunks
}

// TestLevel3Streams: SSE with early and late readers, both streams, a reader after the end,
// long output past what is kept, kill and stdin.
func TestLevel3Streams(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{})
	script := "for i in $(seq 1 10); do echo out$i; echo err$i >&2; sleep 0.2; done"
	cmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"bash", "-c", script}, WaitMs: -1})
	if err != nil || cmd.Status != "running" {
		t.Fatalf("%+v %v", cmd, err)
	}
	var want, wantErr strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&want, "out%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	type result struct {
		out   map[string]string
		first time.Duration
		exit  *lbb.Command
	}
	readFrom := func(delay time.Duration) <-chan result {
		ch := make(chan result, 1)
		go func() {
			time.Sleep(delay)
			t0 := time.Now()
			st, err := c.Commands.Output(bg, cmd.ID, "both", true)
			if err != nil {
				t.Error(err)
				ch <- result{}
				return
			}
			var r result
			r.out = map[string]string{}
			for st.Next() {
				if r.first == 0 {
					r.first = time.Since(t0)
				}
				r.out[st.Chunk().Stream] += string(st.Chunk().Data)
			}
			r.exit = st.Exit()
			ch <- r
		}()
		return ch
	}
	early, late := readFrom(0), readFrom(1200*time.Millisecond)
	for _, ch := range []<-chan result{early, late} {
		r := <-ch
		if r.out["stdout"] != want.String() || r.out["stderr"] != wantErr.String() || r.exit == nil || *r.exit.ExitCode != 0 {
			t.Fatalf("reader: %q %q %+v", r.out["stdout"], r.out["stderr"], r.exit)
		}
	}
	// After the end: the record's head and tail.
	st, err := c.Commands.Output(bg, cmd.ID, "stdout", false)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := collect(t, st); out["stdout"] != want.String() {
		t.Fatalf("after the end: %q", out)
	}
	// Long output: a late reader gets the head, a gap, then the tail and live data.
	big, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"bash", "-c",
		"head -c 300000 /dev/zero | tr '\\0' a; echo; sleep 1; echo LAST"}, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	st, err = c.Commands.Output(bg, big.ID, "stdout", true)
	if err != nil {
		t.Fatal(err)
	}
	out, chunks := collect(t, st)
	gap := false
	for i := 1; i < len(chunks); i++ {
		if chunks[i].Offset > chunks[i-1].Offset+int64(len(chunks[i-1].Data)) {
			gap = true
		}
	}
	if !gap || !strings.HasPrefix(out["stdout"], "aaaa") || !strings.HasSuffix(out["stdout"], "a\nLAST\n") || len(out["stdout"]) >= 300000 {
		t.Fatalf("long output: gap %v, %d bytes, ends %q", gap, len(out["stdout"]), out["stdout"][max(0, len(out["stdout"])-20):])
	}

	// A one-call run's output: followed until it ends, from its record.
	_, one := s.run("one-call-follow", `{"run": {"code": "import time\ndef run(input, config):\n    print('from a run', flush=True)\n    time.sleep(0.5)\n    return 1"}, "wait_ms": 0}`)
	st, err = c.Commands.Output(bg, one["command"].(string), "both", true)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := collect(t, st); out["stdout"] != "from a run\n" || st.Exit() == nil || st.Exit().Status != "succeeded" {
		t.Fatalf("one-call output: %q %+v", out, st.Exit())
	}

	// Kill: SIGTERM ends a sleeping process; the record says killed.
	sleeper, _ := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"sleep", "600"}, WaitMs: -1})
	k, err := c.Commands.Kill(bg, sleeper.ID, "SIGTERM")
	if err != nil || k.Status != "killed" || k.Signal != "SIGTERM" {
		t.Fatalf("kill: %+v %v", k, err)
	}
	// Killing an ended command answers its record.
	if k2, err := c.Commands.Kill(bg, sleeper.ID, ""); err != nil || k2.Status != "killed" {
		t.Fatalf("kill again: %+v %v", k2, err)
	}

	// Stdin: text at the start, writes while it runs, then close.
	catCmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"bash", "-c", "while read l; do echo got:$l; done; echo eof"},
		Stdin: "one\n", StdinOpen: true, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commands.WriteStdin(bg, catCmd.ID, []byte("two\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.Commands.WriteStdin(bg, catCmd.ID, []byte{0xff, '\n'}, true); err != nil {
		t.Fatal(err)
	}
	done, _ := c.Commands.Get(bg, catCmd.ID, 10000)
	if done.Status != "succeeded" || !strings.HasPrefix(done.Stdout.Tail, "got:one\ngot:two\ngot:") || !strings.HasSuffix(done.Stdout.Tail, "eof\n") || done.StdinBytes != 10 {
		t.Fatalf("stdin: %+v %q", done, done.Stdout.Tail)
	}
	if err := c.Commands.WriteStdin(bg, catCmd.ID, []byte("late"), false); !lbb.IsConflict(err) {
		t.Fatalf("stdin after the end: %v", err)
	}
	// Binary stdin in the create call.
	bin, _ := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"od", "-An", "-tx1"}, StdinBase64: lbb.StdinBytes([]byte{0, 1, 0xfe})})
	if strings.TrimSpace(bin.Stdout.Tail) != "00 01 fe" {
		t.Fatalf("binary stdin: %q", bin.Stdout.Tail)
	}
}

// TestLevel3ConcurrentCommands: 20 background commands run at once in one sandbox and keep
// running between calls.
func TestLevel3ConcurrentCommands(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{})
	const n = 20
	ids := make([]string, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"bash", "-c", fmt.Sprintf("sleep 2; echo cmd%d", i)}, WaitMs: -1})
			if err != nil || cmd.Status != "running" {
				t.Errorf("%d: %+v %v", i, cmd, err)
				return
			}
			ids[i] = cmd.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Meanwhile the sandbox answers other calls.
	if l, err := c.Sandboxes.Commands(bg, sb.ID, lbb.ListParams{Status: "running"}); err != nil || len(l.Data) != n {
		t.Fatalf("running: %d %v", len(l.Data), err)
	}
	execOK(t, c, sb.ID, "true")
	for i, id := range ids {
		cmd, err := c.Commands.Get(bg, id, 30000)
		if err != nil || cmd.Status != "succeeded" || cmd.Stdout.Tail != fmt.Sprintf("cmd%d\n", i) {
			t.Fatalf("%d: %+v %v", i, cmd, err)
		}
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Fatalf("20 commands of 2 s took %s: they did not run at once", d)
	}
	// A command's record has the CPU its sandbox used while it ran (the host measures it).
	busy := execOK(t, c, sb.ID, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if busy.Usage.VCPUMs < 20 || busy.Usage.VCPUMs > 60_000 {
		t.Errorf("a busy loop's record says %v ms of CPU", busy.Usage.VCPUMs)
	}
}

// TestLevel3PathEscapes: .., absolute paths elsewhere, a symlink to /etc, a symlink loop and
// an absolute symlink are refused by every file route, and nothing outside is touched.
func TestLevel3PathEscapes(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{})
	execOK(t, c, sb.ID, "bash", "-c", "ln -s /etc etc && ln -s loop1 loop2 && ln -s loop2 loop1 && ln -s /etc/passwd pw && ln -s ../.. up && mkdir d && ln -s /workspace/d abs")
	bad := []string{"../etc/passwd", "../../etc/passwd", "/etc/passwd", "/workspace/../etc/passwd", "etc/passwd", "etc", "pw", "up/etc/passwd", "abs/x", "d/../../etc/passwd"}
	for _, p := range bad {
		if _, err := c.Files.Read(bg, sb.ID, p); lbb.CodeOf(err) != "path_outside_workspace" || lbb.StatusOf(err) != 400 {
			t.Errorf("read %s: %v", p, err)
		}
		if _, err := c.Files.List(bg, sb.ID, p, false); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Errorf("list %s: %v", p, err)
		}
		if _, err := c.GraphFiles.Keep(bg, sb.ID, p); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Errorf("keep %s: %v", p, err)
		}
	}
	for _, p := range []string{"../x", "/etc/x", "etc/x", "up/x", "etc/passwd"} {
		if err := c.Files.Delete(bg, sb.ID, p); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Errorf("delete %s: %v", p, err)
		}
		if _, err := c.Files.Mkdir(bg, sb.ID, p); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Errorf("mkdir %s: %v", p, err)
		}
	}
	f, err := c.GraphFiles.Upload(bg, "x", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GraphFiles.Import(bg, sb.ID, "etc/passwd", f.SHA256); lbb.CodeOf(err) != "path_outside_workspace" {
		t.Errorf("import through a symlink: %v", err)
	}
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "etc/passwd", "etc/x", "up/etc/x", "abs/x", "d/../../x"} {
		if _, err := c.Files.Write(bg, sb.ID, p, strings.NewReader("x")); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Errorf("write %s: %v", p, err)
		}
	}
	// Writing a path that is itself a symlink replaces the link with a file; what it pointed
	// to is untouched.
	if _, err := c.Files.Write(bg, sb.ID, "pw", strings.NewReader("mine")); err != nil {
		t.Fatalf("write over a link: %v", err)
	}
	if es, err := c.Files.List(bg, sb.ID, "pw", false); err != nil || len(es) != 1 || es[0].Type != "file" || read(t, c, sb.ID, "pw") != "mine" {
		t.Fatalf("after writing over a link: %+v %v", es, err)
	}
	if after, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(after, hostPasswd) {
		t.Fatal("the host's /etc/passwd changed")
	}
	// A loop is refused too (it never resolves).
	if _, err := c.Files.Read(bg, sb.ID, "loop1"); lbb.StatusOf(err) != 400 {
		t.Errorf("read loop1: %v", err)
	}
	if _, err := c.Files.Write(bg, sb.ID, "loop1/x", strings.NewReader("x")); lbb.StatusOf(err) != 400 {
		t.Errorf("write loop1/x: %v", err)
	}
	if _, err := c.Files.List(bg, sb.ID, "loop1", false); lbb.StatusOf(err) != 400 {
		t.Errorf("list loop1: %v", err)
	}
	// The listing shows links without following them.
	es, err := c.Files.List(bg, sb.ID, ".", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasPrefix(e.Path, "etc/") || strings.HasPrefix(e.Path, "up/") {
			t.Errorf("the listing followed a link: %s", e.Path)
		}
	}
	// Inside paths work, relative or absolute.
	write(t, c, sb.ID, "/workspace/d/in.txt", "in")
	if got := read(t, c, sb.ID, "d/../d/in.txt"); got != "in" {
		t.Fatalf("inside: %q", got)
	}
}

// pattern yields n deterministic pseudo-random bytes without holding them.
func pattern(n int64, seed byte) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed}), n)
}

// rss answers a process's resident and peak resident memory in bytes.
func rss(t *testing.T, pid int) (cur, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if n, _ := fmt.Sscanf(line, "VmRSS: %d kB", &kb); n == 1 {
			cur = kb << 10
		}
		if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
			peak = kb << 10
		}
	}
	return cur, peak
}

// TestLevel3LargeFile streams 200 MiB up and down and checks that the server's memory stays
// bounded (its peak RSS grows by far less than the file); a file over the cap is 413 and
// leaves nothing. It logs the throughput.
func TestLevel3LargeFile(t *testing.T) {
	s := startServer(t, "--max-file-bytes", fmt.Sprint(256<<20))
	c, sb := s.sandbox(t, lbb.CreateParams{Limits: &lbb.Limits{DiskMiB: 1024}})
	const size = 200 << 20
	pid := s.cmd.Process.Pid
	_, peak0 := rss(t, pid)

	h := sha256.New()
	t0 := time.Now()
	e, err := c.Files.Write(bg, sb.ID, "big.bin", io.TeeReader(pattern(size, 42), h))
	if err != nil {
		t.Fatal(err)
	}
	up := time.Since(t0)
	if e.Size != size {
		t.Fatalf("entry: %+v", e)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// The sandbox sees the same bytes.
	if got := execOK(t, c, sb.ID, "sha256sum", "big.bin"); !strings.HasPrefix(got.Stdout.Tail, sum) {
		t.Fatalf("in the sandbox: %q, want %s", got.Stdout.Tail, sum)
	}
	t0 = time.Now()
	got, n, err := testkit.Digest(t)(c.Files.Read(bg, sb.ID, "big.bin"))
	down := time.Since(t0)
	if err != nil || n != size || got != sum {
		t.Fatalf("download: %d bytes, %v, sha256 %s, want %s", n, err, got, sum)
	}
	// Keep it as a File and import it back: 200 MiB through the blob store too.
	t0 = time.Now()
	f, err := c.GraphFiles.Keep(bg, sb.ID, "big.bin")
	if err != nil || f.SHA256 != sum || f.Size != size {
		t.Fatalf("keep: %+v %v", f, err)
	}
	keep := time.Since(t0)
	t0 = time.Now()
	if imp, err := c.GraphFiles.Import(bg, sb.ID, "copy.bin", sum); err != nil || imp.Size != size {
		t.Fatalf("import: %+v %v", imp, err)
	}
	imp := time.Since(t0)
	_, peak := rss(t, pid)
	growth := peak - peak0
	mib := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	t.Logf("FIGURES file 200 MiB: upload %.0f MiB/s (%s), download %.0f MiB/s (%s), keep %.0f MiB/s, import %.0f MiB/s; server peak RSS %d MiB -> %d MiB (+%d MiB)",
		mib(up), up.Round(time.Millisecond), mib(down), down.Round(time.Millisecond), mib(keep), mib(imp), peak0>>20, peak>>20, growth>>20)
	if growth > 64<<20 {
		t.Fatalf("the server's peak RSS grew by %d MiB moving a 200 MiB file: it holds files in memory", growth>>20)
	}
	// Over the cap: 413, whether the size is announced or not, and nothing is left.
	req, _ := http.NewRequest("PUT", s.url+"/v1/sandboxes/"+sb.ID+"/files/content?graph=main&path=over.bin", pattern(257<<20, 0))
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("over the cap, streamed: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("PUT", s.url+"/v1/sandboxes/"+sb.ID+"/files/content?graph=main&path=over.bin", pattern(257<<20, 0))
	req.ContentLength = 257 << 20
	req.Header.Set("Authorization", "Bearer "+s.key)
	if resp, err = http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode != 413 {
		t.Fatalf("over the cap, announced: %d", resp.StatusCode)
	}
	if _, err := c.Files.List(bg, sb.ID, "over.bin", false); !lbb.IsNotFound(err) {
		t.Fatalf("a refused upload left a file: %v", err)
	}
}

// TestLevel3GraphFiles: keep a workspace file, import it by sha256 into another sandbox,
// upload, and a template whose Files are copied into /workspace at start (long-lived and
// one-call); retries with one key make one File.
func TestLevel3GraphFiles(t *testing.T) {
	s := startServer(t)
	c, a := s.sandbox(t, lbb.CreateParams{})
	execOK(t, c, a.ID, "bash", "-c", "mkdir -p out && printf '# Report\\n\\nall good\\n' > out/report.md")
	content := "# Report\n\nall good\n"
	sum := sha256.Sum256([]byte(content))
	want := hex.EncodeToString(sum[:])
	f, err := c.GraphFiles.Keep(bg, a.ID, "out/report.md", lbb.WithIdempotencyKey("keep-1"))
	if err != nil {
		t.Fatal(err)
	}
	if f.SHA256 != want || f.Size != int64(len(content)) || f.Origin.Kind != "sandbox" || f.Origin.Sandbox != a.ID || f.Origin.Path != "out/report.md" || f.Name != "report.md" {
		t.Fatalf("kept: %+v", f)
	}
	again, err := c.GraphFiles.Keep(bg, a.ID, "out/report.md", lbb.WithIdempotencyKey("keep-1"))
	if err != nil || again.ID != f.ID || !again.Replayed {
		t.Fatalf("keep again: %+v %v", again, err)
	}
	if _, err := c.GraphFiles.Keep(bg, a.ID, "out/other.md", lbb.WithIdempotencyKey("keep-1")); lbb.StatusOf(err) != 422 {
		t.Fatalf("the key with another request: %v", err)
	}
	// The File outlives its sandbox.
	c.Sandboxes.Delete(bg, a.ID)
	got, err := c.GraphFiles.Get(bg, f.ID)
	if err != nil || got.SHA256 != want {
		t.Fatalf("get: %+v %v", got, err)
	}
	rc, err := c.GraphFiles.Content(bg, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != content {
		t.Fatalf("content: %q", b)
	}
	bsb := newSandbox(t, c, lbb.CreateParams{})
	defer c.Sandboxes.Delete(bg, bsb.ID)
	imp, err := c.GraphFiles.Import(bg, bsb.ID, "data/units.md", want, lbb.WithIdempotencyKey("imp-1"))
	if err != nil || imp.SHA256 != want || imp.Path != "data/units.md" {
		t.Fatalf("import: %+v %v", imp, err)
	}
	if got := execOK(t, c, bsb.ID, "sha256sum", "data/units.md"); !strings.HasPrefix(got.Stdout.Tail, want) {
		t.Fatalf("imported bytes: %q", got.Stdout.Tail)
	}
	up, err := c.GraphFiles.Upload(bg, "units.csv", strings.NewReader("cm,1\nm,100\n"))
	if err != nil || up.Origin.Kind != "upload" {
		t.Fatalf("upload: %+v %v", up, err)
	}
	l, err := c.GraphFiles.List(bg, lbb.ListParams{})
	if err != nil || len(l.Data) != 2 {
		t.Fatalf("list: %+v %v", l, err)
	}
	// A template's Files are in /workspace when its sandbox starts, and for its runs.
	_, err = c.Sandboxes.Templates.Create(bg, lbb.TemplateParams{Name: "with-files",
		Code:  "def run(input, config):\n    return open('data/units.csv').read().splitlines()",
		Files: []lbb.TemplateFile{{File: up.ID, Path: "data/units.csv"}, {File: want, Path: "/workspace/report.md"}}})
	if err != nil {
		t.Fatal(err)
	}
	fromTpl := newSandbox(t, c, lbb.CreateParams{Template: "with-files"})
	defer c.Sandboxes.Delete(bg, fromTpl.ID)
	if got := read(t, c, fromTpl.ID, "data/units.csv"); got != "cm,1\nm,100\n" {
		t.Fatalf("template file: %q", got)
	}
	if got := read(t, c, fromTpl.ID, "report.md"); got != content {
		t.Fatalf("template file: %q", got)
	}
	run, err := c.Sandboxes.Run(bg, lbb.RunParams{Template: "with-files"})
	if err != nil || !run.OK || string(run.Result) != `["cm,1","m,100"]` {
		t.Fatalf("one-call run of the template: %+v %v", run, err)
	}
	if _, err := c.Sandboxes.Templates.Create(bg, lbb.TemplateParams{Name: "missing", Code: "x",
		Files: []lbb.TemplateFile{{File: "fil_01aaaaaaaaaaaaaaaaaaaaaaaa", Path: "x"}}}); !lbb.IsNotFound(err) {
		t.Fatalf("a template naming no File: %v", err)
	}
}

// TestLevel3CrossGraph: nothing of one graph is reachable from another; it is all not_found.
func TestLevel3CrossGraph(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{})
	write(t, c, sb.ID, "secret.txt", "main's")
	cmd := execOK(t, c, sb.ID, "true")
	f, err := c.GraphFiles.Keep(bg, sb.ID, "secret.txt")
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.Keys.Create(bg, lbb.KeyParams{Name: "other", Graphs: []string{"other"},
		Scopes: []string{"sandboxes:read", "sandboxes:write", "sandboxes:delete", "files:read", "files:write"}})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := lbb.New(lbb.Options{BaseURL: s.url, APIKey: k.Secret, Graph: "other"})
	mine := newSandbox(t, o, lbb.CreateParams{})
	defer o.Sandboxes.Delete(bg, mine.ID)
	calls := map[string]error{}
	_, calls["get sandbox"] = o.Sandboxes.Get(bg, sb.ID)
	_, calls["stop"] = o.Sandboxes.Stop(bg, sb.ID)
	_, calls["resume"] = o.Sandboxes.Resume(bg, sb.ID)
	_, calls["exec"] = o.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"true"}})
	_, calls["run"] = o.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: "def run(i, c):\n    return 1"})
	_, calls["read"] = o.Files.Read(bg, sb.ID, "secret.txt")
	_, calls["write"] = o.Files.Write(bg, sb.ID, "x", strings.NewReader("x"))
	_, calls["list"] = o.Files.List(bg, sb.ID, ".", false)
	calls["delete file"] = o.Files.Delete(bg, sb.ID, "secret.txt")
	_, calls["get command"] = o.Commands.Get(bg, cmd.ID, 0)
	_, calls["kill"] = o.Commands.Kill(bg, cmd.ID, "")
	_, calls["output"] = o.Commands.Output(bg, cmd.ID, "both", false)
	_, calls["get file"] = o.GraphFiles.Get(bg, f.ID)
	_, calls["file content"] = o.GraphFiles.Content(bg, f.ID)
	_, calls["keep"] = o.GraphFiles.Keep(bg, sb.ID, "secret.txt")
	_, calls["import into mine by main's sha256"] = o.GraphFiles.Import(bg, mine.ID, "stolen.txt", f.SHA256)
	_, calls["delete sandbox"] = o.Sandboxes.Delete(bg, sb.ID)
	// The same key naming graph main is refused before anything.
	om, _ := lbb.New(lbb.Options{BaseURL: s.url, APIKey: k.Secret, Graph: "main"})
	_, calls["main with other's key"] = om.Sandboxes.Get(bg, sb.ID)
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := calls[n]; !lbb.IsNotFound(err) || lbb.CodeOf(err) != "not_found" {
			t.Errorf("%s across graphs: %v", n, err)
		}
	}
	if got := read(t, c, sb.ID, "secret.txt"); got != "main's" {
		t.Fatalf("main's file: %q", got)
	}
	if l, _ := o.Sandboxes.List(bg, lbb.ListParams{}); len(l.Data) != 1 || l.Data[0].ID != mine.ID {
		t.Fatalf("other's list: %+v", l)
	}
}

// TestLevel3Idempotency: one key, one effect: a retried exec, run, create, import.
func TestLevel3Idempotency(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{IdempotencyKey: "create-1"})
	if again, err := c.Sandboxes.Create(bg, lbb.CreateParams{IdempotencyKey: "create-1"}); err != nil || again.ID != sb.ID {
		t.Fatalf("create again: %+v %v", again, err)
	}
	p := lbb.ExecParams{Argv: []string{"bash", "-c", "echo x >> count.txt; wc -l < count.txt"}, IdempotencyKey: "exec-1"}
	// Concurrent retries while the first runs, and retries after: one run.
	var wg sync.WaitGroup
	got := make([]*lbb.Command, 5)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd, err := c.Sandboxes.Exec(bg, sb.ID, p)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = cmd
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, g := range got {
		if g.ID != got[0].ID || g.Status != "succeeded" {
			t.Fatalf("retries: %+v vs %+v", g, got[0])
		}
	}
	if n := execOK(t, c, sb.ID, "wc", "-l", "count.txt"); !strings.HasPrefix(n.Stdout.Tail, "1 ") {
		t.Fatalf("the command ran more than once: %q", n.Stdout.Tail)
	}
	p.Argv = []string{"true"}
	if _, err := c.Sandboxes.Exec(bg, sb.ID, p); lbb.StatusOf(err) != 422 || lbb.CodeOf(err) != "idempotency_key_reused" {
		t.Fatalf("same key, another request: %v", err)
	}
	// Over HTTP: the replay says so, and a call without a key is refused.
	h := map[string]string{"Idempotency-Key": "exec-1"}
	r := s.call("POST", "/v1/sandboxes/"+sb.ID+"/commands?graph=main", "", h, jsonBody(t, map[string]any{"argv": []string{"bash", "-c", "echo x >> count.txt; wc -l < count.txt"}}))
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" || r.obj(t)["id"] != got[0].ID {
		t.Fatalf("replay: %d %v %s", r.status, r.header, r.body)
	}
	if r := s.call("POST", "/v1/sandboxes/"+sb.ID+"/commands?graph=main", "", nil, `{"argv": ["true"]}`); r.status != 400 || r.errCode(t) != "idempotency_key_required" {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	run1, err := c.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: "import random\ndef run(i, c):\n    return random.random()", IdempotencyKey: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	run2, err := c.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: "import random\ndef run(i, c):\n    return random.random()", IdempotencyKey: "run-1"})
	if err != nil || run2.Command != run1.Command || string(run2.Result) != string(run1.Result) || !run2.Replayed {
		t.Fatalf("run again: %+v %+v %v", run1, run2, err)
	}
	up, _ := c.GraphFiles.Upload(bg, "a", strings.NewReader("a"), lbb.WithIdempotencyKey("up-1"))
	up2, _ := c.GraphFiles.Upload(bg, "a", strings.NewReader("a"), lbb.WithIdempotencyKey("up-1"))
	if up.ID == "" || up2.ID != up.ID {
		t.Fatalf("upload again: %+v %+v", up, up2)
	}
	if l, _ := c.GraphFiles.List(bg, lbb.ListParams{}); len(l.Data) != 1 {
		t.Fatalf("%d Files after a retried upload", len(l.Data))
	}
	// Every state change is in the audit trail with the key that made it.
	a, err := c.Audit.List(bg, lbb.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, e := range a.Data {
		routes[e.Route] = true
		if e.Key == "" {
			t.Fatalf("audit entry without a key: %+v", e)
		}
	}
	for _, want := range []string{"POST /v1/sandboxes", "POST /v1/sandboxes/{id}/commands", "POST /v1/sandboxes/{id}/run", "POST /v1/files"} {
		if !routes[want] {
			t.Errorf("the audit trail lacks %s: %v", want, routes)
		}
	}
}

// TestLevel3Masking: env values (the sandbox's and a command's) never come back in output,
// results or errors, and are never stored.
func TestLevel3Masking(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{Env: map[string]string{"DB_PASSWORD": "correct-horse-battery"}})
	cmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"bash", "-c", "echo $DB_PASSWORD; echo $API_TOKEN >&2; printf %s $DB_PASSWORD | rev"},
		Env: map[string]string{"API_TOKEN": "tok-123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(cmd)
	if strings.Contains(string(all), "correct-horse-battery") || strings.Contains(string(all), "tok-123456789") || cmd.Stdout.Tail != "***\nyrettab-esroh-tcerroc" {
		t.Fatalf("masking: %s", all)
	}
	run, _ := c.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: "import os\ndef run(i, c):\n    raise ValueError(os.environ['DB_PASSWORD'])"})
	if b, _ := json.Marshal(run); strings.Contains(string(b), "correct-horse-battery") {
		t.Fatalf("masking in errors: %s", b)
	}
	// The store keeps names only.
	rec, _ := c.Sandboxes.Get(bg, sb.ID)
	if len(rec.EnvNames) != 1 || rec.EnvNames[0] != "DB_PASSWORD" {
		t.Fatalf("env names: %v", rec.EnvNames)
	}
	db, _ := os.ReadFile(s.dataDir + "/lbb.db")
	wal, _ := os.ReadFile(s.dataDir + "/lbb.db-wal")
	if bytes.Contains(db, []byte("correct-horse-battery")) || bytes.Contains(wal, []byte("correct-horse-battery")) || bytes.Contains(wal, []byte("tok-123456789")) {
		t.Fatal("an env value is in the store")
	}
}

// TestLevel3CLI: lbb sandbox create/exec/stop/resume/delete, files put/get/ls, commands logs.
func TestLevel3CLI(t *testing.T) {
	s := startServer(t)
	out, errOut, err := s.cli("sandbox", "create", "--label", "who=cli")
	if err != nil {
		t.Fatalf("create: %v %s", err, errOut)
	}
	id := strings.TrimSpace(out)
	defer s.cli("sandbox", "delete", id)
	out, errOut, err = s.cli("sandbox", "exec", id, "--", "bash", "-c", "echo to-out; echo to-err >&2; exit 7")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || out != "to-out\n" || errOut != "to-err\n" {
		t.Fatalf("exec: %v %q %q", err, out, errOut)
	}
	local := t.TempDir() + "/in.txt"
	os.WriteFile(local, []byte("from the host\n"), 0o644)
	if _, errOut, err = s.cli("files", "put", id, local, "dir/in.txt"); err != nil {
		t.Fatalf("put: %v %s", err, errOut)
	}
	if out, _, err = s.cli("files", "get", id, "dir/in.txt"); err != nil || out != "from the host\n" {
		t.Fatalf("get: %v %q", err, out)
	}
	if out, _, err = s.cli("files", "ls", id, "-r"); err != nil || !strings.Contains(out, "dir/in.txt") {
		t.Fatalf("ls: %v %q", err, out)
	}
	out, _, err = s.cli("sandbox", "exec", "--detach", id, "--", "bash", "-c", "for i in 1 2 3; do echo tick$i; sleep 0.3; done; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = s.cli("commands", "logs", "-f", strings.TrimSpace(out))
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || out != "tick1\ntick2\ntick3\n" {
		t.Fatalf("logs -f: %v %q", err, out)
	}
	if out, _, err = s.cli("sandbox", "list", "--label", "who=cli"); err != nil || !strings.Contains(out, id) {
		t.Fatalf("list: %v %q", err, out)
	}
	for _, sub := range []string{"stop", "resume"} {
		if _, errOut, err := s.cli("sandbox", sub, id); err != nil {
			t.Fatalf("%s: %v %s", sub, err, errOut)
		}
	}
	if out, _, err = s.cli("sandbox", "exec", id, "--", "cat", "dir/in.txt"); err != nil || out != "from the host\n" {
		t.Fatalf("after resume: %v %q", err, out)
	}
}

// TestLevel3Figures measures the exec round trip through the API (a command that does
// nothing, start to record) and sandbox creation, and logs them.
func TestLevel3Figures(t *testing.T) {
	s := startServer(t)
	c := s.client(t, "main")
	var creates []time.Duration
	var sb *lbb.Sandbox
	for range 5 {
		t0 := time.Now()
		x, err := c.Sandboxes.Create(bg, lbb.CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		creates = append(creates, time.Since(t0))
		if sb != nil {
			c.Sandboxes.Delete(bg, sb.ID)
		}
		sb = x
	}
	defer c.Sandboxes.Delete(bg, sb.ID)
	const n = 100
	var rt []time.Duration
	for range n {
		t0 := time.Now()
		cmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"true"}})
		if err != nil || cmd.Status != "succeeded" {
			t.Fatalf("%+v %v", cmd, err)
		}
		rt = append(rt, time.Since(t0))
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(10 * time.Microsecond)
	}
	var runs []time.Duration
	for range 20 {
		t0 := time.Now()
		if _, err := c.Sandboxes.RunIn(bg, sb.ID, lbb.RunParams{Code: "def run(input, config):\n    return 1"}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, time.Since(t0))
	}
	t.Logf("FIGURES exec round trip (POST …/commands, `true`, waited): p50 %s p95 %s p99 %s over %d", q(rt, .5), q(rt, .95), q(rt, .99), n)
	t.Logf("FIGURES run in a sandbox (POST …/run, python run()): p50 %s p95 %s over %d", q(runs, .5), q(runs, .95), len(runs))
	t.Logf("FIGURES create a long-lived sandbox (POST /v1/sandboxes, cold): p50 %s max %s over %d", q(creates, .5), q(creates, 1), len(creates))
}
