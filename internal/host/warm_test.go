package host_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/host"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
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
	h := host.New(host.Options{Driver: d, Provider: p})
	files := []host.WorkspaceFile{{Path: "from/template.txt", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("template file")), nil
	}}}

	// Empty pool: cold, under the caller's id.
	coldID := ids.New(ids.Sandbox)
	live, err := h.StartSandbox(ctx, host.SandboxSpec{ID: coldID, Image: "/", Limits: lim, Create: true, Warm: true, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if live.ID != coldID {
		t.Errorf("cold sandbox %s, want %s", live.ID, coldID)
	}
	live.Close()
	if err := h.DestroySandbox(ctx, coldID); err != nil {
		t.Fatal(err)
	}

	p.Start()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	parked, _ := d.List(ctx)
	want := ids.New(ids.Sandbox)
	live, err = h.StartSandbox(ctx, host.SandboxSpec{ID: want, Image: "/", Limits: lim, Create: true, Warm: true, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if live.ID == want || !slices.Contains(parked, live.ID) || live.Sandbox.ID() != live.ID {
		t.Fatalf("warm sandbox %s (driver %s); parked were %v", live.ID, live.Sandbox.ID(), parked)
	}
	read := func(l *host.Live) string {
		t.Helper()
		r, err := l.Agent.ReadFile(ctx, "from/template.txt")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		return string(b)
	}
	if got := read(live); got != "template file" {
		t.Errorf("template file: %q", got)
	}
	out := live.Exec(ctx, host.ExecSpec{CommandID: ids.New(ids.Command), Argv: []string{"sh", "-c", "echo made > made.txt"},
		Timeout: 10 * time.Second, Stdout: capture(), Stderr: capture()})
	if !out.OK {
		t.Fatalf("exec: %+v", out)
	}
	live.Close()
	if err := h.StopSandbox(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	resumed, err := h.StartSandbox(ctx, host.SandboxSpec{ID: live.ID, Image: "/", Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	r, err := resumed.Agent.ReadFile(ctx, "made.txt")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(r)
	r.Close()
	if b.String() != "made\n" || read(resumed) != "template file" {
		t.Errorf("after resume: %q", b.String())
	}
	resumed.Close()
	if err := h.DestroySandbox(ctx, live.ID); err != nil {
		t.Fatal(err)
	}
	if held, _ := d.List(ctx); slices.Contains(held, live.ID) {
		t.Errorf("the driver still holds %s after destroy", live.ID)
	}
}

func capture() *output.Capture { return output.NewCapture(1<<10, 1<<10) }
