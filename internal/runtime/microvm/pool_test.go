//go:build linux

package microvm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// TestPool runs the warm pool on the microvm driver: a slot is booted, its interpreter
// pre-started, and the machine parked (frozen); a claim thaws it and runs Python in the
// pre-started interpreter, on the guest's kernel; the released slot leaves nothing.
func TestPool(t *testing.T) {
	d, img := newDriver(t)
	lim := runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024, TmpMiB: 64}
	p, err := pool.New(pool.Options{
		Driver: d, Log: runtimetest.Logger(), Min: 1, Max: 1, Tick: time.Hour, BuildTimeout: 5 * time.Minute,
		ClaimTimeout: time.Minute,
		Keys:         []pool.Key{{Name: "python", Image: img, Language: agent.LangPython, Limits: lim}},
	})
	if err != nil {
		t.Fatal(err)
	}
	runtimetest.CloseLeavesNothing(t, p, d, d.Leftovers)
	p.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a slot ready in %v", time.Since(t0))
	slots, err := d.List(ctx)
	if err != nil || len(slots) != 1 {
		t.Fatalf("slots %v %v, want 1", slots, err)
	}
	if st := freezerState(t, d.Config().CgroupParent, slots[0]); st != "FROZEN" && st != "1" {
		t.Errorf("the parked slot's QEMU is %q, want frozen", st)
	}

	t1 := time.Now()
	l, err := p.Acquire(ctx, pool.Request{Spec: runtime.Spec{ID: ids.New(ids.Sandbox), Image: img, Limits: lim}, Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	slot := l.Sandbox.ID()
	pr, err := l.Agent.Run(ctx, agent.RunRequest{Language: agent.LangPython, TimeoutMs: 120000, Input: json.RawMessage("[1,2,3]"),
		Code: "import os, sys\ndef run(input, config):\n    return {'sum': sum(input), 'release': os.uname().release, " +
			"'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\\0'), 'numpy': 'numpy' in sys.modules}"})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	ex, err := pr.Wait(nil, &stderr)
	if err != nil || !ex.OK {
		t.Fatalf("run: %+v %v\n%s", ex, err, stderr.String())
	}
	t.Logf("claim and run: %v: %s", time.Since(t1), ex.Result)
	var r struct {
		Sum         int
		Release     string
		Warm, Numpy bool
	}
	json.Unmarshal(ex.Result, &r)
	if r.Sum != 6 || !r.Warm || !r.Numpy || !strings.Contains(r.Release, "cloud-amd64") {
		t.Errorf("the claim ran %+v: want sum 6 in a pre-started interpreter with numpy loaded, on the guest kernel", r)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	for _, left := range d.Leftovers(slot) {
		t.Errorf("after the release of slot %s: %s", slot, left)
	}
	if st := p.Stats(); len(st) != 1 || st[0].Warm != 1 {
		t.Errorf("pool stats %+v: want 1 warm claim", st)
	}
}

// freezerState reads the freezer state of a sandbox's QEMU cgroup (v1 freezer.state, v2
// cgroup.freeze).
func freezerState(t *testing.T, parent, id string) string {
	t.Helper()
	m, err := cgroup.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for ctl, file := range map[string]string{"freezer": "freezer.state", "": "cgroup.freeze"} {
		if mp, ok := m[ctl]; ok {
			if b, err := os.ReadFile(filepath.Join(mp, parent, id, file)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no freezer state for %s", id)
	return ""
}
