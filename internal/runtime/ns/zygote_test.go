//go:build linux

package ns_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// probePy reports what a run sees of its interpreter's privileges and state.
const probePy = `
import os, random
def run(input, config):
    st = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k.startswith("Cap") or k in ("NoNewPrivs", "Seccomp", "Seccomp_filters", "Uid", "Gid"):
            st[k] = v.strip()
    try:
        open("/etc/lbb-zygote-probe", "w").close()
        outside = "written"
    except OSError as e:
        outside = type(e).__name__
    try:
        os.setns(os.open("/proc/1/ns/net", os.O_RDONLY), 0)
        setns = "allowed"
    except OSError as e:
        setns = e.errno
    import numpy, pandas
    return {"status": st, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")), "ppid": os.getppid(),
            "random": random.random(), "np": float(numpy.random.random()), "outside": outside, "setns": setns,
            "pandas": int(pandas.DataFrame({"a": [1, 2, 3]})["a"].sum()), "pid": os.getpid(),
            "hostname": os.uname().nodename, "cwd": os.getcwd()}
`

type probe struct {
	Status   map[string]string `json:"status"`
	FDs      []int             `json:"fds"`
	PPid     int               `json:"ppid"`
	Random   float64           `json:"random"`
	NP       float64           `json:"np"`
	Outside  string            `json:"outside"`
	Setns    any               `json:"setns"`
	Pandas   int               `json:"pandas"`
	PID      int               `json:"pid"`
	Hostname string            `json:"hostname"`
	Cwd      string            `json:"cwd"`
}

// TestZygote forks interpreters into sandboxes from the image's zygote and checks that what
// runs in one has exactly a normally pre-started interpreter's privileges, fresh PRNG state,
// and leaves nothing behind; and that a killed zygote is started again.
func TestZygote(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real sandboxes")
	}
	testkit.RequiresRoot(t)
	testkit.RequiresUserNS(t)
	img := runtimetest.FindImage(t)
	d := ns.New(ns.Config{StateDir: runtimetest.StateDir(t), AgentPath: testkit.Agent(t), CgroupParent: "lbb-test", Logger: runtimetest.Logger()})
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(t, "%v", err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	n := 0
	// boot starts a sandbox with a pre-started python interpreter of imports (nil: numpy and
	// pandas; empty: the harness alone), forked from the zygote of those imports or not.
	boot := func(fork bool, imports []string) (string, *agent.Client) {
		t.Helper()
		n++
		id := fmt.Sprintf("sbx_zyg%d_%d", os.Getpid(), n)
		if err := d.Create(ctx, runtime.Spec{ID: id, Image: img, Hostname: "zyg"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Destroy(context.Background(), id) })
		sb, err := d.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := agent.NewClient(sb.Conn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		req := agent.PrestartRequest{Language: agent.LangPython, Imports: imports}
		if !fork {
			if err := c.Prestart(ctx, req); err != nil {
				t.Fatal(err)
			}
			return id, c
		}
		req.ZygoteSocket = "lbb-zygote-test-" + id
		forked := make(chan error, 1)
		go func() {
			forked <- d.ForkInterpreter(ctx, id, runtime.ForkRequest{Language: agent.LangPython, Socket: req.ZygoteSocket, Imports: imports})
		}()
		t0 := time.Now()
		if err := c.Prestart(ctx, req); err != nil {
			t.Fatalf("prestart through the zygote: %v (fork: %v)", err, <-forked)
		}
		if err := <-forked; err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: interpreter forked and adopted in %v", id, time.Since(t0))
		return id, c
	}
	run := func(c *agent.Client) probe {
		t.Helper()
		pr, err := c.Run(ctx, agent.RunRequest{Language: agent.LangPython, Code: probePy, Input: []byte("null")})
		if err != nil {
			t.Fatal(err)
		}
		var stderr testkit.Buffer
		ex, err := pr.Wait(nil, &stderr)
		var p probe
		if err != nil || !ex.OK || json.Unmarshal(ex.Result, &p) != nil {
			t.Fatalf("run: %+v %v: %s", ex, err, stderr.String())
		}
		return p
	}

	_, normal := boot(false, nil)
	id1, c1 := boot(true, nil)
	id2, c2 := boot(true, nil)
	want, p1, p2 := run(normal), run(c1), run(c2)
	t.Logf("pre-started: %+v\nforked: %+v\nforked: %+v", want, p1, p2)
	// Lean: the harness alone, from the image's second zygote (the run imports numpy and
	// pandas itself).
	lean := []string{}
	_, normalLean := boot(false, lean)
	id3, c3 := boot(true, lean)
	id4, c4 := boot(true, lean)
	wantLean, p3, p4 := run(normalLean), run(c3), run(c4)
	t.Logf("lean pre-started: %+v\nlean forked: %+v\nlean forked: %+v", wantLean, p3, p4)
	for i, p := range []probe{p1, p2, p3, p4} {
		want := want
		if i >= 2 {
			want = wantLean
		}
		if !reflect.DeepEqual(p.Status, want.Status) {
			t.Errorf("forked interpreter's status %v, want a pre-started one's %v", p.Status, want.Status)
		}
		if p.PPid != 0 {
			t.Errorf("getppid() = %d, want 0 (its parent is outside the sandbox)", p.PPid)
		}
		if p.Outside == "written" || p.Outside != want.Outside {
			t.Errorf("write outside the writable trees: %s, want %s", p.Outside, want.Outside)
		}
		if fmt.Sprint(p.Setns) != fmt.Sprint(want.Setns) || p.Setns == "allowed" {
			t.Errorf("setns: %v, want %v", p.Setns, want.Setns)
		}
		if p.Pandas != 6 || p.Hostname != "zyg" || p.Cwd != want.Cwd {
			t.Errorf("run: %+v", p)
		}
		// Python's own (0-4) plus what the listing opened; as the pre-started one's.
		if !reflect.DeepEqual(p.FDs, want.FDs) {
			t.Errorf("open fds %v, want %v", p.FDs, want.FDs)
		}
	}
	if p1.Random == p2.Random || p1.NP == p2.NP || p3.Random == p4.Random || p3.NP == p4.NP {
		t.Errorf("two forked interpreters share PRNG state: %v %v / %v %v / %v %v / %v %v", p1.Random, p2.Random, p1.NP, p2.NP, p3.Random, p4.Random, p3.NP, p4.NP)
	}
	z, zl := d.Zygote(img, nil), d.Zygote(img, lean)
	if z == nil || z.PID() == 0 || zl == nil || zl.PID() == 0 || zl.PID() == z.PID() {
		t.Fatal("not two zygotes running (full and lean)")
	}
	// Destroying the sandboxes ends the forked interpreters and their parents.
	for _, id := range []string{id1, id2, id3, id4} {
		if err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(z.Children())+len(zl.Children()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if kids := append(z.Children(), zl.Children()...); len(kids) > 0 {
		t.Errorf("the zygotes still have children %v after their sandboxes were destroyed", kids)
	}
	// A zygote killed is started again at the next fork.
	pid := z.PID()
	syscall.Kill(pid, syscall.SIGKILL)
	for z.PID() != 0 && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	_, c5 := boot(true, nil)
	if p5 := run(c5); p5.Pandas != 6 {
		t.Errorf("after a restart: %+v", p5)
	}
	if z.Starts() != 2 || z.PID() == pid {
		t.Errorf("zygote starts %d, pid %d (was %d): want it started again", z.Starts(), z.PID(), pid)
	}
}
