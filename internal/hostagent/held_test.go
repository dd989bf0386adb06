package hostagent_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// heldSandbox starts a long-lived sandbox on the local driver (the real guest agent as a
// plain subprocess) in a host agent whose holds wait idle, and runs argv in it with its
// output held.
func heldSandbox(t *testing.T, idle time.Duration, argv ...string) (h *hostagent.Local, sb, cmd string) {
	t.Helper()
	ctx := t.Context()
	d := local.New(local.Options{AgentPath: agentBin, StateDir: t.TempDir()})
	h = hostagent.NewLocal(hostagent.Options{Driver: d, Rootfs: "/", DataDir: t.TempDir(), HoldIdle: idle})
	sb = ids.New(ids.Sandbox)
	if _, err := h.Create(ctx, hostagent.CreateRequest{ID: sb, Limits: runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 128}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy(context.Background(), sb) })
	cmd = ids.New(ids.Command)
	if err := h.Exec(ctx, hostagent.ExecRequest{SandboxID: sb, CommandID: cmd, Argv: argv, Timeout: 2 * time.Minute,
		HeadBytes: 1 << 10, TailBytes: 1 << 10, Hold: true}); err != nil {
		t.Fatal(err)
	}
	return h, sb, cmd
}

// readHeld reads a held command's output as the API does, pausing between reads, and
// answers each stream and how the reading ended.
func readHeld(t *testing.T, h hostagent.Host, cmd string, pause time.Duration) (stdout, stderr []byte, end hostagent.HeldOutput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	got := map[string]*bytes.Buffer{"stdout": {}, "stderr": {}}
	req := hostagent.HeldRead{CommandID: cmd, Max: 256 << 10}
	for {
		r, err := h.ReadHeld(ctx, req)
		if err != nil {
			t.Fatalf("ReadHeld: %v", err)
		}
		if len(r.Pieces) == 0 {
			return got["stdout"].Bytes(), got["stderr"].Bytes(), r
		}
		for _, p := range r.Pieces {
			if b := got[p.Stream]; int64(b.Len()) != p.Offset {
				t.Fatalf("%s: a piece at %d after %d bytes", p.Stream, p.Offset, b.Len())
			}
			got[p.Stream].Write(p.Data)
		}
		req.Stdout, req.Stderr = int64(got["stdout"].Len()), int64(got["stderr"].Len())
		time.Sleep(pause)
	}
}

// A held command's output reaches its reader whole, stdout and stderr, however slow the
// reader: the process waits for it.
func TestHeldOutputIsWhole(t *testing.T) {
	const n = "1500000" // 10.9 MB: more than the hold and the agent channel's window together
	want, err := exec.Command("seq", "1", n).Output()
	if err != nil {
		t.Skipf("the host's seq: %v", err)
	}
	h, _, cmd := heldSandbox(t, time.Minute, "sh", "-c", "seq 1 "+n+"; echo done >&2")

	// Nobody reads yet: the process waits, it does not end.
	wctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if end, err := h.Wait(wctx, cmd); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the command ended with nobody reading its held output: %+v %v", end, err)
	}
	stdout, stderr, end := readHeld(t, h, cmd, 2*time.Millisecond)
	if !end.Ended || end.Released {
		t.Errorf("the reading ended %+v, want Ended", end)
	}
	if !bytes.Equal(stdout, want) || string(stderr) != "done\n" {
		t.Errorf("stdout %d bytes (want %d, equal %v), stderr %q", len(stdout), len(want), bytes.Equal(stdout, want), stderr)
	}
	out, err := h.Wait(t.Context(), cmd)
	if err != nil || !out.OK || out.Stdout.Bytes != int64(len(want)) {
		t.Errorf("the command's end: %+v %v", out, err)
	}
	if out.Stdout.Dropped() != int64(len(want))-2<<10 {
		t.Errorf("the record says %d bytes were not kept, want %d", out.Stdout.Dropped(), len(want)-2<<10)
	}
}

// A hold nobody reads is let go after the idle time: the process goes on, and a reader that
// comes back gets what was held, then Released.
func TestHeldOutputNobodyReads(t *testing.T) {
	h, _, cmd := heldSandbox(t, 300*time.Millisecond, "seq", "1", "1500000")
	out, err := h.Wait(t.Context(), cmd)
	if err != nil || !out.OK {
		t.Fatalf("the command did not go on once its hold was let go: %+v %v", out, err)
	}
	stdout, _, end := readHeld(t, h, cmd, 0)
	if !end.Released || len(stdout) == 0 || !strings.HasPrefix(string(stdout), "1\n2\n3\n") || int64(len(stdout)) >= out.Stdout.Bytes {
		t.Errorf("the reader got %d of %d bytes, then %+v; want what was held, then Released", len(stdout), out.Stdout.Bytes, end)
	}
}

// The starter goes away: Release lets the process go on at once.
func TestHeldOutputRelease(t *testing.T) {
	h, _, cmd := heldSandbox(t, time.Hour, "seq", "1", "1500000")
	time.Sleep(200 * time.Millisecond)
	if _, err := h.ReadHeld(t.Context(), hostagent.HeldRead{CommandID: cmd, Release: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := h.Wait(ctx, cmd); err != nil || !out.OK {
		t.Fatalf("after Release: %+v %v", out, err)
	}
	if r, err := h.ReadHeld(t.Context(), hostagent.HeldRead{CommandID: cmd}); err != nil || !r.Released || len(r.Pieces) != 0 {
		t.Errorf("a read after Release: %+v %v", r, err)
	}
}

// A sandbox stops while a held command's reader has stalled: the command ends with it, at
// once rather than after the hold's idle time, and what was held stays readable.
func TestHeldOutputStop(t *testing.T) {
	h, sb, cmd := heldSandbox(t, time.Hour, "seq", "1", "1500000")
	time.Sleep(300 * time.Millisecond) // the hold fills; the process waits in write(2)
	start := time.Now()
	if _, err := h.Stop(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the stop took %v: it waited for the held command", took)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := h.Wait(ctx, cmd); err != nil {
		t.Fatalf("the held command did not end with its sandbox: %v", err)
	}
	stdout, _, end := readHeld(t, h, cmd, 0)
	if !end.Released || !strings.HasPrefix(string(stdout), "1\n2\n3\n") {
		t.Errorf("after the stop the reader got %d bytes, then %+v; want what was held, then Released", len(stdout), end)
	}
}
