package agent_test

// End to end: the real lbb-agent binary (testkit.Agent) as a plain subprocess, on a real
// socketpair, with a temporary workspace. No isolation: these test the protocol, the
// process table and the files, not the sandbox.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/agent/agenttest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

type testAgent struct {
	c   *agent.Client
	ws  string
	etc string
	cmd *exec.Cmd
	// exited is closed when the agent process has exited and been waited for.
	exited chan struct{}
}

// startAgent runs the agent on one end of a socketpair and returns a client on the other.
func startAgent(t testing.TB) *testAgent {
	t.Helper()
	return startAgentIn(t, t.TempDir())
}

// startAgentIn is startAgent with the workspace ws.
func startAgentIn(t testing.TB, ws string) *testAgent {
	t.Helper()
	ta := &testAgent{ws: ws, etc: t.TempDir()}
	p := agenttest.StartProcess(t, testkit.Agent(t), "--workspace", ta.ws, "--etc-dir", ta.etc, "--path", os.Getenv("PATH"))
	ta.c, ta.cmd, ta.exited = p.C, p.Cmd, p.Exited
	t.Cleanup(func() {
		ta.c.Close()
		if !ta.waitExit() {
			t.Errorf("the agent did not exit when its channel closed")
		}
	})
	return ta
}

// waitExit waits up to 5 s for the agent to exit; then it kills it and answers false.
func (ta *testAgent) waitExit() bool {
	select {
	case <-ta.exited:
		return true
	case <-time.After(5 * time.Second):
		ta.cmd.Process.Kill()
		<-ta.exited
		return false
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exec runs req and returns stdout, stderr and the Exit.
func (ta *testAgent) exec(t testing.TB, req agent.ExecRequest, stdin io.Reader) (string, string, agent.Exit) {
	t.Helper()
	return agenttest.Exec(ctxT(t), t, ta.c, req, stdin)
}

func TestPing(t *testing.T) {
	ta := startAgent(t)
	if err := ta.c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestExec(t *testing.T) {
	ta := startAgent(t)
	os.WriteFile(filepath.Join(ta.ws, "plain.txt"), []byte("not a program"), 0o644)
	tests := []struct {
		name     string
		req      agent.ExecRequest
		stdout   string
		stderr   string
		code     int
		startErr string
	}{
		{name: "echo", req: agent.ExecRequest{Argv: []string{"echo", "hello"}}, stdout: "hello\n"},
		{name: "exit code", req: agent.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, stdout: "out\n", stderr: "err\n", code: 3},
		{name: "env", req: agent.ExecRequest{Argv: []string{"sh", "-c", `echo "$FOO $LANG $MPLBACKEND"`}, Env: map[string]string{"FOO": "bar"}}, stdout: "bar C.UTF-8 Agg\n"},
		{name: "cwd default", req: agent.ExecRequest{Argv: []string{"sh", "-c", "pwd"}}, stdout: ta.ws + "\n"},
		{name: "stdin is null", req: agent.ExecRequest{Argv: []string{"cat"}}, stdout: ""},
		{name: "signaled", req: agent.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, code: 128 + 15},
		{name: "not found", req: agent.ExecRequest{Argv: []string{"no-such-program-lbb"}}, code: -1, startErr: "executable file not found"},
		{name: "not executable", req: agent.ExecRequest{Argv: []string{"./plain.txt"}}, code: -1, startErr: "permission denied"},
		{name: "missing cwd", req: agent.ExecRequest{Argv: []string{"true"}, Cwd: "nope"}, code: -1, startErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, ex := ta.exec(t, tt.req, nil)
			if out != tt.stdout || errOut != tt.stderr || ex.ExitCode != tt.code {
				t.Errorf("got stdout %q stderr %q code %d, want %q %q %d (exit %+v)", out, errOut, ex.ExitCode, tt.stdout, tt.stderr, tt.code, ex)
			}
			if tt.startErr == "" && ex.StartError != "" || !strings.Contains(ex.StartError, tt.startErr) {
				t.Errorf("start error %q, want %q", ex.StartError, tt.startErr)
			}
		})
	}
}

func TestExecCwdAndOutside(t *testing.T) {
	ta := startAgent(t)
	if err := ta.c.Mkdir(ctxT(t), "sub/dir"); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{"sub/dir", "/workspace/sub/dir", filepath.Join(ta.ws, "sub/dir")} {
		out, _, _ := ta.exec(t, agent.ExecRequest{Argv: []string{"pwd"}, Cwd: cwd}, nil)
		if want := filepath.Join(ta.ws, "sub/dir") + "\n"; out != want {
			t.Errorf("cwd %q: pwd %q, want %q", cwd, out, want)
		}
	}
	_, err := ta.c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"pwd"}, Cwd: "../.."}, nil)
	if !agent.IsCode(err, agent.CodePathOutside) {
		t.Errorf("cwd ../..: %v, want %s", err, agent.CodePathOutside)
	}
}

func TestExecStdinStreams(t *testing.T) {
	ta := startAgent(t)
	pr, pw := io.Pipe()
	p, err := ta.c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"cat"}}, pr)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10)
	done := make(chan agent.Exit, 1)
	go func() {
		ex, err := p.Wait(writerFunc(func(b []byte) { lines <- string(b) }), nil)
		if err != nil {
			t.Error(err)
		}
		done <- ex
	}()
	// Full duplex: each line comes back before the next is sent.
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		pw.Write([]byte(l))
		select {
		case got := <-lines:
			if got != l {
				t.Fatalf("echoed %q, want %q", got, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no echo of %q", l)
		}
	}
	pw.Close()
	if ex := <-done; ex.ExitCode != 0 {
		t.Errorf("exit %+v", ex)
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(append([]byte(nil), b...)); return len(b), nil }

// waitGone waits until pid no longer exists (reaped: the agent is a subreaper).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("pid %d is still there", pid)
}

func firstLinePid(t *testing.T, out string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
	if err != nil || pid <= 0 {
		t.Fatalf("no pid in %q", out)
	}
	return pid
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	ta := startAgent(t)
	start := time.Now()
	// The grandchild sleeps in the background; the timeout must kill it too.
	out, _, ex := ta.exec(t, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 100 & echo $!; wait"}, TimeoutMs: 300}, nil)
	if !ex.TimedOut || ex.Signal != "SIGKILL" || ex.ExitCode != 137 {
		t.Errorf("exit %+v, want timed out by SIGKILL", ex)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	waitGone(t, firstLinePid(t, out))
}

func TestSignal(t *testing.T) {
	ta := startAgent(t)
	var out testkit.Buffer
	p, err := ta.c.Exec(ctxT(t), agent.ExecRequest{ID: "cmd_sig", Argv: []string{"sh", "-c", "echo ready; sleep 100"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan agent.Exit, 1)
	go func() {
		ex, err := p.Wait(&out, nil)
		if err != nil {
			t.Error(err)
		}
		done <- ex
	}()
	for !strings.Contains(out.String(), "ready") {
		time.Sleep(5 * time.Millisecond)
	}
	// A second process with the same id is refused while the first runs.
	if _, err := ta.c.Exec(ctxT(t), agent.ExecRequest{ID: "cmd_sig", Argv: []string{"true"}}, nil); !agent.IsCode(err, agent.CodeExists) {
		t.Errorf("duplicate id: %v", err)
	}
	if err := ta.c.Signal(ctxT(t), "cmd_sig", "TERM"); err != nil {
		t.Fatal(err)
	}
	ex := <-done
	if ex.Signal != "SIGTERM" || ex.ExitCode != 143 {
		t.Errorf("exit %+v, want SIGTERM", ex)
	}
	if err := ta.c.Signal(ctxT(t), "cmd_sig", "KILL"); !agent.IsCode(err, agent.CodeNotFound) {
		t.Errorf("signal after exit: %v, want not_found", err)
	}
	if err := ta.c.Signal(ctxT(t), "cmd_sig", "SIGNOPE"); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("bad signal: %v, want invalid_argument", err)
	}
}

func TestCancelKillsGroup(t *testing.T) {
	ta := startAgent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testkit.Buffer
	p, err := ta.c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 100 & echo $!; wait"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Wait(&out, nil)
		done <- err
	}()
	for !strings.Contains(out.String(), "\n") {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("Wait after cancel: no error")
	}
	waitGone(t, firstLinePid(t, out.String()))
	waitGone(t, p.Pid())
}

func TestBackgroundChildDoesNotHoldExit(t *testing.T) {
	ta := startAgent(t)
	start := time.Now()
	out, _, ex := ta.exec(t, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 3 & echo $!"}}, nil)
	if d := time.Since(start); d > 2*time.Second || ex.ExitCode != 0 {
		t.Errorf("exit %+v after %v; want prompt exit 0", ex, d)
	}
	syscall.Kill(firstLinePid(t, out), syscall.SIGKILL)
}

func TestConcurrentExecs(t *testing.T) {
	ta := startAgent(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, ex := ta.exec(t, agent.ExecRequest{ID: fmt.Sprintf("cmd_%d", i), Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.2; echo %d; exit %d", i, i)}}, nil)
			if out != fmt.Sprintf("%d\n", i) || ex.ExitCode != i {
				t.Errorf("%d: got %q exit %d", i, out, ex.ExitCode)
			}
		}()
	}
	wg.Wait()
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

// vmHWM is the peak resident set of pid in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func TestOutputFloodBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("200 MiB of output")
	}
	ta := startAgent(t)
	const size = 200 << 20
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := ta.c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out countWriter
	start := time.Now()
	ex, err := p.Wait(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if ex.ExitCode != 0 || out.n != size {
		t.Fatalf("exit %+v, %d bytes", ex, out.n)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	hwm := vmHWM(t, ta.cmd.Process.Pid)
	t.Logf("200 MiB of stdout in %v (%.0f MiB/s); agent peak RSS %d KiB; host heap in use %d KiB",
		d, float64(size>>20)/d.Seconds(), hwm, after.HeapInuse>>10)
	if hwm > 64<<10 {
		t.Errorf("agent peak RSS %d KiB: output is not bounded", hwm)
	}
	if after.HeapInuse > before.HeapInuse+64<<20 {
		t.Errorf("host heap grew from %d to %d KiB", before.HeapInuse>>10, after.HeapInuse>>10)
	}
}

func TestFilesRoundTrip(t *testing.T) {
	ta := startAgent(t)
	ctx := ctxT(t)
	if err := ta.c.WriteFile(ctx, "a/b/c.txt", 0o600, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if b := testkit.Content(t)(ta.c.ReadFile(ctx, "/workspace/a/b/c.txt")); b != "hello" {
		t.Errorf("read %q", b)
	}
	st, err := os.Stat(filepath.Join(ta.ws, "a/b/c.txt"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("on disk: %v %v", st, err)
	}
	// Overwriting keeps the mode.
	if err := ta.c.WriteFile(ctx, "a/b/c.txt", 0, strings.NewReader("again")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(ta.ws, "a/b/c.txt")); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after overwrite %v", st.Mode())
	}
	if err := ta.c.Mkdir(ctx, "a/empty"); err != nil {
		t.Fatal(err)
	}
	if err := ta.c.Mkdir(ctx, "a/empty"); err != nil {
		t.Errorf("mkdir of an existing dir: %v", err)
	}
	os.Symlink("b/c.txt", filepath.Join(ta.ws, "a/link"))

	list, err := ta.c.List(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range list {
		got[e.Path] = e.Type
		if _, err := time.Parse(time.RFC3339, e.MTime); err != nil {
			t.Errorf("mtime %q", e.MTime)
		}
	}
	want := map[string]string{"a/b": "dir", "a/empty": "dir", "a/link": "symlink"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("list a: %v, want %v", got, want)
	}
	list, err = ta.c.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
		if e.Path == "a/b/c.txt" && (e.Size != 5 || e.Mode != "0600" || e.Type != "file" || e.Name != "c.txt") {
			t.Errorf("entry %+v", e)
		}
	}
	if want := "a a/b a/b/c.txt a/empty a/link"; strings.Join(paths, " ") != want {
		t.Errorf("recursive list %q, want %q", strings.Join(paths, " "), want)
	}
	if list, err := ta.c.List(ctx, "a/b/c.txt", false); err != nil || len(list) != 1 || list[0].Name != "c.txt" {
		t.Errorf("list of a file: %v %v", list, err)
	}

	// Errors.
	checks := []struct {
		name string
		err  error
		code string
	}{
		{"read missing", readErr(ta, ctx, "nope"), agent.CodeNotFound},
		{"read dir", readErr(ta, ctx, "a"), agent.CodeIsDir},
		{"list missing", listErr(ta, ctx, "nope"), agent.CodeNotFound},
		{"write over dir", ta.c.WriteFile(ctx, "a/b", 0, strings.NewReader("x")), agent.CodeIsDir},
		{"write under file", ta.c.WriteFile(ctx, "a/b/c.txt/d", 0, strings.NewReader("x")), agent.CodeNotDir},
		{"remove non-empty", ta.c.Remove(ctx, "a", false), agent.CodeNotEmpty},
		{"remove missing", ta.c.Remove(ctx, "nope", false), agent.CodeNotFound},
		{"remove root", ta.c.Remove(ctx, "/workspace", true), agent.CodeInvalid},
	}
	for _, c := range checks {
		if !agent.IsCode(c.err, c.code) {
			t.Errorf("%s: %v, want %s", c.name, c.err, c.code)
		}
	}

	// Removing a symlink removes the link, never its target.
	if err := ta.c.Remove(ctx, "a/link", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ta.ws, "a/b/c.txt")); err != nil {
		t.Errorf("target gone: %v", err)
	}
	if err := ta.c.Remove(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ta.ws, "a")); !os.IsNotExist(err) {
		t.Errorf("a still there: %v", err)
	}
	entries, _ := os.ReadDir(ta.ws)
	if len(entries) != 0 {
		t.Errorf("workspace not empty: %v", entries)
	}
}

func readErr(ta *testAgent, ctx context.Context, p string) error {
	rc, err := ta.c.ReadFile(ctx, p)
	if err == nil {
		rc.Close()
	}
	return err
}

func listErr(ta *testAgent, ctx context.Context, p string) error {
	_, err := ta.c.List(ctx, p, false)
	return err
}

func TestFilesEscapesRefused(t *testing.T) {
	ta := startAgent(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644)
	os.Symlink("/etc", filepath.Join(ta.ws, "etc"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ta.ws, "secret"))
	os.Symlink("../"+filepath.Base(outside), filepath.Join(ta.ws, "up"))
	os.Symlink(outside, filepath.Join(ta.ws, "outdir"))
	for _, p := range []string{"../x", "/etc/passwd", "/workspace/../etc/passwd", "etc/passwd", "secret", "up/secret", "outdir/secret", ta.ws + "/../x"} {
		if err := readErr(ta, ctx, p); !agent.IsCode(err, agent.CodePathOutside) {
			t.Errorf("read %q: %v, want %s", p, err, agent.CodePathOutside)
		}
		if _, err := ta.c.List(ctx, p, false); !agent.IsCode(err, agent.CodePathOutside) {
			t.Errorf("list %q: %v", p, err)
		}
	}
	for _, p := range []string{"outdir/new", "etc/lbb-test", "up/new", "../new"} {
		if err := ta.c.WriteFile(ctx, p, 0, strings.NewReader("x")); !agent.IsCode(err, agent.CodePathOutside) {
			t.Errorf("write %q: %v", p, err)
		}
		if err := ta.c.Mkdir(ctx, p+"/d"); !agent.IsCode(err, agent.CodePathOutside) {
			t.Errorf("mkdir %q: %v", p, err)
		}
		if err := ta.c.Remove(ctx, p+"/secret", true); !agent.IsCode(err, agent.CodePathOutside) {
			t.Errorf("remove %q: %v", p, err)
		}
	}
	// Writing over a symlink that points outside replaces the link, and nothing outside.
	if err := ta.c.WriteFile(ctx, "secret", 0, strings.NewReader("mine")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Errorf("outside file changed to %q", b)
	}
	// Recursive delete of a dir holding a symlink to outside keeps outside intact.
	os.MkdirAll(filepath.Join(ta.ws, "d"), 0o755)
	os.Symlink(outside, filepath.Join(ta.ws, "d/out"))
	if err := ta.c.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("outside file removed: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
}

func TestLargeFileRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MiB file")
	}
	ta := startAgent(t)
	ctx := ctxT(t)
	const size = 100 << 20
	data := make([]byte, size)
	rand.Read(data)
	sum := sha256.Sum256(data)
	start := time.Now()
	if err := ta.c.WriteFile(ctx, "big.bin", 0, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	up := time.Since(start)
	start = time.Now()
	got, n, err := testkit.Digest(t)(ta.c.ReadFile(ctx, "big.bin"))
	down := time.Since(start)
	if want := hex.EncodeToString(sum[:]); err != nil || n != size || got != want {
		t.Fatalf("read back %d bytes, err %v, sha256 %s, want %s", n, err, got, want)
	}
	t.Logf("100 MiB: write %v (%.0f MiB/s), read %v (%.0f MiB/s); agent peak RSS %d KiB",
		up, 100/up.Seconds(), down, 100/down.Seconds(), vmHWM(t, ta.cmd.Process.Pid))
}

func TestIdentity(t *testing.T) {
	ta := startAgent(t)
	host, _ := os.Hostname()
	err := ta.c.SetIdentity(ctxT(t), agent.Identity{Hostname: "sbx-test", MachineID: "0123456789abcdef0123456789abcdef", Seed: []byte("fresh entropy")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ta.etc, "hostname")); string(b) != "sbx-test\n" {
		t.Errorf("hostname file %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ta.etc, "machine-id")); string(b) != "0123456789abcdef0123456789abcdef\n" {
		t.Errorf("machine-id file %q", b)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host was renamed to %q", h)
	}
	if err := ta.c.SetIdentity(ctxT(t), agent.Identity{MachineID: "xyz"}); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("bad machine id: %v", err)
	}
}

func TestAgentExitsWhenChannelCloses(t *testing.T) {
	ta := startAgent(t)
	var out testkit.Buffer
	p, err := ta.c.Exec(context.Background(), agent.ExecRequest{Argv: []string{"sh", "-c", "echo $$; sleep 100"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go p.Wait(&out, nil)
	for !strings.Contains(out.String(), "\n") {
		time.Sleep(5 * time.Millisecond)
	}
	ta.c.Close()
	if !ta.waitExit() {
		t.Fatal("the agent did not exit")
	}
	waitGone(t, firstLinePid(t, out.String()))
}

// run is a helper for harness tests.
func (ta *testAgent) run(t *testing.T, req agent.RunRequest) (string, string, agent.Exit) {
	t.Helper()
	return agenttest.Run(ctxT(t), t, ta.c, req)
}

// wantResult runs req and fails t unless it ends OK with the result want (JSON, as sent).
func (ta *testAgent) wantResult(t *testing.T, what string, req agent.RunRequest, want string) {
	t.Helper()
	_, errOut, ex := ta.run(t, req)
	if !ex.OK || string(ex.Result) != want {
		t.Errorf("%s: %+v, want result %s\nstderr: %s", what, ex, want, errOut)
	}
}

// startPython is startAgent for a test that needs python3 on this host.
func startPython(t *testing.T) *testAgent {
	t.Helper()
	hasProgram(t, "python3")
	return startAgent(t)
}

func hasProgram(t *testing.T, name string) {
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not on this host", name)
	}
}

type runCase struct {
	name   string
	code   string
	input  string
	config string
	ok     bool
	result string // JSON, compared after normalising
	errHas string
	stdout string
	stderr string // substring
}

func checkRuns(t *testing.T, ta *testAgent, lang string, cases []runCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, ex := ta.run(t, agent.RunRequest{ID: "run_" + c.name, Language: lang, Code: c.code, Input: json.RawMessage(c.input), Config: json.RawMessage(c.config), TimeoutMs: 20000})
			if ex.OK != c.ok {
				t.Fatalf("ok %v, want %v: %+v\nstdout %s\nstderr %s", ex.OK, c.ok, ex, out, errOut)
			}
			if c.ok && !jsonEqual(ex.Result, c.result) {
				t.Errorf("result %s, want %s", ex.Result, c.result)
			}
			if !strings.Contains(ex.Error, c.errHas) {
				t.Errorf("error %q, want it to hold %q", ex.Error, c.errHas)
			}
			if c.stdout != "" && out != c.stdout {
				t.Errorf("stdout %q, want %q", out, c.stdout)
			}
			if !strings.Contains(errOut, c.stderr) {
				t.Errorf("stderr %q, want it to hold %q", errOut, c.stderr)
			}
		})
	}
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestRunPython(t *testing.T) {
	ta := startPython(t)
	checkRuns(t, ta, agent.LangPython, []runCase{
		{name: "sum", code: "def run(input, config):\n    return sum(input)", input: "[1,2,3]", ok: true, result: "6"},
		{name: "print and config", code: "def run(input, config):\n    print('hi', input)\n    return {'k': config['k'], 'n': None}", input: `"x"`, config: `{"k": [1.5]}`, ok: true, result: `{"k":[1.5],"n":null}`, stdout: "hi x\n"},
		{name: "defaults", code: "def run(input, config):\n    return [input, config]", ok: true, result: `[null,{}]`},
		{name: "async", code: "import asyncio\nasync def run(input, config):\n    await asyncio.sleep(0.01)\n    return input * 2", input: "21", ok: true, result: "42"},
		{name: "raise", code: "def helper():\n    return 1 / 0\n\ndef run(input, config):\n    return helper()", ok: false, errHas: "ZeroDivisionError: division by zero", stderr: "line 2, in helper"},
		{name: "no run", code: "x = 1", ok: false, errHas: "no run(input, config)"},
		{name: "syntax", code: "def run(:", ok: false, errHas: "SyntaxError"},
		{name: "nan and set and tuple", code: "def run(input, config):\n    return {'nan': float('nan'), 's': {1}, 't': (1, 2), 1: 'int key'}", ok: true, result: `{"nan":null,"s":[1],"t":[1,2],"1":"int key"}`},
		{name: "not json", code: "def run(input, config):\n    return {'a': [1, object()]}", ok: false, errHas: "the result is not JSON: a value of type object at $.a[1]"},
		{name: "datetime", code: "import datetime\ndef run(input, config):\n    return datetime.date(2024, 1, 2)", ok: true, result: `"2024-01-02"`},
		{name: "main block does not run", code: "def run(input, config):\n    return __name__\nif __name__ == '__main__':\n    raise SystemExit(9)", ok: true, result: `"__lbb__"`},
		{name: "exit", code: "import sys\ndef run(input, config):\n    sys.exit(4)", ok: false, errHas: "SystemExit"},
		{name: "unicode", code: "def run(input, config):\n    return 'héllo \\ud800'", ok: true, result: `"héllo \ud800"`},
		{name: "big result", code: "def run(input, config):\n    return 'x' * 300000", ok: true, result: `"` + strings.Repeat("x", 300000) + `"`},
	})
}

func TestRunPythonNumpyPandas(t *testing.T) {
	if exec.Command("python3", "-c", "import numpy, pandas").Run() != nil {
		t.Skip("numpy and pandas are not on this host's python3; the conformance suite covers them in the image")
	}
	ta := startAgent(t)
	checkRuns(t, ta, agent.LangPython, []runCase{
		{name: "numpy", code: "import numpy as np\ndef run(input, config):\n    a = np.array(input)\n    return {'sum': a.sum(), 'arr': a * 2, 'mean': np.float64('nan'), 'b': np.bool_(True)}", input: "[1,2,3]", ok: true, result: `{"sum":6,"arr":[2,4,6],"mean":null,"b":true}`},
		{name: "dataframe", code: "import pandas as pd\ndef run(input, config):\n    return pd.DataFrame({'a': [1, 2], 'b': [0.5, None], 't': pd.to_datetime(['2024-01-01', '2024-01-02'])})", ok: true, result: `[{"a":1,"b":0.5,"t":"2024-01-01T00:00:00"},{"a":2,"b":null,"t":"2024-01-02T00:00:00"}]`},
		{name: "series", code: "import pandas as pd\ndef run(input, config):\n    return pd.Series([3, 4], index=['x', 'y'])", ok: true, result: `{"x":3,"y":4}`},
	})
}

func TestRunPythonDoesNotImportNumpy(t *testing.T) {
	ta := startPython(t)
	ta.wantResult(t, "modules imported", agent.RunRequest{Language: "python", Code: "import sys\ndef run(input, config):\n    return [m for m in ('numpy', 'pandas', 'asyncio') if m in sys.modules]"}, "[]")
}

func TestRunNode(t *testing.T) {
	hasProgram(t, "node")
	ta := startAgent(t)
	checkRuns(t, ta, agent.LangNode, []runCase{
		{name: "script", code: "function run(input, config) {\n  console.log('hi');\n  return input.reduce((a, b) => a + b, 0);\n}", input: "[1,2,3]", ok: true, result: "6", stdout: "hi\n"},
		{name: "async script", code: "async function run(input, config) {\n  await new Promise(r => setTimeout(r, 10));\n  return {x: input, c: config};\n}", input: `"a"`, ok: true, result: `{"x":"a","c":{}}`},
		{name: "arrow const", code: "const run = (input) => input * 2;", input: "4", ok: true, result: "8"},
		{name: "module.exports", code: "module.exports.run = (input) => 'cjs:' + input;", input: `"x"`, ok: true, result: `"cjs:x"`},
		{name: "dynamic import", code: "async function run() { const p = await import('node:path'); return p.join('a', 'b'); }", ok: true, result: `"a/b"`},
		{name: "require", code: "const path = require('path');\nfunction run() { return path.join('a', 'b'); }", ok: true, result: `"a/b"`},
		{name: "esm export", code: "import { join } from 'node:path';\nexport function run(input) { return join('x', input); }", input: `"y"`, ok: true, result: `"x/y"`},
		{name: "esm default async", code: "export default async function (input, config) { return [input, config]; }", config: `{"a":1}`, ok: true, result: `[null,{"a":1}]`},
		{name: "esm top-level await", code: "const v = await Promise.resolve(5);\nexport const run = () => v;", ok: true, result: "5"},
		{name: "throw", code: "function inner() { throw new TypeError('bad thing'); }\nfunction run() { inner(); }", ok: false, errHas: "TypeError: bad thing", stderr: "at inner"},
		{name: "reject", code: "async function run() { throw new Error('nope'); }", ok: false, errHas: "Error: nope"},
		{name: "no run", code: "const x = 1;", ok: false, errHas: "no run(input, config)"},
		{name: "syntax", code: "function run( {", ok: false, errHas: "SyntaxError"},
		{name: "bigint", code: "function run() { return 1n; }", ok: false, errHas: "not JSON"},
		{name: "undefined", code: "function run() {}", ok: true, result: "null"},
		{name: "timer left open", code: "function run() { setInterval(() => {}, 1000); return 1; }", ok: true, result: "1"},
	})
	entries, _ := os.ReadDir(ta.ws)
	if len(entries) != 0 {
		t.Errorf("the workspace holds %v after module runs", entries)
	}
}

func TestRunShell(t *testing.T) {
	hasProgram(t, "bash")
	ta := startAgent(t)
	checkRuns(t, ta, agent.LangShell, []runCase{
		{name: "json", code: `echo "{\"in\": $LBB_INPUT, \"cfg\": $LBB_CONFIG}" > "$LBB_RESULT"`, input: "[1,2]", config: `{"a":1}`, ok: true, result: `{"in":[1,2],"cfg":{"a":1}}`},
		{name: "stdin", code: `cat > "$LBB_RESULT"`, input: `{"x": 1}`, ok: true, result: `{"x":1}`},
		{name: "input file", code: `cp "$LBB_INPUT_FILE" "$LBB_RESULT"`, input: `[3]`, ok: true, result: `[3]`},
		{name: "string", code: `echo hello world > "$LBB_RESULT"; echo printed`, ok: true, result: `"hello world"`, stdout: "printed\n"},
		{name: "nothing", code: `true`, ok: true, result: `null`},
		{name: "fails", code: `echo oops >&2; exit 2`, ok: false, errHas: "exit code 2", stderr: "oops"},
	})
}

func TestRunTimeout(t *testing.T) {
	ta := startPython(t)
	_, _, ex := ta.run(t, agent.RunRequest{Language: "python", Code: "import time\ndef run(i, c):\n    time.sleep(100)", TimeoutMs: 300})
	if ex.OK || !ex.TimedOut || !strings.Contains(ex.Error, "timed out") {
		t.Errorf("%+v", ex)
	}
}

func TestRunBadLanguage(t *testing.T) {
	ta := startAgent(t)
	if _, err := ta.c.Run(ctxT(t), agent.RunRequest{Language: "cobol"}); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("%v", err)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	ta := startAgent(b)
	for b.Loop() {
		_, _, ex := ta.exec(b, agent.ExecRequest{Argv: []string{"/bin/true"}}, nil)
		if ex.ExitCode != 0 {
			b.Fatal(ex)
		}
	}
}

func BenchmarkPing(b *testing.B) {
	ta := startAgent(b)
	ctx := context.Background()
	for b.Loop() {
		if err := ta.c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareForkExec is the baseline for BenchmarkExecTrue: the same /bin/true, started
// directly by this process.
func BenchmarkBareForkExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDiskFull(t *testing.T) {
	testkit.RequiresRoot(t) // to mount a small tmpfs
	ws := t.TempDir()
	if err := syscall.Mount("tmpfs", ws, "tmpfs", 0, "size=1m"); err != nil {
		testkit.SkipPrivileged(t, "cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(ws, syscall.MNT_DETACH) })
	ta := startAgentIn(t, ws)
	ctx := ctxT(t)
	err := ta.c.WriteFile(ctx, "big", 0, bytes.NewReader(make([]byte, 2<<20)))
	if !agent.IsCode(err, agent.CodeDiskFull) {
		t.Errorf("writing 2 MiB to a 1 MiB disk: %v, want %s", err, agent.CodeDiskFull)
	}
	if entries, _ := os.ReadDir(ws); len(entries) != 0 {
		t.Errorf("the failed upload left %v", entries)
	}
	_, _, ex := ta.exec(t, agent.ExecRequest{Argv: []string{"sh", "-c", "head -c 2000000 /dev/zero > fill"}}, nil)
	if ex.ExitCode == 0 || !ex.DiskFull {
		t.Errorf("exit %+v, want a failure with disk_full", ex)
	}
	os.Remove(filepath.Join(ws, "fill"))
	if _, _, ex := ta.exec(t, agent.ExecRequest{Argv: []string{"true"}}, nil); ex.DiskFull {
		t.Errorf("disk full after freeing it: %+v", ex)
	}
}

func TestNoDescriptorLeaks(t *testing.T) {
	ta := startAgent(t)
	out, _, ex := ta.exec(t, agent.ExecRequest{Argv: []string{"sh", "-c", `for f in /proc/$$/fd/*; do echo "$f $(readlink $f)"; done`}}, nil)
	if ex.ExitCode != 0 {
		t.Fatalf("%+v", ex)
	}
	if strings.Contains(out, "socket:") {
		t.Errorf("a process sees a socket (the channel?):\n%s", out)
	}
	hasProgram(t, "python3")
	_, _, ex = ta.run(t, agent.RunRequest{Language: "python", Code: "import os, subprocess\ndef run(i, c):\n    return subprocess.run(['ls', '/proc/self/fd'], capture_output=True, text=True).stdout.split()"})
	var fds []string
	json.Unmarshal(ex.Result, &fds)
	if !ex.OK || len(fds) > 4 { // 0, 1, 2 and ls's own directory
		t.Errorf("a child of a run sees fds %v (%+v)", fds, ex)
	}
}

func TestWaitReady(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	conn, err := net.FileConn(a)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := agent.WaitReady(ctx, conn); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent peer: %v, want a deadline error", err)
	}
	b.Write([]byte(agent.Hello))
	if err := agent.WaitReady(context.Background(), conn); err != nil {
		t.Errorf("after hello: %v", err)
	}
	// Peeking consumed nothing.
	buf := make([]byte, len(agent.Hello))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != agent.Hello {
		t.Errorf("read %q %v", buf, err)
	}
	b.Close()
	if err := agent.WaitReady(context.Background(), conn); !errors.Is(err, io.EOF) {
		t.Errorf("closed peer: %v, want EOF", err)
	}
}

// BenchmarkRunPython is a cold run(input, config) of a sum; compare BenchmarkBarePython.
func BenchmarkRunPython(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3")
	}
	ta := startAgent(b)
	for b.Loop() {
		ta.runSum(b)
	}
}

// runSum is the run the python benchmarks time: a sum of three numbers.
func (ta *testAgent) runSum(b *testing.B) {
	p, err := ta.c.Run(context.Background(), agent.RunRequest{Language: "python", Code: "def run(input, config):\n    return sum(input)", Input: json.RawMessage("[1,2,3]")})
	if err != nil {
		b.Fatal(err)
	}
	if ex, err := p.Wait(nil, nil); err != nil || !ex.OK {
		b.Fatal(ex, err)
	}
}

func BenchmarkBarePython(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3")
	}
	for b.Loop() {
		if err := exec.Command("python3", "-c", "import json; print(sum(json.loads('[1,2,3]')))").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// A read carries exactly the size the agent announced when it opened the file: bytes
// appended meanwhile are not sent (no "wrote more than the declared Content-Length"), and a
// file cut short meanwhile breaks the stream off instead of ending it short.
func TestReadFileChangingUnderneath(t *testing.T) {
	ta := startAgent(t)
	ctx := ctxT(t)
	const size = 64 << 20 // more than the stream's flow-control window: the agent is still sending when the file changes
	if err := ta.c.WriteFile(ctx, "grow.bin", 0, bytes.NewReader(make([]byte, size))); err != nil {
		t.Fatal(err)
	}
	rc, err := ta.c.ReadFile(ctx, "grow.bin")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Size != size {
		t.Fatalf("size %d, want %d", rc.Size, size)
	}
	f, err := os.OpenFile(filepath.Join(ta.ws, "grow.bin"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 1<<20))
	f.Close()
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != size {
		t.Fatalf("a file grown while read: %d bytes, %v; want %d", n, err, size)
	}

	rc, err = ta.c.ReadFile(ctx, "grow.bin")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(ta.ws, "grow.bin"), 1<<20); err != nil {
		t.Fatal(err)
	}
	n, err = io.Copy(io.Discard, rc)
	rc.Close()
	if err == nil {
		t.Fatalf("a file cut short while read ended cleanly after %d of %d bytes", n, rc.Size)
	}
}

// A port connect (a preview's) never reaches the agent's own listeners: they are the way out
// of the sandbox's programs, the API's carrying the sandbox's grant. Once the Listen call
// ends, the port is nobody's.
func TestPortConnectNotOwnListeners(t *testing.T) {
	ta := startAgent(t)
	ctx := ctxT(t)
	l, err := ta.c.Listen(ctx, agent.ListenRequest{Proxy: "127.0.0.1:0", SOCKS: "127.0.0.1:0", API: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, addr := range []string{l.Bound.Proxy, l.Bound.SOCKS, l.Bound.API} {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			t.Fatalf("bound %q: %v", addr, err)
		}
		ports = append(ports, int(ap.Port()))
		if st, err := ta.c.DialPort(ctx, int(ap.Port())); !agent.IsCode(err, agent.CodePermission) {
			if st != nil {
				st.Close()
			}
			t.Errorf("connect to the agent's listener %s: %v, want %s", addr, err, agent.CodePermission)
		}
	}
	l.Close()
	deadline := time.Now().Add(5 * time.Second)
	for _, port := range ports {
		for {
			_, err := ta.c.DialPort(ctx, port)
			if agent.IsCode(err, agent.CodePortRefused) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("connect to port %d after the Listen call: %v, want %s", port, err, agent.CodePortRefused)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
