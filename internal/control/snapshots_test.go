package control_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, snapshot and fork on controltest.Checkpointing: the local driver with a fake
// freezer and a checkpoint of the workspace (not memory: that is tested on gvisor, end to
// end). These tests are about states, records, directories and recovery.

// freezeOnly is a driver with a freezer and no checkpoints (as ns).
type freezeOnly struct {
	runtime.Driver
	f runtime.Freezer
}

func (d freezeOnly) Freeze(c context.Context, id string) error { return d.f.Freeze(c, id) }
func (d freezeOnly) Thaw(c context.Context, id string) error   { return d.f.Thaw(c, id) }

// setupSnap is a service on drv over dir and st; tweak adjusts its config.
// setupSnap is setup3On that recovers, as a server does at start (after a restart too).
func setupSnap(t *testing.T, dir string, st store.Store, drv runtime.Driver, tweak func(*config.Config)) *env3 {
	t.Helper()
	e := setup3On(t, dir, st, drv, tweak)
	if _, err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func newSnapEnv(t *testing.T, tweak func(*config.Config)) (*env3, *controltest.Checkpointing) {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, dir)
	drv := controltest.NewCheckpointing(agentBin, filepath.Join(dir, "sandboxes"))
	return setupSnap(t, dir, st, drv, tweak), drv
}

// TestPauseHoldsTimeout: a command's timeout does not count the time its sandbox was paused.
// The command sleeps 1 s under a timeout of 2 s; the sandbox is paused 3 s in between. Past
// its wall-clock timeout, it ends by itself at resume, succeeded.
func TestPauseHoldsTimeout(t *testing.T) {
	e, _ := newSnapEnv(t, nil)
	sb := e.create(t, control.CreateRequest{})
	cmd, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo done"}, TimeoutMs: 2000, WaitMs: ms(0)}, "t")
	time.Sleep(300 * time.Millisecond)
	if p, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil || p.PauseMode != store.PauseFreeze {
		t.Fatalf("pause: %+v %v", p, err)
	}
	time.Sleep(3 * time.Second)
	if _, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.GetCommand(ctx, "main", cmd.ID, 10*time.Second)
	if err != nil || got.Status != store.CommandSucceeded || got.Stdout.Tail != "done\n" {
		t.Fatalf("the command paused past its timeout: %+v %v, want it succeeded", got, err)
	}
}

// TestStopPausedWithCommand: a sandbox paused with a command running stops (thawed first),
// and its command ends killed.
func TestStopPausedWithCommand(t *testing.T) {
	e, _ := newSnapEnv(t, nil)
	sb := e.create(t, control.CreateRequest{})
	cmd, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sleep", "60"}, WaitMs: ms(0)}, "s")
	if p, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil || p.PauseMode != store.PauseFreeze {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if st, err := e.svc.StopSandbox(ctx, "main", sb.ID); err != nil || st.Status != store.SandboxStopped {
		t.Fatalf("stop of a sandbox paused with a command running: %+v %v", st, err)
	}
	got, err := e.svc.GetCommand(ctx, "main", cmd.ID, 10*time.Second)
	if err != nil || got.Status != store.CommandKilled {
		t.Fatalf("the command of a stopped sandbox: %+v %v, want it killed", got, err)
	}
}

func wantErrCode(t *testing.T, what string, err error, class errdefs.Class, code string) {
	t.Helper()
	if err == nil || errdefs.ClassOf(err) != class || code != "" && errdefs.CodeOf(err) != code {
		t.Fatalf("%s: %v (code %s), want class %v code %s", what, err, errdefs.CodeOf(err), class, code)
	}
}

func (e *env3) fork(t *testing.T, id string, req control.ForkRequest, key string) store.Sandbox {
	t.Helper()
	resp, err := e.svc.ForkSandbox(ctx, e.caller, id, req, key, "hash-"+key+req.Snapshot)
	return created(t, "fork", resp, err)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestPause: pause with a command running freezes it (no checkpoint: that would end the
// command) and resume thaws it, the command still running; pause refuses when not running; a
// checkpointed pause keeps its checkpoint until resume; stop and delete work on a paused
// sandbox.
func TestPause(t *testing.T) {
	e, drv := newSnapEnv(t, nil)
	sb := e.create(t, control.CreateRequest{})
	bg, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sleep", "30"}, WaitMs: ms(0)}, "bg")
	p, err := e.svc.PauseSandbox(ctx, "main", sb.ID)
	if err != nil || p.Status != store.SandboxPaused || p.PauseMode != store.PauseFreeze || drv.Checkpoints != 0 {
		t.Fatalf("pause with a command running: %+v %v (%d checkpoints), want it frozen", p, err, drv.Checkpoints)
	}
	if r, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil || r.Status != store.SandboxRunning {
		t.Fatalf("resume with a command running: %+v %v", r, err)
	}
	if got, err := e.svc.GetCommand(ctx, "main", bg.ID, 0); err != nil || got.Status != store.CommandRunning {
		t.Fatalf("the command after pause and resume: %+v %v", got, err)
	}
	if _, err := e.svc.KillCommand(ctx, "main", bg.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.GetCommand(ctx, "main", bg.ID, 10*time.Second); err != nil || got.Status != store.CommandKilled {
		t.Fatalf("the command killed after resume: %+v %v", got, err)
	}
	p, err = e.svc.PauseSandbox(ctx, "main", sb.ID)
	if err != nil || p.Status != store.SandboxPaused || p.PausedAt == nil || p.PauseMode != store.PauseCheckpoint {
		t.Fatalf("pause: %+v %v", p, err)
	}
	dir := filepath.Join(e.dir, "paused", sb.ID)
	if !exists(filepath.Join(dir, "sandbox", "workspace")) || drv.Checkpoints != 1 {
		t.Fatalf("no checkpoint in %s (%d checkpoints)", dir, drv.Checkpoints)
	}
	// A repeated pause (a retry whose answer was lost) answers the paused sandbox, as a
	// repeated stop does, and checkpoints nothing again.
	if again, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil || again.Status != store.SandboxPaused || drv.Checkpoints != 1 {
		t.Fatalf("pause of a paused sandbox: %+v %v (%d checkpoints)", again, err, drv.Checkpoints)
	}
	_, err = e.svc.Exec(ctx, e.caller, sb.ID, control.ExecRequest{Argv: []string{"true"}}, "x", "x")
	wantErrCode(t, "exec in a paused sandbox", err, errdefs.ClassConflict, "")
	r, err := e.svc.ResumeSandbox(ctx, "main", sb.ID)
	if err != nil || r.Status != store.SandboxRunning || r.PausedAt != nil || r.PauseMode != "" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if exists(dir) || drv.Restores != 1 {
		t.Fatalf("after resume: checkpoint kept %v, %d restores", exists(dir), drv.Restores)
	}
	if out, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"echo", "back"}, WaitMs: ms(30000)}, "after"); out.Stdout.Tail != "back\n" {
		t.Fatalf("exec after resume: %+v", out)
	}
	// A paused sandbox stops (its checkpoint dropped) and deletes.
	if _, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil {
		t.Fatal(err)
	}
	s, err := e.svc.StopSandbox(ctx, "main", sb.ID)
	if err != nil || s.Status != store.SandboxStopped || s.PausedAt != nil || exists(dir) {
		t.Fatalf("stop of a paused sandbox: %+v %v (checkpoint kept %v)", s, err, exists(dir))
	}
	if _, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil {
		t.Fatal(err)
	}
	d, err := e.svc.DeleteSandbox(ctx, "main", sb.ID)
	if err != nil || d.Status != store.SandboxDestroyed || exists(dir) {
		t.Fatalf("delete of a paused sandbox: %+v %v (checkpoint kept %v)", d, err, exists(dir))
	}
}

// TestSnapshotsAndForks: a snapshot keeps the sandbox running; forks start from it (records,
// workspace, cap, idempotency); a snapshot-less fork takes one; deleting the source removes
// its snapshots, records and bytes, and its forks run on.
func TestSnapshotsAndForks(t *testing.T) {
	e, _ := newSnapEnv(t, func(c *config.Config) { c.MaxRunningPerGraph = 2 })
	src := e.create(t, control.CreateRequest{Env: map[string]string{"TOKEN": "src-secret"}, Metadata: map[string]string{"team": "a"}})
	if _, err := e.svc.SnapshotSandbox(ctx, e.caller, src.ID, control.SnapshotRequest{Metadata: map[string]string{strings.Repeat("k", 200): "v"}}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a snapshot with a bad label: %v", err)
	}
	e.exec(t, src.ID, control.ExecRequest{Argv: []string{"sh", "-c", "echo one > f.txt"}, WaitMs: ms(30000)}, "w1")
	snap, err := e.svc.SnapshotSandbox(ctx, e.caller, src.ID, control.SnapshotRequest{Metadata: map[string]string{"step": "1"}})
	if err != nil || !ids.Valid(ids.Snapshot, snap.ID) || snap.SandboxID != src.ID || !snap.Memory || snap.SizeBytes <= 0 || snap.Metadata["step"] != "1" {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	snapDir := filepath.Join(e.dir, "snapshots", snap.ID)
	if !exists(snapDir) {
		t.Fatalf("no snapshot in %s", snapDir)
	}
	if got, _ := e.st.GetSandbox(ctx, "main", src.ID); got.Status != store.SandboxRunning {
		t.Fatalf("after a snapshot the source is %s", got.Status)
	}
	e.exec(t, src.ID, control.ExecRequest{Argv: []string{"sh", "-c", "echo two > f.txt"}, WaitMs: ms(30000)}, "w2")

	f := e.fork(t, src.ID, control.ForkRequest{Snapshot: snap.ID, ExpiresInSeconds: 60, Env: map[string]string{"EXTRA": "x"}}, "f1")
	if f.Status != store.SandboxRunning || f.ForkedFrom == nil || f.ForkedFrom.Sandbox != src.ID || f.ForkedFrom.Snapshot != snap.ID ||
		f.Metadata["team"] != "a" || strings.Join(f.EnvNames, ",") != "EXTRA,TOKEN" || f.ExpiresAt == nil || f.ExpiresAt.Sub(f.CreatedAt) != time.Minute {
		t.Fatalf("fork: %+v", f)
	}
	if out, _ := e.exec(t, f.ID, control.ExecRequest{Argv: []string{"sh", "-c", "cat f.txt; echo $TOKEN"}, WaitMs: ms(30000)}, "r1"); out.Stdout.Tail != "one\n***\n" {
		t.Fatalf("the fork's workspace is not the snapshot's, or its env is not the source's: %q", out.Stdout.Tail)
	}
	// The same key answers the same fork; the graph's cap (2) refuses a third sandbox.
	if again := e.fork(t, src.ID, control.ForkRequest{Snapshot: snap.ID, ExpiresInSeconds: 60, Env: map[string]string{"EXTRA": "x"}}, "f1"); again.ID != f.ID {
		t.Fatalf("replay made another fork: %s", again.ID)
	}
	_, err = e.svc.ForkSandbox(ctx, e.caller, src.ID, control.ForkRequest{Snapshot: snap.ID}, "", "")
	wantErrCode(t, "a fork past the cap", err, errdefs.ClassLimitExceeded, errdefs.CodeTooManySandboxes)
	_, err = e.svc.ForkSandbox(ctx, e.caller, src.ID, control.ForkRequest{Snapshot: "snp_nope"}, "", "")
	wantErrCode(t, "a fork of an unknown snapshot", err, errdefs.ClassNotFound, "")
	_, err = e.svc.ForkSandbox(ctx, e.caller, f.ID, control.ForkRequest{Snapshot: snap.ID}, "", "")
	wantErrCode(t, "a fork of another sandbox's snapshot", err, errdefs.ClassInvalidArgument, "")

	// Without a snapshot: one is taken and kept under the source.
	if _, err := e.svc.StopSandbox(ctx, "main", f.ID); err != nil {
		t.Fatal(err)
	}
	f2 := e.fork(t, src.ID, control.ForkRequest{}, "")
	snaps, _, err := e.svc.ListSnapshots(ctx, "main", src.ID, store.Page{})
	if err != nil || len(snaps) != 2 || snaps[0].ID != f2.ForkedFrom.Snapshot || snaps[1].ID != snap.ID {
		t.Fatalf("snapshots: %+v %v", snaps, err)
	}
	if out, _ := e.exec(t, f2.ID, control.ExecRequest{Argv: []string{"cat", "f.txt"}, WaitMs: ms(30000)}, "r2"); out.Stdout.Tail != "two\n" {
		t.Fatalf("a fresh fork's workspace: %q", out.Stdout.Tail)
	}

	// Deleting the source takes its snapshots; the forks run on.
	if _, err := e.svc.DeleteSandbox(ctx, "main", src.ID); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "snapshots")); len(ents) != 0 {
		t.Fatalf("the deleted sandbox's snapshot dirs stay: %v", ents)
	}
	if _, err := e.svc.GetSnapshot(ctx, "main", snap.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("the deleted sandbox's snapshot: %v", err)
	}
	if out, _ := e.exec(t, f2.ID, control.ExecRequest{Argv: []string{"cat", "f.txt"}, WaitMs: ms(30000)}, "r3"); out.Stdout.Tail != "two\n" {
		t.Fatalf("a fork after its source went: %+v", out)
	}
	// DELETE /v1/snapshots/{id}.
	s3, err := e.svc.SnapshotSandbox(ctx, e.caller, f2.ID, control.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.DeleteSnapshot(ctx, "main", s3.ID); err != nil || exists(filepath.Join(e.dir, "snapshots", s3.ID)) {
		t.Fatalf("delete snapshot: %v", err)
	}
	if _, err := e.svc.DeleteSnapshot(ctx, "main", s3.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestSnapshotNotSupported: on a driver without abilities, everything answers 409
// not_supported; with only a freezer, pause freezes and snapshots are not supported.
func TestSnapshotNotSupported(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	cp := controltest.NewCheckpointing(agentBin, filepath.Join(dir, "sandboxes"))
	e := setupSnap(t, dir, st, freezeOnly{Driver: cp, f: cp}, nil)
	sb := e.create(t, control.CreateRequest{})
	_, err := e.svc.SnapshotSandbox(ctx, e.caller, sb.ID, control.SnapshotRequest{})
	wantErrCode(t, "snapshot without a checkpointer", err, errdefs.ClassConflict, errdefs.CodeNotSupported)
	if !strings.Contains(err.Error(), `memory snapshots need isolation "gvisor"; sandbox `+sb.ID) {
		t.Fatalf("message: %v", err)
	}
	_, err = e.svc.ForkSandbox(ctx, e.caller, sb.ID, control.ForkRequest{}, "", "")
	wantErrCode(t, "fork without a checkpointer", err, errdefs.ClassConflict, errdefs.CodeNotSupported)
	if got, _ := e.st.GetSandbox(ctx, "main", sb.ID); got.Status != store.SandboxRunning {
		t.Fatalf("after a refused snapshot: %s", got.Status)
	}
	if out, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"true"}, WaitMs: ms(30000)}, "alive"); out.Status != store.CommandSucceeded {
		t.Fatalf("after a refused snapshot: %+v", out)
	}
	p, err := e.svc.PauseSandbox(ctx, "main", sb.ID)
	if err != nil || p.PauseMode != store.PauseFreeze || exists(filepath.Join(dir, "paused", sb.ID)) {
		t.Fatalf("pause by the freezer: %+v %v", p, err)
	}
	if r, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil || r.Status != store.SandboxRunning {
		t.Fatalf("thaw: %+v %v", r, err)
	}
	if out, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"echo", "thawed"}, WaitMs: ms(30000)}, "thawed"); out.Stdout.Tail != "thawed\n" {
		t.Fatalf("after thaw: %+v", out)
	}
	// A shutdown stops a frozen sandbox as it does a running one.
	if _, err := e.svc.PauseSandbox(ctx, "main", sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.st.GetSandbox(ctx, "main", sb.ID); got.Status != store.SandboxStopped || got.EndReason != store.EndServerShutdown || got.PausedAt != nil {
		t.Fatalf("a frozen sandbox after a shutdown: %+v", got)
	}

	// No ability at all.
	dir2 := t.TempDir()
	st2 := openStore(t, dir2)
	e2 := setupSnap(t, dir2, st2, controltest.NewCheckpointing(agentBin, filepath.Join(dir2, "sandboxes")).Driver, nil)
	sb2 := e2.create(t, control.CreateRequest{})
	_, err = e2.svc.PauseSandbox(ctx, "main", sb2.ID)
	wantErrCode(t, "pause without a freezer", err, errdefs.ClassConflict, errdefs.CodeNotSupported)
	if got, _ := e2.st.GetSandbox(ctx, "main", sb2.ID); got.Status != store.SandboxRunning {
		t.Fatalf("after a refused pause: %s", got.Status)
	}
}

// TestRecoverPaused: after a restart a checkpointed sandbox stays paused and resumes; a
// frozen one is stopped like a running one; snapshots and checkpoints no record claims go.
func TestRecoverPaused(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	cp := controltest.NewCheckpointing(agentBin, filepath.Join(dir, "sandboxes"))
	e := setupSnap(t, dir, st, cp, nil)
	saved := e.create(t, control.CreateRequest{})
	e.exec(t, saved.ID, control.ExecRequest{Argv: []string{"sh", "-c", "echo kept > f.txt"}, WaitMs: ms(30000)}, "w")
	if _, err := e.svc.PauseSandbox(ctx, "main", saved.ID); err != nil {
		t.Fatal(err)
	}
	snapped := e.create(t, control.CreateRequest{})
	snap, err := e.svc.SnapshotSandbox(ctx, e.caller, snapped.ID, control.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// What a crash can leave: a snapshot dir without a record, a checkpoint nobody claims, and
	// a frozen sandbox (its record says so).
	for _, d := range []string{filepath.Join(dir, "snapshots", ids.New(ids.Snapshot)), filepath.Join(dir, "paused", ids.New(ids.Sandbox))} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := now.Add(time.Hour)
	frozen := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxPaused, PauseMode: store.PauseFreeze, PausedAt: &now,
		Base: "lbb/python", CreatedAt: now, ExpiresAt: &exp}
	if err := st.CreateSandbox(ctx, frozen); err != nil {
		t.Fatal(err)
	}
	if err := cp.Create(ctx, runtime.Spec{ID: frozen.ID, Image: "/"}); err != nil {
		t.Fatal(err)
	}

	e2 := setupSnap(t, dir, st, controltest.NewCheckpointing(agentBin, filepath.Join(dir, "sandboxes")), nil)
	got, _ := st.GetSandbox(ctx, "main", saved.ID)
	if got.Status != store.SandboxPaused || got.PauseMode != store.PauseCheckpoint || !exists(filepath.Join(dir, "paused", saved.ID)) {
		t.Fatalf("a checkpointed sandbox after a restart: %+v", got)
	}
	got, _ = st.GetSandbox(ctx, "main", frozen.ID)
	if got.Status != store.SandboxStopped || got.EndReason != store.EndServerRestart || got.PauseMode != "" || got.PausedAt != nil {
		t.Fatalf("a frozen sandbox after a restart: %+v", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(ents) != 1 || ents[0].Name() != snap.ID {
		t.Fatalf("snapshot dirs after a restart: %v, want only %s", ents, snap.ID)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "paused")); len(ents) != 1 || ents[0].Name() != saved.ID {
		t.Fatalf("checkpoints after a restart: %v, want only %s's", ents, saved.ID)
	}
	r, err := e2.svc.ResumeSandbox(ctx, "main", saved.ID)
	if err != nil || r.Status != store.SandboxRunning {
		t.Fatalf("resume after a restart: %+v %v", r, err)
	}
	if out, _ := e2.exec(t, saved.ID, control.ExecRequest{Argv: []string{"cat", "f.txt"}, WaitMs: ms(30000)}, "r"); out.Stdout.Tail != "kept\n" {
		t.Fatalf("after resume: %+v", out)
	}
	// Expiry of a paused sandbox ends it, its checkpoint and snapshots with it.
	if _, err := e2.svc.PauseSandbox(ctx, "main", saved.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.svc.DeleteSandbox(ctx, "main", snapped.ID); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(dir, "snapshots", snap.ID)) {
		t.Fatal("a deleted sandbox's snapshot dir stays")
	}
}

// TestSweepSnapshots: the janitor removes snapshots whose sandbox ended without them going
// (a crash between).
func TestSweepSnapshots(t *testing.T) {
	e, _ := newSnapEnv(t, nil)
	now := time.Now().UTC().Truncate(time.Millisecond)
	gone := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: "main", SandboxID: ids.New(ids.Sandbox), Isolation: "gvisor", CreatedAt: now}
	if err := e.st.CreateSnapshot(ctx, gone); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(e.dir, "snapshots", gone.ID)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetSnapshot(ctx, "main", gone.ID); !errdefs.IsNotFound(err) || exists(d) {
		t.Fatalf("a snapshot of a gone sandbox: %v, dir kept %v", err, exists(d))
	}
}
