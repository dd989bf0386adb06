//go:build linux

package microvm_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// answers fails the test unless the counter in b answers value v and count n.
func (b *box) answers(who, v string, n int) {
	b.t.Helper()
	v2, n2, err := runtimetest.AskCounter(context.Background(), b.c)
	if err != nil {
		b.t.Fatalf("%s: %v", who, err)
	}
	if v2 != v || n2 != n {
		b.t.Errorf("%s says %s %d, want %s %d", who, v2, n2, v, n)
	}
}

// TestCheckpoint checks that the machine's memory and processes survive: a process's
// in-memory counter goes on after a freeze and thaw, after a checkpoint and a restore of the
// same sandbox, and in a fork restored from the same checkpoint, each from the
// checkpoint's state; the fork draws other random numbers and has a machine id of its own;
// the workspaces go their own ways.
func TestCheckpoint(t *testing.T) {
	d, img := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const a, f = "sbx_cp_a", "sbx_cp_fork"
	b := boot(t, ctx, d, runtime.Spec{ID: a, Image: img})
	defer destroyed(t, d, f)
	t.Run("ports and disks out of reach", func(t *testing.T) { outOfReach(t, b) })
	b.sh(runtimetest.CounterServer)
	b.sh("echo before > /workspace/f")
	v, n, err := runtimetest.AskCounter(ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the counter holds %s (asked %d times)", v, n)

	if err := d.Freeze(ctx, a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := d.Thaw(ctx, a); err != nil {
		t.Fatal(err)
	}
	n++
	b.answers("after a freeze and a thaw the counter", v, n)

	dir := filepath.Join(t.TempDir(), "cp")
	sb := b.sb
	t0 := time.Now()
	if err := d.Checkpoint(ctx, a, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %v (%s)", time.Since(t0), diskUse(dir))
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Error("Done not closed after Checkpoint")
	}
	if pid := sb.(interface{ InitPID() int }).InitPID(); syscall.Kill(pid, 0) == nil {
		t.Errorf("QEMU %d survives Checkpoint", pid)
	}

	restore := func(id, what string) *box {
		t.Helper()
		t0 := time.Now()
		sb, err := d.Restore(ctx, id, dir)
		b := start(t, sb, err)
		t.Logf("%s: %v", what, time.Since(t0))
		return b
	}
	b = restore(a, "restore")
	b.answers("after restore the counter", v, n+1)
	if out := b.sh("cat /workspace/f"); out != "before\n" {
		t.Errorf("after restore: %q", out)
	}
	b.sh("echo a > /workspace/f")

	fb := restore(f, "fork")
	fb.answers("the fork's counter", v, n+1)
	if out := fb.sh("cat /workspace/f"); out != "before\n" {
		t.Errorf("the fork's workspace: %q", out)
	}
	fb.sh("echo fork > /workspace/f")
	if out := b.sh("cat /workspace/f"); out != "a\n" {
		t.Errorf("the fork wrote into the original's workspace: %q", out)
	}
	b.answers("the original's counter", v, n+2)
	// The fork is another machine: other random numbers, another machine id; the clock is
	// the host's, not the checkpoint's.
	rnd := "python3 -c 'import os; print(os.urandom(16).hex())'; cat /etc/machine-id; date +%s"
	ra, rf := strings.Fields(b.sh(rnd)), strings.Fields(fb.sh(rnd))
	if ra[0] == rf[0] {
		t.Errorf("the original and its fork drew the same random bytes %s", ra[0])
	}
	if ra[1] == rf[1] {
		t.Errorf("the fork kept the original's machine id %s", ra[1])
	}
	for _, r := range [][]string{ra, rf} {
		var ts int64
		if _, err := fmtSscan(r[2], &ts); err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
			t.Errorf("the guest's clock says %s, the host's %d", r[2], time.Now().Unix())
		}
	}
	if _, err := d.Restore(ctx, a, dir); err == nil {
		t.Error("Restore of a started sandbox succeeded")
	}
}

// outOfReach: the machine's virtio-serial ports (the channel, the control port, the console)
// and its disks are the agent's and the supervisor's: a sandbox's process finds no device
// node of them, cannot make one, and does not see the supervisor.
func outOfReach(t *testing.T, b *box) {
	out := b.sh(`ls /dev | grep -E '^(vport|hvc|vd|hwrng|console|mem|kmsg)' && echo FOUND-NODE
maj=$(awk '$2=="virtio-portsdev"{print $1}' /proc/devices)
[ -n "$maj" ] && mknod /tmp/port c "$maj" 1 2>/dev/null && echo MADE-NODE
blk=$(awk '$2=="virtblk"{print $1}' /proc/devices)
[ -n "$blk" ] && mknod /tmp/disk b "$blk" 0 2>/dev/null && echo MADE-DISK
ps -eo pid=,args= | grep -v -e ' ps ' -e 'grep' -e '/bin/sh' | grep -v '/.lbb/agent' && echo OTHER-PROCESS
cat /sys/class/virtio-ports/*/name | tr '\n' ' '; echo`)
	for _, bad := range []string{"FOUND-NODE", "MADE-NODE", "MADE-DISK", "OTHER-PROCESS"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s: %q", bad, out)
		}
	}
	t.Logf("the ports as sysfs names them: %s", strings.TrimSpace(out))
}
