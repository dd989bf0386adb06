//go:build linux

package ns_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestMain lets this test binary be the sandbox init, as cmd/lbb is in production.
func TestMain(m *testing.M) {
	ns.MaybeInit()
	testkit.Main(m, nil)
}

func TestRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("the runtime suites start real sandboxes; skipped in -short mode")
	}
	testkit.RequiresRoot(t) // rootless mode is not supported
	testkit.RequiresUserNS(t)
	agentBin := testkit.Agent(t)
	stateDir := traversableTempDir(t)
	cfg := ns.Config{StateDir: stateDir, AgentPath: agentBin, CgroupParent: "lbb-test", Logger: testLogger(t)}
	runtimetest.Run(t, func(t *testing.T) runtime.Driver { return ns.New(cfg) }, runtimetest.Options{
		Leftovers: func(id string) []string { return ns.New(cfg).Leftovers(id) },
		HostFiles: []string{agentBin, filepath.Join(stateDir, ".agent", "*")},
	})
}

// traversableTempDir is a fresh state directory whose ancestors the sandbox's ids can search
// (t.TempDir makes them 0700).
func traversableTempDir(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// BenchmarkCreateStartExec measures a cold sandbox: create, start, the first exec of
// /bin/true, then destroy (reported separately).
func BenchmarkCreateStartExec(b *testing.B) {
	testkit.RequiresRoot(b)
	img := runtimetest.FindImage(b)
	stateDir, err := os.MkdirTemp("", "lbb-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(stateDir)
	os.Chmod(stateDir, 0o711)
	agentBin := testkit.Agent(b)
	d := ns.New(ns.Config{StateDir: stateDir, AgentPath: agentBin, CgroupParent: "lbb-test", Logger: benchLogger()})
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(b, "%v", err)
	}
	ctx := context.Background()
	var create, start, first, destroy time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("sbx_bench%d", i)
		t0 := time.Now()
		if err := d.Create(ctx, runtime.Spec{ID: id, Image: img}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sb, err := d.Start(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		c, err := agent.NewClient(sb.Conn())
		if err != nil {
			b.Fatal(err)
		}
		p, err := c.Exec(ctx, agent.ExecRequest{ID: "c", Argv: []string{"/bin/true"}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if ex, err := p.Wait(nil, nil); err != nil || ex.ExitCode != 0 {
			b.Fatal(ex, err)
		}
		t3 := time.Now()
		c.Close()
		if err := d.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		create += t1.Sub(t0)
		start += t2.Sub(t1)
		first += t3.Sub(t2)
		destroy += time.Since(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(create.Microseconds())/n/1000, "create-ms")
	b.ReportMetric(float64(start.Microseconds())/n/1000, "start-ms")
	b.ReportMetric(float64(first.Microseconds())/n/1000, "first-exec-ms")
	b.ReportMetric(float64((create+start+first).Microseconds())/n/1000, "create-to-exec-ms")
	b.ReportMetric(float64(destroy.Microseconds())/n/1000, "destroy-ms")
}

// benchLogger logs the driver's step timings when LBB_BENCH_DEBUG is set.
func benchLogger() *slog.Logger {
	if os.Getenv("LBB_BENCH_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
