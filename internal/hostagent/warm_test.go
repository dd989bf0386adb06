package hostagent_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TestStartSandboxWarm: a long-lived sandbox created with Warm is a parked slot handed over
// by the pool: its id is the slot's, its Files are written, and it stops, resumes (same
// workspace) and is destroyed by that id. With no slot ready it starts cold under spec.ID.
func TestStartSandboxWarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lim := runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 128}
	d := local.New(local.Options{AgentPath: agentBin, StateDir: t.TempDir()})
	p, err := pool.New(pool.Options{Driver: d, Min: 1, Tick: time.Hour,
		Keys: []pool.Key{{Name: "bare", Image: "/", Limits: lim}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bs, err := blobs.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	blob, err := bs.Put(ctx, strings.NewReader("template file"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := hostagent.NewLocal(hostagent.Options{Driver: d, Pool: p, Rootfs: "/", Blobs: bs, DataDir: t.TempDir()})
	files := []hostagent.File{{Path: "from/template.txt", SHA256: blob.SHA256}}

	coldID := ids.New(ids.Sandbox)
	live, err := h.Create(ctx, hostagent.CreateRequest{ID: coldID, Limits: lim, Warm: true, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if live.ID != coldID {
		t.Errorf("cold sandbox %s, want %s", live.ID, coldID)
	}
	if _, err := h.Destroy(ctx, coldID); err != nil {
		t.Fatal(err)
	}

	p.Start()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	parked, _ := d.List(ctx)
	want := ids.New(ids.Sandbox)
	live, err = h.Create(ctx, hostagent.CreateRequest{ID: want, Limits: lim, Warm: true, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if live.ID == want || !slices.Contains(parked, live.ID) {
		t.Fatalf("warm sandbox %s; parked were %v", live.ID, parked)
	}
	read := func(p string) string {
		t.Helper()
		_, r, err := h.OpenFile(ctx, live.ID, p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		return string(b)
	}
	if got := read("from/template.txt"); got != "template file" {
		t.Errorf("template file: %q", got)
	}
	cmd := ids.New(ids.Command)
	if err := h.Exec(ctx, hostagent.ExecRequest{SandboxID: live.ID, CommandID: cmd, Argv: []string{"sh", "-c", "echo made > made.txt"},
		Timeout: 10 * time.Second, HeadBytes: 1 << 10, TailBytes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
	out, err := h.Wait(ctx, cmd)
	if err != nil || !out.OK {
		t.Fatalf("exec: %+v %v", out, err)
	}
	if _, err := h.Stop(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Resume(ctx, hostagent.ResumeRequest{ID: live.ID, Limits: lim}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(read("made.txt"))
	if b.String() != "made\n" || read("from/template.txt") != "template file" {
		t.Errorf("after resume: %q", b.String())
	}
	if _, err := h.Destroy(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	if held, _ := d.List(ctx); slices.Contains(held, live.ID) {
		t.Errorf("the driver still holds %s after destroy", live.ID)
	}
}

// TestReapKeepsWarmRun: a Reap (another control plane's start, on a host they share) leaves
// the warm pool's parked slots, and a one-call run in a warm slot (which the driver names by
// the slot's id) that it keeps by its record's id runs to its end.
func TestReapKeepsWarmRun(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := local.New(local.Options{AgentPath: agentBin, StateDir: t.TempDir()})
	p, err := pool.New(pool.Options{Driver: d, Min: 1, Tick: time.Hour,
		Keys: []pool.Key{{Name: "py", Image: "/", Language: "python", Imports: []string{}, Limits: runtime.Limits{MemoryMiB: 512}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := hostagent.NewLocal(hostagent.Options{Driver: d, Pool: p, Rootfs: "/", DataDir: t.TempDir()})
	p.Start()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	parked, _ := d.List(ctx)
	// The pool's parked slots are the host's own: a Reap leaves them.
	if reaped, err := h.Reap(ctx, nil); err != nil || len(reaped) != 0 {
		t.Fatalf("a Reap took parked slots: %v %v", reaped, err)
	}
	s := spec("def run(input, config):\n    return input", "7")
	if err := h.Claim(ctx, s); err != nil {
		t.Fatal(err)
	}
	reaped, err := h.Reap(ctx, []string{s.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, h, ctx, s)
	release(t, h, s)
	if out.Status != store.CommandSucceeded || string(out.Result) != "7" {
		t.Fatalf("the run after a Reap that kept it: %+v (reaped %v, parked %v)", out, reaped, parked)
	}
	if len(parked) != 1 || parked[0] == s.SandboxID || len(reaped) != 0 {
		t.Fatalf("parked %v (want one slot, not named as the run), reaped %v (want none)", parked, reaped)
	}
}
