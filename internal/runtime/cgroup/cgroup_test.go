//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestLifecycle(t *testing.T) {
	testkit.RequiresRoot(t) // it creates cgroups
	parent := fmt.Sprintf("lbb-test-%d", os.Getpid())
	m, err := Detect("", parent)
	if err != nil {
		testkit.SkipPrivileged(t, "no usable cgroups: %v", err)
	}
	t.Cleanup(func() {
		for _, p := range m.Paths("x") {
			os.Remove(p[:len(p)-2]) // the parent
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "sbx_cgtest"
	if err := m.Create(name, Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16}); err != nil {
		t.Fatal(err)
	}
	defer m.Remove(ctx, name)
	// The limits hold, the CPU quota over the kernel's default period (v1: only the quota is
	// written), in a parent group Create made on the way.
	limits := map[string]string{"memory.limit_in_bytes": "67108864", "memory.max": "67108864",
		"pids.max": "16", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000", "cpu.max": "50000 100000"}
	seen := 0
	for _, p := range m.Paths(name) {
		for file, want := range limits {
			if b, err := os.ReadFile(filepath.Join(p, file)); err == nil {
				seen++
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("%s/%s = %s, want %s", p, file, got, want)
				}
			}
		}
	}
	if seen < 3 {
		t.Errorf("only %d of the limit files in %v", seen, m.Paths(name))
	}

	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	m.Warm()
	if err := m.Add(name, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// The shell's children fork after the move (or before: wait until both are in).
	deadline := time.Now().Add(5 * time.Second)
	var pids []int
	for time.Now().Before(deadline) {
		pids, _ = m.Procs(name)
		if len(pids) >= 1 && slices.Contains(pids, cmd.Process.Pid) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("procs %v lack %d", pids, cmd.Process.Pid)
	}
	st, err := m.Stats(name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids == 0 { // memory stays charged where it was allocated (v1 moves no charges)
		t.Errorf("stats %+v", st)
	}
	if err := m.SetCPUWeight(name, 2); err != nil {
		t.Fatal(err)
	}
	weighed := 0
	for _, p := range m.Paths(name) {
		for file, want := range map[string]string{"cpu.shares": "20", "cpu.weight": "2"} {
			if b, err := os.ReadFile(filepath.Join(p, file)); err == nil {
				weighed++
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("%s/%s = %s after weight 2, want %s", p, file, got, want)
				}
			}
		}
	}
	if weighed == 0 {
		t.Errorf("no cpu.shares or cpu.weight in %v", m.Paths(name))
	}
	if err := m.Freeze(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := m.Thaw(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(ctx, name); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if pids, _ := m.Procs(name); len(pids) != 0 {
		t.Fatalf("after kill: %v", pids)
	}
	if err := m.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, name); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	for _, p := range m.Paths(name) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind", p)
		}
	}
}

// TestDetectV2 runs v2 detection where a unified hierarchy is mounted: it must either work
// or say which controller is missing (hybrid hosts mount cgroup2 without memory and pids).
func TestDetectV2(t *testing.T) {
	root := "/sys/fs/cgroup/unified"
	if !isCgroup2(root) {
		if !isCgroup2("/sys/fs/cgroup") {
			testkit.SkipPrivileged(t, "no cgroup2 mount")
		}
		root = "/sys/fs/cgroup"
	}
	m, err := Detect(root, "lbb-test-detect")
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("detect on %s: %v", root, err)
		}
		t.Logf("v2 at %s is not usable: %v", root, err)
		return
	}
	if m.Version() != 2 {
		t.Fatalf("version %d", m.Version())
	}
	os.Remove(filepath.Join(root, "lbb-test-detect"))
}
