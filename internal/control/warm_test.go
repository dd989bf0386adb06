package control_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store"
)

// warmEnv is a service whose host hands out long-lived sandboxes from a warm pool of bare
// slots on the local driver.
type warmEnv struct {
	*env3
	pool *pool.Pool
}

func setupWarm(t *testing.T, dir string, st store.Store, start bool, tweak func(*config.Config)) *warmEnv {
	t.Helper()
	cfg := testConfig(dir, tweak)
	drv := local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, "sandboxes")})
	lim := runtime.Limits{MemoryMiB: cfg.Defaults.MemoryMiB, CPUs: cfg.Defaults.CPUs, Pids: cfg.Defaults.Pids, DiskMiB: cfg.Defaults.DiskMiB}
	p, err := pool.New(pool.Options{Driver: drv, Min: 2, Tick: time.Hour, Keys: []pool.Key{{Name: "bare", Image: "/", Limits: lim, Runtime: cfg.Runtime}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	h := hostagent.NewLocal(hostagent.Options{Driver: drv, Pool: p, Rootfs: "/", Blobs: bs, DataDir: dir})
	e := serve(t, dir, control.Options{Store: st, Host: h, Blobs: bs, Config: cfg, Image: control.Image{ID: "img1"}})
	if start {
		p.Start()
		if err := p.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return &warmEnv{env3: &env3{env: e, drv: drv}, pool: p}
}

// TestCreateTakesWarmSlot: a created sandbox is a parked slot, its record named after it;
// it stops, resumes on its workspace and is destroyed like a cold one. A graph at its cap
// takes no slot.
func TestCreateTakesWarmSlot(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	e := setupWarm(t, dir, st, true, func(c *config.Config) { c.MaxRunningPerGraph = 1 })
	parked, _ := e.drv.List(ctx)
	sb := e.create(t, control.CreateRequest{})
	if !slices.Contains(parked, sb.ID) || sb.Status != store.SandboxRunning || sb.StartedAt == nil {
		t.Fatalf("created %+v; the parked slots were %v", sb, parked)
	}
	if w := e.pool.Stats()[0].Warm; w != 1 {
		t.Errorf("warm claims %d, want 1", w)
	}
	if got, err := e.st.GetSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxRunning {
		t.Fatalf("record: %+v %v", got, err)
	}
	if c, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sh", "-c", "echo kept > f"}, WaitMs: ms(30000)}, "w1"); c.Status != store.CommandSucceeded {
		t.Fatalf("exec: %+v", c)
	}
	// At the cap: refused before any slot is taken.
	_, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "", "")
	wantCode(t, err, errdefs.CodeTooManySandboxes)
	if w := e.pool.Stats()[0]; w.Warm != 1 || w.Cold != 0 {
		t.Errorf("after a refused create: %+v", w)
	}
	if got, err := e.svc.StopSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxStopped {
		t.Fatalf("stop: %+v %v", got, err)
	}
	if got, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxRunning {
		t.Fatalf("resume: %+v %v", got, err)
	}
	if c, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"cat", "f"}, WaitMs: ms(30000)}, "w2"); c.Stdout.Tail != "kept\n" {
		t.Fatalf("after resume: %+v", c)
	}
	if got, err := e.svc.DeleteSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxDestroyed {
		t.Fatalf("delete: %+v %v", got, err)
	}
	if held, _ := e.drv.List(ctx); slices.Contains(held, sb.ID) {
		t.Errorf("the driver still holds %s", sb.ID)
	}
}

// TestRecoverWarmSandbox: after a crash, a long-lived sandbox that came from the pool is
// stopped with its disk kept (the driver knows it by its record's id) and resumes; the
// parked slots, which no record claims, are reaped.
func TestRecoverWarmSandbox(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	e := setupWarm(t, dir, st, true, nil)
	sb := e.create(t, control.CreateRequest{})
	if c, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sh", "-c", "echo kept > f"}, WaitMs: ms(30000)}, "r1"); c.Status != store.CommandSucceeded {
		t.Fatalf("exec: %+v", c)
	}
	if err := e.pool.WaitReady(ctx); err != nil { // refilled: nothing builds from here
		t.Fatal(err)
	}
	held, _ := e.drv.List(ctx)
	parked := slices.DeleteFunc(slices.Clone(held), func(id string) bool { return id == sb.ID })
	if len(parked) != 2 || len(held) != 3 {
		t.Fatalf("the driver holds %v: want the sandbox and two parked slots", held)
	}
	// A second server on the same store and state directory, as after a crash (the first
	// one's processes are left to its cleanup).
	e2 := setupWarm(t, dir, st, false, nil)
	rec, err := e2.svc.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.Reaped)
	if !slices.Equal(rec.Stopped, []string{sb.ID}) || !slices.Equal(rec.Reaped, parked) {
		t.Fatalf("recovered %+v; the parked slots were %v", rec, parked)
	}
	if held, _ := e2.drv.List(ctx); !slices.Equal(held, []string{sb.ID}) {
		t.Errorf("after recovery the driver holds %v", held)
	}
	if got, err := e2.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxRunning {
		t.Fatalf("resume: %+v %v", got, err)
	}
	if c, _ := e2.exec(t, sb.ID, control.ExecRequest{Argv: []string{"cat", "f"}, WaitMs: ms(30000)}, "r2"); c.Stdout.Tail != "kept\n" {
		t.Fatalf("after recovery and resume: %+v", c)
	}
}
