//go:build linux

package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

// runscPath is $LBB_RUNSC, else where scripts/install-runsc.sh puts it.
func runscPath() string {
	if p := os.Getenv("LBB_RUNSC"); p != "" {
		return p
	}
	return gvisor.DefaultRunsc
}

// requires skips a test that cannot run here, saying why.
func requires(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("the runtime suites start real sandboxes; skipped in -short mode")
	}
	testkit.RequiresRoot(t)
	testkit.RequiresRunsc(t, runscPath())
}

// newConfig is a driver configuration on a fresh state directory.
func newConfig(t testing.TB) gvisor.Config {
	return gvisor.Config{
		StateDir:     runtimetest.StateDir(t),
		Runsc:        runscPath(),
		AgentPath:    testkit.Agent(t),
		CgroupParent: "lbb-gvisor-test",
		DebugLogDir:  os.Getenv("LBB_RUNSC_DEBUG_DIR"),
		Logger:       runtimetest.Logger(),
	}
}

func TestRuntime(t *testing.T) {
	requires(t)
	cfg := newConfig(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Driver { return gvisor.New(cfg) }, runtimetest.Options{
		Leftovers: func(id string) []string { return gvisor.New(cfg).Leftovers(id) },
		HostFiles: []string{cfg.AgentPath, cfg.Runsc, filepath.Join(cfg.StateDir, ".agent", "*"),
			filepath.Join(cfg.StateDir, ".seccomp", "*")},
		StateDirsOf: func(id string) []string { return []string{filepath.Join(cfg.StateDir, id)} },
		HostIDs:     gvisor.New(cfg).HostIDs,
		SharedIDs:   idmap.Check(runtimetest.FindImage(t)) != nil,
	})
}

// newDriver skips a test that cannot run here (requires), then answers a driver on
// newConfig whose requirements hold, and the base image.
func newDriver(t testing.TB) (*gvisor.Driver, string) {
	t.Helper()
	requires(t)
	img := runtimetest.FindImage(t)
	d := gvisor.New(newConfig(t))
	if err := runtime.CheckRequirements(d); err != nil {
		t.Fatal(err)
	}
	return d, img
}

// box is a started sandbox with a client for the tests of this file.
type box struct {
	t  testing.TB
	id string
	sb runtime.Sandbox
	c  *agent.Client
}

func start(t testing.TB, d *gvisor.Driver, sb runtime.Sandbox, err error) *box {
	t.Helper()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &box{t: t, id: sb.ID(), sb: sb, c: c}
}

// boot creates sandbox spec and starts it; it is destroyed (and checked for leftovers) when
// the test ends.
func boot(t testing.TB, ctx context.Context, d *gvisor.Driver, spec runtime.Spec) *box {
	t.Helper()
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyed(t, d, spec.ID) })
	sb, err := d.Start(ctx, spec.ID)
	return start(t, d, sb, err)
}

// sh runs script and answers its stdout; it fails the test unless the script exits 0.
func (b *box) sh(script string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("c%d", time.Now().UnixNano()), Argv: []string{"/bin/sh", "-c", script}}, nil)
	if err != nil {
		b.t.Fatalf("exec %q: %v", script, err)
	}
	var out, errb strings.Builder
	ex, err := p.Wait(&out, &errb)
	if err != nil || ex.ExitCode != 0 || ex.StartError != "" {
		b.t.Fatalf("%q: %+v %v\nstdout: %s\nstderr: %s", script, ex, err, out.String(), errb.String())
	}
	return out.String()
}

func destroyed(t testing.TB, d *gvisor.Driver, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("destroy %s: %v", id, err)
	}
	for _, l := range d.Leftovers(id) {
		t.Errorf("after destroy of %s: %s", id, l)
	}
}

func TestSmoke(t *testing.T) {
	d, img := newDriver(t)
	ctx := context.Background()
	id := "sbx_smoke"
	t0 := time.Now()
	b := boot(t, ctx, d, runtime.Spec{ID: id, Image: img})
	t.Logf("created and started in %v", time.Since(t0))
	t.Log(b.sh("id; uname -a; cat /proc/self/status | grep -E 'Cap|Seccomp|NoNew'; ls -la / /workspace /.lbb; df -h /workspace /tmp; echo hi > /workspace/f"))
	st, err := b.sb.Stats(ctx)
	t.Logf("stats %+v %v", st, err)
	if err := d.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	sb, err := d.Start(ctx, id)
	start(t, d, sb, err).shows("cat /workspace/f", "hi\n", "after restart")
}

// server is a Python process that holds a random value in memory only and answers it, with a
// count of the questions so far, on 127.0.0.1:7777. It left the agent's process group, so it
// outlives the command that started it, as a background server does.
const server = `setsid python3 -c '
import os, socket
v = os.urandom(8).hex()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen()
n = 0
while True:
    c, _ = s.accept(); n += 1
    c.sendall(("%s %d" % (v, n)).encode()); c.close()
' </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 7777)).close()' 2>/dev/null && break; sleep 0.05; done`

// answers fails the test unless the server (who) answers value v and count n.
func (b *box) answers(who, v string, n int) {
	b.t.Helper()
	if v2, n2 := b.ask(); v2 != v || n2 != n {
		b.t.Errorf("%s says %s %d, want %s %d", who, v2, n2, v, n)
	}
}

// shows fails the test unless script prints want.
func (b *box) shows(script, want, what string) {
	b.t.Helper()
	if out := b.sh(script); out != want {
		b.t.Errorf("%s: %q", what, out)
	}
}

// ask asks the server, and answers its value and count.
func (b *box) ask() (string, int) {
	b.t.Helper()
	out := b.sh(`python3 -c 'import socket; print(socket.create_connection(("127.0.0.1", 7777)).recv(100).decode())'`)
	var v string
	var n int
	if _, err := fmt.Sscan(out, &v, &n); err != nil {
		b.t.Fatalf("the server said %q: %v", out, err)
	}
	return v, n
}

// TestCheckpoint checks that a checkpoint keeps memory and processes: a Python process's
// in-memory value survives a restore of the same sandbox and is the same in a fork restored
// from the same checkpoint, each going on from the checkpoint's state; the workspaces go
// their own ways.
func TestCheckpoint(t *testing.T) {
	d, img := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const a, f = "sbx_cp_a", "sbx_cp_fork"
	b := boot(t, ctx, d, runtime.Spec{ID: a, Image: img, Limits: runtime.Limits{MemoryMiB: 512, TmpMiB: 128}})
	defer destroyed(t, d, f)
	sb := b.sb
	b.sh(server)
	b.sh("echo before > /workspace/f; head -c 100000000 /dev/urandom > /tmp/big")
	v, n := b.ask()
	t.Logf("the server holds %s (asked %d times)", v, n)

	dir := filepath.Join(t.TempDir(), "cp")
	t0 := time.Now()
	if err := d.Checkpoint(ctx, a, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint (100 MB in /tmp): %v", time.Since(t0))
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Error("Done not closed after Checkpoint")
	}
	if pid := sb.(interface{ InitPID() int }).InitPID(); syscall.Kill(pid, 0) == nil {
		t.Errorf("the Sentry %d survives Checkpoint", pid)
	}

	restore := func(id, what string) *box {
		t.Helper()
		t0 := time.Now()
		sb, err := d.Restore(ctx, id, dir)
		b := start(t, d, sb, err)
		t.Logf("%s: %v", what, time.Since(t0))
		return b
	}
	b = restore(a, "restore")
	b.answers("after restore the server", v, n+1)
	b.shows("cat /workspace/f; wc -c < /tmp/big", "before\n100000000\n", "after restore")
	b.sh("echo a > /workspace/f")

	fb := restore(f, "fork")
	fb.answers("the fork's server", v, n+1)
	fb.shows("cat /workspace/f", "before\n", "the fork's workspace")
	fb.sh("echo fork > /workspace/f")
	b.shows("cat /workspace/f", "a\n", "the fork wrote into the original's workspace")
	b.answers("the original's server", v, n+2)
	// A restore into a sandbox that runs is refused; a second fork from the same checkpoint works.
	if _, err := d.Restore(ctx, a, dir); err == nil {
		t.Error("Restore of a started sandbox succeeded")
	}
}

// TestFailedStart checks that a start that fails (an agent that exits at once) leaves no
// process, mount, cgroup or runsc state, and that the sandbox can be destroyed.
func TestFailedStart(t *testing.T) {
	requires(t)
	img := runtimetest.FindImage(t)
	cfg := newConfig(t)
	// A dynamically linked program runs on the image's libc: it exits 1 without a word.
	cfg.AgentPath = filepath.Join(t.TempDir(), "false")
	b, err := os.ReadFile("/bin/false")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(cfg.AgentPath, b, 0o755); err != nil {
		t.Fatal(err)
	}
	d := gvisor.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const id = "sbx_failed"
	if err := d.Create(ctx, runtime.Spec{ID: id, Image: img}); err != nil {
		t.Fatal(err)
	}
	defer destroyed(t, d, id)
	if _, err := d.Start(ctx, id); err == nil {
		t.Fatal("a start whose agent exits succeeded")
	} else {
		t.Logf("start: %v", err)
	}
	for _, l := range d.Leftovers(id) {
		// The sandbox exists (created): its state directory and host ids stay.
		if !strings.HasPrefix(l, "state directory") && !strings.HasPrefix(l, "host ids") {
			t.Errorf("after a failed start: %s", l)
		}
	}
}
