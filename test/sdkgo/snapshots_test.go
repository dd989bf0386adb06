package sdkgo_test

import (
	"context"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestSnapshots runs the SDK's pause, snapshot and fork calls against a server on the local
// driver with a fake checkpoint (controltest.Checkpointing: the workspace, not memory; memory
// is tested end to end on gvisor).
func TestSnapshots(t *testing.T) {
	ctx := context.Background()
	c, _ := server{driver: func(stateDir string) runtime.Driver {
		return controltest.NewCheckpointing(agentBin, stateDir)
	}}.start(t)

	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{ExpiresInSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files.Write(ctx, sb.ID, "kept.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	p, err := c.Sandboxes.Pause(ctx, sb.ID)
	if err != nil || p.Status != "paused" || p.PausedAt == nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	// A repeated pause (a retry whose answer was lost) answers the paused sandbox.
	if again, err := c.Sandboxes.Pause(ctx, sb.ID); err != nil || again.Status != "paused" {
		t.Fatalf("pausing a paused sandbox: %+v %v, want it paused", again, err)
	}
	if r, err := c.Sandboxes.Resume(ctx, sb.ID); err != nil || r.Status != "running" || r.PausedAt != nil {
		t.Fatalf("resume: %+v %v", r, err)
	}
	snap, err := c.Sandboxes.Snapshot(ctx, sb.ID, lbb.SnapshotRequest{Metadata: map[string]string{"step": "1"}})
	if err != nil || !strings.HasPrefix(snap.ID, "snp_") || snap.Sandbox != sb.ID || !snap.Memory || snap.Metadata["step"] != "1" {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	// The same key again (a retry after a lost answer) answers the same snapshot.
	k1, err := c.Sandboxes.Snapshot(ctx, sb.ID, lbb.SnapshotRequest{IdempotencyKey: "snap-once"})
	if err != nil {
		t.Fatal(err)
	}
	if k2, err := c.Sandboxes.Snapshot(ctx, sb.ID, lbb.SnapshotRequest{IdempotencyKey: "snap-once"}); err != nil || k2.ID != k1.ID {
		t.Fatalf("a keyed snapshot retried: %+v %v, want %s", k2, err, k1.ID)
	}
	if _, err := c.DeleteSnapshot(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	fork, err := c.Sandboxes.Fork(ctx, sb.ID, lbb.ForkRequest{Snapshot: snap.ID, ExpiresInSeconds: 60})
	if err != nil || fork.Status != "running" || fork.ForkedFrom == nil || fork.ForkedFrom.Snapshot != snap.ID || fork.ForkedFrom.Sandbox != sb.ID {
		t.Fatalf("fork: %+v %v", fork, err)
	}
	if b := testkit.Content(t)(c.Files.Read(ctx, fork.ID, "kept.txt")); b != "kept" {
		t.Fatalf("the fork's workspace: %q", b)
	}
	l, err := c.Sandboxes.Snapshots(ctx, sb.ID, lbb.ListParams{})
	if err != nil || len(l.Snapshots) != 1 || l.Snapshots[0].ID != snap.ID {
		t.Fatalf("snapshots: %+v %v", l, err)
	}
	if got, err := c.GetSnapshot(ctx, snap.ID); err != nil || got.ID != snap.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSnapshot(ctx, snap.ID); !lbb.IsNotFound(err) {
		t.Fatalf("a deleted snapshot: %v", err)
	}
	// Without a snapshot a fresh one is taken and kept.
	if _, err := c.Sandboxes.Delete(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	fork2, err := c.Sandboxes.Fork(ctx, sb.ID, lbb.ForkRequest{})
	if err != nil || fork2.ForkedFrom == nil {
		t.Fatalf("fork without a snapshot: %+v %v", fork2, err)
	}
	if l, _ := c.Sandboxes.Snapshots(ctx, sb.ID, lbb.ListParams{}); len(l.Snapshots) != 1 || l.Snapshots[0].ID != fork2.ForkedFrom.Snapshot {
		t.Fatalf("the fork's snapshot is not kept: %+v", l)
	}
}
