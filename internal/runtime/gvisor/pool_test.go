//go:build linux

package gvisor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// poolPy answers what tells two claims apart and whether the interpreter was pre-started.
const poolPy = `import os, random, sys
import numpy as np
def run(input, config):
    return {'sum': sum(input), 'random': random.random(), 'numpy': float(np.random.rand()),
            'urandom': os.urandom(16).hex(),
            'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\0'),
            'preloaded': [m for m in ('numpy', 'pandas') if m in sys.modules]}`

// TestPool runs the warm pool on the gvisor driver: slots are built and parked (runsc pause),
// a claim thaws one and runs Python in the pre-started interpreter, two claims draw different
// random numbers, and a released slot leaves nothing on the host.
func TestPool(t *testing.T) {
	d, img := newDriver(t)
	lim := runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024, TmpMiB: 64}
	p, err := pool.New(pool.Options{
		Driver: d, Log: runtimetest.Logger(), Min: 2, Tick: time.Hour,
		// The default imports: numpy and pandas, loaded while the slot is built.
		Keys: []pool.Key{{Name: "python", Image: img, Language: agent.LangPython, Limits: lim}},
	})
	if err != nil {
		t.Fatal(err)
	}
	runtimetest.CloseLeavesNothing(t, p, d, d.Leftovers)
	p.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("2 slots ready in %v", time.Since(t0))
	// Parked slots are paused: their Sentry runs none of their tasks.
	slots, err := d.List(ctx)
	if err != nil || len(slots) != 2 {
		t.Fatalf("slots %v %v, want 2", slots, err)
	}
	for _, id := range slots {
		if st := runscStatus(t, d, id); st != "paused" {
			t.Errorf("parked slot %s is %q, want paused", id, st)
		}
		// Built in the background: at the lowest CPU weight (runtime.Prioritizer).
		if w := cpuWeight(t, d, id); w != runtime.BackgroundCPUWeight {
			t.Errorf("parked slot %s has CPU weight %d, want %d", id, w, runtime.BackgroundCPUWeight)
		}
	}

	spec := func() runtime.Spec { return runtime.Spec{ID: ids.New(ids.Sandbox), Image: img, Limits: lim} }
	var results []map[string]any
	for i := range 2 {
		t1 := time.Now()
		l, err := p.Acquire(ctx, pool.Request{Spec: spec(), Language: agent.LangPython})
		if err != nil {
			t.Fatal(err)
		}
		claimed := time.Since(t1)
		slotID := l.Sandbox.ID()
		if w := cpuWeight(t, d, slotID); w != runtime.DefaultCPUWeight {
			t.Errorf("claimed slot %s has CPU weight %d, want %d", slotID, w, runtime.DefaultCPUWeight)
		}
		got := poolRun(t, l, poolPy, "[1,2,3]")
		t.Logf("claim %d (slot %s): claimed in %v, claim+run %v: %s", i+1, slotID, claimed, time.Since(t1), got)
		var r map[string]any
		if err := json.Unmarshal(got, &r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
		if r["sum"] != 6.0 {
			t.Errorf("claim %d: sum %v, want 6", i+1, r["sum"])
		}
		if r["warm"] != true {
			t.Errorf("claim %d was not served by a pre-started interpreter: %v", i+1, r)
		}
		if fmt.Sprint(r["preloaded"]) != "[numpy pandas]" {
			t.Errorf("claim %d: pre-loaded modules %v, want numpy and pandas", i+1, r["preloaded"])
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("release: %v", err)
		}
		for _, left := range d.Leftovers(slotID) {
			t.Errorf("after the release of slot %s: %s", slotID, left)
		}
	}
	a, b := results[0], results[1]
	if a["random"] == b["random"] || a["numpy"] == b["numpy"] || a["urandom"] == b["urandom"] {
		t.Errorf("two claims drew the same random numbers: %v %v", a, b)
	}
	st := p.Stats()
	if len(st) != 1 || st[0].Warm != 2 || st[0].Cold != 0 {
		t.Errorf("pool stats %+v: want 2 warm claims, 0 cold", st)
	}
}

// runscStatus asks runsc for the status of sandbox id ("running", "paused", ...).
func runscStatus(t *testing.T, d *gvisor.Driver, id string) string {
	t.Helper()
	cfg := d.Config()
	out, err := exec.Command(cfg.Runsc, "--root="+filepath.Join(cfg.StateDir, ".runsc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	var st struct{ Status string }
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("runsc state %s: %v: %s", id, err, out)
	}
	return st.Status
}

func poolRun(t *testing.T, l *pool.Lease, code, input string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := l.Agent.Run(ctx, agent.RunRequest{Language: agent.LangPython, Code: code, Input: json.RawMessage(input), TimeoutMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ex, err := pr.Wait(&stdout, &stderr)
	if err != nil || !ex.OK {
		t.Fatalf("run: %+v %v\nstdout %s\nstderr %s", ex, err, stdout.String(), stderr.String())
	}
	return ex.Result
}

// cpuWeight reads the CPU weight of sandbox id's cgroup, in cgroup v2's units (v1's
// cpu.shares × 100 / 1024, rounded: 2 reads back as 2).
func cpuWeight(t *testing.T, d *gvisor.Driver, id string) int {
	t.Helper()
	m, err := cgroup.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	if !cgroup.V1(m) {
		v, err := cgroup.ReadUint(filepath.Join(m[""], d.Config().CgroupParent, id, "cpu.weight"))
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	v, err := cgroup.ReadUint(filepath.Join(m["cpu"], d.Config().CgroupParent, id, "cpu.shares"))
	if err != nil {
		t.Fatal(err)
	}
	return int((v*100 + 512) / 1024)
}
