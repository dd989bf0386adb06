//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/hostagent/remote"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestHostKillAndTerm: an `lbb host` killed with SIGKILL holding an ns sandbox (a `sleep` in
// it) leaves its mounts, cgroups and loop device; restarted on the same data directory it
// stops them before it serves, keeping the disk, which the Reap a control plane sends on its
// start removes. An `lbb host` ended with SIGTERM stops its sandboxes itself and leaves
// nothing (process, mount, cgroup, loop device).
func TestHostKillAndTerm(t *testing.T) {
	requireEnv(t)
	dir := filepath.Join(newDataDir(t), "data")
	token, parent := rand.Text(), "lbb-e2e-hostkill"
	log := &testkit.Buffer{}
	start := func() (*proc, *remote.Client) {
		p, url := launch(t, []string{"host", "--listen", "127.0.0.1:0", "--token", token, "--data-dir", dir,
			"--images-dir", imagesDir, "--cgroup-parent", parent}, log, hostLine)
		c, err := remote.NewClient(url, token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return p, c
	}
	defer func() {
		if t.Failed() {
			t.Logf("lbb host log:\n%s", lastLines(log.String(), 40))
		}
	}()

	p, c := start()
	sb1, pid1 := sleepIn(t, c)
	if held := p.end(syscall.SIGKILL); len(held) > 0 {
		t.Logf("after SIGKILL, processes hold lbb host's output: %s", strings.Join(held, "; "))
	}
	// What a SIGKILL leaves until the next start's reap: the sandbox's init (the guest agent
	// ends the commands of a channel that broke), its mounts, cgroups and loop device.
	time.Sleep(2 * time.Second)
	if left := hostLeftovers(dir, parent, sb1, pid1); len(left) == 0 {
		t.Errorf("after SIGKILL, sandbox %s left nothing: was it a real sandbox?", sb1)
	} else {
		t.Logf("after SIGKILL, sandbox %s left: %s", sb1, strings.Join(left, "; "))
	}

	// The restart stops what the earlier life left; its disk stays for the Reap.
	p, c = start()
	if left := hostLeftovers(dir, parent, sb1, pid1); len(left) > 0 {
		t.Errorf("after the restart, sandbox %s left: %s", sb1, strings.Join(left, "; "))
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", sb1, "disk.img")); err != nil {
		t.Errorf("the restart lost the disk of sandbox %s: %v", sb1, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ids, err := c.Sandboxes(ctx)
	if err != nil || !contains(ids, sb1) {
		t.Errorf("the restarted host holds %v (%v), want %s", ids, err, sb1)
	}
	reaped, err := c.Reap(ctx, nil)
	if err != nil || !contains(reaped, sb1) {
		t.Errorf("Reap after the restart: %v %v, want %s", reaped, err, sb1)
	}
	if left := waitLeftovers(dir, parent, sb1, pid1); len(left) > 0 {
		t.Errorf("after the restart's reap, sandbox %s left: %s", sb1, strings.Join(left, "; "))
	}

	cancelledRun(t, c, parent)

	sb2, pid2 := sleepIn(t, c)
	// A control plane holds the event stream open: the host stops without waiting out its
	// grace (30 s) for it.
	events, err := c.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if held := p.end(syscall.SIGTERM); len(held) > 0 {
		t.Errorf("after SIGTERM, processes hold lbb host's output: %s", strings.Join(held, "; "))
	}
	if took := time.Since(t0); took > 15*time.Second {
		t.Errorf("lbb host took %v to stop beside a control plane's event stream", took)
	} else {
		t.Logf("SIGTERM: lbb host stopped in %v", took)
	}
	for range events {
	}
	if left := waitLeftovers(dir, parent, sb2, pid2); len(left) > 0 {
		t.Errorf("after SIGTERM, sandbox %s left: %s", sb2, strings.Join(left, "; "))
	}
}

// cancelledRun: a one-call run whose caller's context ends answers killed within seconds,
// and its process and its process's child are gone from the sandbox: a cancelled call ends
// its work on the host too.
func cancelledRun(t *testing.T, c *remote.Client, parent string) {
	t.Helper()
	id, cmd := "sbx_"+strings.ToLower(rand.Text()[:12]), "cmd_"+strings.ToLower(rand.Text()[:12])
	// The run's code starts a sleep no other process sleeps: once it is there, the code runs.
	// (A python process in the sandbox's cgroup is not enough: the interpreter pre-started for
	// the run is there before the run reaches it, and a cancel then ends the call before the
	// code ever ran, leaving that idle interpreter to the sandbox's release.)
	arg := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1e9)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type answer struct {
		res hostagent.RunResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.Run(ctx, hostagent.RunRequest{SandboxID: id, CommandID: cmd, Runtime: "ns", Language: "python",
			Limits: runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 64}, Timeout: 5 * time.Minute,
			Code: "def run(input, config):\n    import subprocess\n    subprocess.run(['sleep', '" + arg + "'])\n    return 1\n"})
		done <- answer{res, err}
	}()
	running := func() []string {
		var out []string
		b, _ := os.ReadFile("/sys/fs/cgroup/pids/" + parent + "/" + id + "/cgroup.procs")
		for _, p := range strings.Fields(string(b)) {
			if cmdline, _ := os.ReadFile("/proc/" + p + "/cmdline"); strings.Contains(string(cmdline), "python") {
				out = append(out, p+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
		return out
	}
	sleeping := func() int { return findProcess("sleep\x00" + arg + "\x00") }
	for deadline := time.Now().Add(time.Minute); len(running()) == 0 || sleeping() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run's code never ran in sandbox %s (python: %v)", id, running())
		}
	}
	start := time.Now()
	cancel()
	select {
	case a := <-done:
		if a.err != nil || a.res.Status != "killed" {
			t.Errorf("a cancelled Run answered %+v %v, want killed", a.res.CommandEnd, a.err)
		}
		t.Logf("a cancelled Run answered %s after %v", a.res.Status, time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled Run went on for 10 s")
	}
	for deadline := time.Now().Add(5 * time.Second); len(running()) > 0 || sleeping() > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("a cancelled Run's processes stayed: python %v, its sleep %d", running(), sleeping())
			break
		}
	}
	rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
	defer rcancel()
	if _, err := c.Release(rctx, id); err != nil {
		t.Errorf("release: %v", err)
	}
}

// sleepIn creates an ns sandbox on c running `sleep 1000`, and answers its id and the sleep's
// pid on the host.
func sleepIn(t *testing.T, c *remote.Client) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	id := "sbx_" + strings.ToLower(rand.Text()[:12])
	if _, err := c.Create(ctx, hostagent.CreateRequest{ID: id, Runtime: "ns",
		Limits: runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 64}}); err != nil {
		t.Fatalf("create: %v", err)
	}
	// A duration no other process sleeps, to find it by.
	arg := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1e9)
	cmd := "cmd_" + strings.ToLower(rand.Text()[:12])
	if err := c.Exec(ctx, hostagent.ExecRequest{SandboxID: id, CommandID: cmd, Argv: []string{"sleep", arg},
		Timeout: time.Hour}); err != nil {
		t.Fatalf("exec: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if pid := findProcess("sleep\x00" + arg + "\x00"); pid > 0 {
			return id, pid
		}
	}
	t.Fatalf("no sleep %s on the host", arg)
	return "", 0
}

// findProcess answers the pid whose command line is cmdline, or 0.
func findProcess(cmdline string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil && string(b) == cmdline {
			var pid int
			fmt.Sscan(strings.Split(f, "/")[2], &pid)
			return pid
		}
	}
	return 0
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie is dead; whoever reaps it is not ours.
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// waitLeftovers waits up to 20 s for hostLeftovers to be empty, and answers them.
func waitLeftovers(dir, parent, id string, pid int) []string {
	var left []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = hostLeftovers(dir, parent, id, pid); len(left) == 0 {
			return nil
		}
	}
	return left
}

// hostLeftovers lists what sandbox id of an lbb host with data directory dir and cgroup
// parent holds on the machine: its process pid, mounts under dir, its cgroups (and those
// of the parent's sandboxes), loop devices on files under dir.
func hostLeftovers(dir, parent, id string, pid int) []string {
	var out []string
	if alive(pid) {
		out = append(out, fmt.Sprintf("process %d", pid))
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir) {
				out = append(out, "mount "+fields[4])
			}
		}
		f.Close()
	}
	groups, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "*/" + id + "*")
	for _, g := range groups {
		out = append(out, "cgroup "+g)
		if b, _ := os.ReadFile(filepath.Join(g, "cgroup.procs")); strings.HasPrefix(g, "/sys/fs/cgroup/pids/") && len(b) > 0 {
			for _, p := range strings.Fields(string(b)) {
				cmdline, _ := os.ReadFile("/proc/" + p + "/cmdline")
				out = append(out, "process "+p+" "+strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
			}
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir) {
			out = append(out, "loop device "+strings.Split(f, "/")[3]+" on "+strings.TrimSpace(string(b)))
		}
	}
	return out
}
