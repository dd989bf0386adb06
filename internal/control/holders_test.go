package control_test

import (
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
)

// TestRecoverHolders: on SQLite (one process owns the store) a start with a control plane id
// recovers every record left running: from before holders, and of another id (a data
// directory whose id file was lost) even though its heartbeat is fresh; that id ends adopted,
// and what the start creates is held by its own id.
func TestRecoverHolders(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	hs := st.(interface{ SetHolder(string) })
	now := time.Now().UTC().Truncate(time.Millisecond)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: now}))
	var cmds []string
	for _, holder := range []string{"", "cp-old"} {
		hs.SetHolder(holder)
		sb := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxRunning, OneCall: true, Base: "lbb/python", CreatedAt: now}
		c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindRun, Code: "x", Status: store.CommandRunning, CreatedAt: now, StartedAt: &now}
		must(st.CreateSandbox(ctx, sb))
		must(st.CreateCommand(ctx, c))
		cmds = append(cmds, c.ID)
	}
	must(st.RegisterControlPlane(ctx, "cp-old", now))
	hs.SetHolder("cp-new")
	r := controltest.New()
	e := serve(t, dir, control.Options{Store: st, Host: r.On(nil), Config: testConfig(dir, nil),
		Image: control.Image{ID: "img1", Versions: map[string]string{"python": "3.13.5"}}, PlaneID: "cp-new"})
	rec, err := e.svc.Recover(ctx)
	must(err)
	if len(rec.Lost) != 2 {
		t.Fatalf("lost %v, want %v", rec.Lost, cmds)
	}
	for _, id := range cmds {
		if c, _ := st.GetCommand(ctx, "main", id); c.Status != store.CommandLost {
			t.Fatalf("command %s: %s, want lost", id, c.Status)
		}
	}
	old, err := st.GetControlPlane(ctx, "cp-old")
	must(err)
	self, err := st.GetControlPlane(ctx, "cp-new")
	must(err)
	if old.AdoptedBy != "cp-new" || old.RecoveredAt == nil || self.AdoptedBy != "" {
		t.Fatalf("control planes after the start: cp-old %+v, cp-new %+v", old, self)
	}
	resp, err := e.svc.Run(ctx, e.caller, run("def run(i, c): return i", "1"), "after", "h")
	must(err)
	res := decodeResult(t, resp)
	held, err := st.ListCommandsHeld(ctx, "cp-new", store.CommandSucceeded, store.CommandLost)
	must(err)
	if len(held) != 3 || res.Status != store.CommandSucceeded {
		t.Fatalf("cp-new holds %d commands (the two it adopted and its run, %s), want 3", len(held), res.Status)
	}
}

// TestFenced: a control plane on PostgreSQL that a peer adopted while it still ran (its
// heartbeats stalled) finds it out at its next heartbeat, and says so (lbb serve then stops).
func TestFenced(t *testing.T) {
	st := openPostgres(t, pgtest.Start(t).NewSchema(t))
	st.(interface{ SetHolder(string) }).SetHolder("cp-1")
	dir := t.TempDir()
	e := serve(t, dir, control.Options{Store: st, Host: controltest.New().On(nil),
		Config:  testConfig(dir, func(c *config.Config) { c.PeerDeadAfter = 3 * time.Second }),
		Image:   control.Image{ID: "img1", Versions: map[string]string{"python": "3.13.5"}},
		PlaneID: "cp-1", SharedStore: true})
	if _, err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.svc.Fenced():
		t.Fatal("fenced before any peer adopted it")
	case <-time.After(1500 * time.Millisecond):
	}
	if won, err := st.AdoptControlPlane(ctx, "cp-1", "cp-2", time.Now().Add(time.Hour), time.Now()); err != nil || !won {
		t.Fatalf("adopting cp-1 = %v %v", won, err)
	}
	select {
	case <-e.svc.Fenced():
	case <-time.After(5 * time.Second):
		t.Fatal("a control plane adopted while it ran did not find it out within a few heartbeats")
	}
}
