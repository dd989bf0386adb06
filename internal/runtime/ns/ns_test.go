//go:build linux

package ns_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestMain lets this test binary be the sandbox init, as lbb-agent is in production (the
// driver starts the agent binary as the init; this keeps the hook for older callers).
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
	stateDir := runtimetest.StateDir(t)
	cfg := ns.Config{StateDir: stateDir, AgentPath: agentBin, CgroupParent: "lbb-test", Logger: runtimetest.Logger()}
	runtimetest.Run(t, func(t *testing.T) runtime.Driver { return ns.New(cfg) }, runtimetest.Options{
		Leftovers: func(id string) []string { return ns.New(cfg).Leftovers(id) },
		HostFiles: []string{agentBin, filepath.Join(stateDir, ".agent", "*")},
		StateDirsOf: func(id string) []string {
			return []string{filepath.Join(stateDir, id), ns.New(cfg).RunDirOf(id)}
		},
		HostIDs:   ns.New(cfg).HostIDs,
		SharedIDs: idmap.CheckOverlay(runtimetest.FindImage(t)) != nil,
	})
}

// BenchmarkCreateStartExec measures a cold sandbox: create, start, the first exec of
// /bin/true, then destroy (reported separately). children-cpu-ms is the CPU, user and
// system, of the processes this one started and reaped, per sandbox: its init and agent
// (their start, their serving and the teardown of their namespaces at exit) and what they
// ran, and the driver's spawn helper; compare agents with LBB_AGENT.
func BenchmarkCreateStartExec(b *testing.B) {
	testkit.RequiresRoot(b)
	img := runtimetest.FindImage(b)
	d := ns.New(ns.Config{StateDir: runtimetest.StateDir(b), AgentPath: testkit.Agent(b), CgroupParent: "lbb-test", Logger: benchLogger()})
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(b, "%v", err)
	}
	ctx := context.Background()
	var create, start, first, destroy time.Duration
	cpu0 := childrenCPU(b)
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("sbx_bench%d", i)
		cold, err := runtimetest.BootCold(ctx, d, runtime.Spec{ID: id, Image: img})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := d.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		create += cold.Create
		start += cold.Start
		first += cold.FirstExec
		destroy += time.Since(t0)
	}
	// The spawn helper is a child too, reaped only when the driver closes: its CPU counts.
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(float64(create.Microseconds())/n/1000, "create-ms")
	b.ReportMetric(float64(start.Microseconds())/n/1000, "start-ms")
	b.ReportMetric(float64(first.Microseconds())/n/1000, "first-exec-ms")
	b.ReportMetric(float64((create+start+first).Microseconds())/n/1000, "create-to-exec-ms")
	b.ReportMetric(float64(destroy.Microseconds())/n/1000, "destroy-ms")
	b.ReportMetric(float64((childrenCPU(b)-cpu0).Microseconds())/n/1000, "children-cpu-ms")
}

// childrenCPU is the user and system CPU of this process's reaped children.
func childrenCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLogger logs the driver's step timings when LBB_BENCH_DEBUG is set.
func benchLogger() *slog.Logger {
	if os.Getenv("LBB_BENCH_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
