//go:build linux

package gvisor_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// TestFigures logs what a gvisor sandbox costs: cold create→first exec, an exec's round trip,
// a cold Python run, idle memory per sandbox, checkpoint and restore. It takes a minute;
// set LBB_FIGURES=1 to run it.
func TestFigures(t *testing.T) {
	requires(t)
	if os.Getenv("LBB_FIGURES") == "" {
		t.Skip("set LBB_FIGURES=1 to measure the gvisor figures")
	}
	img := runtimetest.FindImage(t)
	cfg := newConfig(t)
	cfg.Logger = nil
	d := gvisor.New(cfg)
	if err := runtime.CheckRequirements(d); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	exec := func(c *agent.Client, argv ...string) {
		t.Helper()
		p, err := c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprint("c", time.Now().UnixNano()), Argv: argv}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ex, err := p.Wait(nil, nil); err != nil || ex.ExitCode != 0 {
			t.Fatal(ex, err)
		}
	}

	// Cold: create, start, first exec of /bin/true.
	var cold, create, startT, first []time.Duration
	for i := range 10 {
		id := fmt.Sprintf("sbx_fig_cold%d", i)
		c, err := runtimetest.BootCold(ctx, d, runtime.Spec{ID: id, Image: img})
		if err != nil {
			t.Fatal(err)
		}
		cold, create, startT, first = append(cold, c.Total()), append(create, c.Create), append(startT, c.Start), append(first, c.FirstExec)
		destroyed(t, d, id)
	}
	t.Logf("cold create→first exec: p50 %v (create %v, start %v, first exec %v)", p50(cold), p50(create), p50(startT), p50(first))

	// Warm: exec round trips and cold Python runs in one sandbox.
	id := "sbx_fig_warm"
	b := boot(t, ctx, d, runtime.Spec{ID: id, Image: img})
	var rt, py []time.Duration
	for range 30 {
		t0 := time.Now()
		exec(b.c, "/bin/true")
		rt = append(rt, time.Since(t0))
	}
	for i := range 10 {
		t0 := time.Now()
		p, err := b.c.Run(ctx, agent.RunRequest{ID: fmt.Sprint("r", i), Language: agent.LangPython, Code: "def run(input, config):\n    return input\n", Input: []byte("1")})
		if err != nil {
			t.Fatal(err)
		}
		if ex, err := p.Wait(nil, nil); err != nil || !ex.OK {
			t.Fatal(ex, err)
		}
		py = append(py, time.Since(t0))
	}
	t.Logf("exec round trip (/bin/true): p50 %v; cold python run(): p50 %v", p50(rt), p50(py))

	// Idle memory: five sandboxes, then what their host processes hold and their cgroups count.
	for i := range 5 {
		b := boot(t, ctx, d, runtime.Spec{ID: fmt.Sprintf("sbx_fig_idle%d", i), Image: img})
		sb := b.sb
		exec(b.c, "/bin/true")
		defer func(sb runtime.Sandbox) {
			st, _ := sb.Stats(ctx)
			t.Logf("idle %s: cgroup %d MiB", sb.ID(), st.MemoryBytes>>20)
		}(sb)
		pids := descendants(parentOf(sb.(interface{ InitPID() int }).InitPID()))
		time.Sleep(2 * time.Second)
		rss, pss := memOf(pids)
		t.Logf("idle sandbox %d: %d host processes, RSS %d MiB, PSS %d MiB", i, len(pids), rss>>20, pss>>20)
	}

	// Checkpoint and restore with 100 MB in memory.
	b.sh("python3 -c 'import os; open(\"/tmp/m\", \"wb\").write(os.urandom(50 << 20))'")
	b.sh("setsid python3 -c 'import os, time; x = os.urandom(50 << 20); time.sleep(1e6)' </dev/null >/dev/null 2>&1 &")
	time.Sleep(time.Second)
	for i := range 3 {
		dir := filepath.Join(t.TempDir(), "cp")
		t0 := time.Now()
		if err := d.Checkpoint(ctx, id, dir); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		sb, err := d.Restore(ctx, id, dir)
		b = start(t, d, sb, err)
		exec(b.c, "/bin/true")
		t2 := time.Now()
		fid := fmt.Sprintf("sbx_fig_fork%d", i)
		fsb, err := d.Restore(ctx, fid, dir)
		fb := start(t, d, fsb, err)
		exec(fb.c, "/bin/true")
		t3 := time.Now()
		destroyed(t, d, fid)
		size := dirSize(dir)
		t.Logf("checkpoint (100 MB in use, image %d MiB): %v; restore→first exec: %v; fork→first exec: %v", size>>20, t1.Sub(t0), t2.Sub(t1), t3.Sub(t2))
	}
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// parentOf is pid's parent, 0 when pid is gone.
func parentOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// descendants is pid and every process under it.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		children[parentOf(p)] = append(children[parentOf(p)], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// memOf sums Rss and Pss of pids (smaps_rollup).
func memOf(pids []int) (rss, pss uint64) {
	for _, pid := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			v, _ := strconv.ParseUint(fields[1], 10, 64)
			switch fields[0] {
			case "Rss:":
				rss += v << 10
			case "Pss:":
				pss += v << 10
			}
		}
		f.Close()
	}
	return rss, pss
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}
