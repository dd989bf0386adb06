package hostagent_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TestCheckpointArchives: two host agents on one blob store. A snapshot taken on host a is
// archived, and a fork of it on host b, which has none of its files, restores it; a sandbox
// paused with a checkpoint on a resumes on b. A host with the files uses its own (the archive
// is not read), and a missing archive fails the fork and leaves nothing behind. The driver is
// controltest.Checkpointing (its checkpoint is the workspace; memory is gvisor's, end to end).
func TestCheckpointArchives(t *testing.T) {
	ctx := t.Context()
	local, err := blobs.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bs := sharedDir{local}
	host := func() (*hostagent.Local, string) {
		data := t.TempDir()
		d := controltest.NewCheckpointing(agentBin, filepath.Join(data, "sandboxes"))
		return hostagent.NewLocal(hostagent.Options{Driver: d, Rootfs: "/", DataDir: data, Blobs: bs}), data
	}
	a, dataA := host()
	b, dataB := host()
	limits := runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 64}
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			a.Destroy(context.Background(), id)
			b.Destroy(context.Background(), id)
		}
	})
	create := func(h *hostagent.Local) string {
		t.Helper()
		id := ids.New(ids.Sandbox)
		made = append(made, id)
		if _, err := h.Create(ctx, hostagent.CreateRequest{ID: id, Limits: limits}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	write := func(h *hostagent.Local, id, s string) {
		t.Helper()
		if _, err := h.WriteFile(ctx, id, "note.txt", strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(h *hostagent.Local, id string) string {
		t.Helper()
		_, rc, err := h.OpenFile(ctx, id, "note.txt")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}

	src := create(a)
	write(a, src, "at the snapshot")
	snapID := ids.New(ids.Snapshot)
	info, err := a.Snapshot(ctx, src, snapID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DeleteSnapshot(context.Background(), snapID); b.DeleteSnapshot(context.Background(), snapID) })
	if info.Archive == nil || info.Archive.Bytes == 0 || info.Archive.DiskBytes != info.Bytes {
		t.Fatalf("the snapshot's archive: %+v (snapshot %d bytes)", info.Archive, info.Bytes)
	}
	if _, _, err := bs.Open(ctx, info.Archive.SHA256); err != nil {
		t.Fatalf("the archive is not in the blob store: %v", err)
	}
	write(a, src, "after the snapshot")

	// Host b has none of the snapshot's files: it restores them from the archive.
	fork := ids.New(ids.Sandbox)
	made = append(made, fork)
	if _, err := b.Fork(ctx, hostagent.ForkRequest{ID: fork, Source: src, SnapshotID: snapID, Archive: info.Archive, Limits: limits}); err != nil {
		t.Fatal(err)
	}
	if got := read(b, fork); got != "at the snapshot" {
		t.Fatalf("the fork on host b: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dataB, "snapshots", snapID)); err != nil {
		t.Fatalf("host b keeps no copy of the snapshot: %v", err)
	}
	// Host a has its own: a fork there does not read the archive (gone from here on).
	if err := bs.Delete(ctx, info.Archive.SHA256); err != nil {
		t.Fatal(err)
	}
	fork2 := ids.New(ids.Sandbox)
	made = append(made, fork2)
	if _, err := a.Fork(ctx, hostagent.ForkRequest{ID: fork2, Source: src, SnapshotID: snapID, Archive: info.Archive, Limits: limits}); err != nil {
		t.Fatalf("a fork on the host's own copy: %v", err)
	}
	if got := read(a, fork2); got != "at the snapshot" {
		t.Fatalf("the fork on host a: %q", got)
	}
	// A host with neither the files nor the archive fails the fork, leaving nothing behind.
	c, dataC := host()
	fork3 := ids.New(ids.Sandbox)
	if _, err := c.Fork(ctx, hostagent.ForkRequest{ID: fork3, Source: src, SnapshotID: snapID, Archive: info.Archive, Limits: limits}); err == nil {
		c.Destroy(context.Background(), fork3)
		t.Fatal("a fork from a missing archive started")
	}
	if ids, _ := c.Sandboxes(ctx); len(ids) != 0 {
		t.Fatalf("a failed fork left %v", ids)
	}
	if ents, _ := os.ReadDir(filepath.Join(dataC, "snapshots")); len(ents) != 0 {
		t.Fatalf("a failed restore left %v", ents)
	}

	// Paused with a checkpoint on host a, resumed on host b.
	p := create(a)
	write(a, p, "paused")
	paused, err := a.Pause(ctx, p)
	if err != nil || paused.Mode != store.PauseCheckpoint || paused.Archive == nil {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	if _, err := os.Stat(filepath.Join(dataA, "paused", p)); err != nil {
		t.Fatalf("no checkpoint on host a: %v", err)
	}
	if _, err := b.Resume(ctx, hostagent.ResumeRequest{ID: p, Limits: limits, Checkpoint: paused.Archive}); err != nil {
		t.Fatal(err)
	}
	if got := read(b, p); got != "paused" {
		t.Fatalf("the paused sandbox resumed on host b: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dataB, "paused", p)); err == nil {
		t.Fatal("host b kept the used checkpoint")
	}

	// A host whose blob store no other reaches archives no checkpoint.
	alone := hostagent.NewLocal(hostagent.Options{Driver: controltest.NewCheckpointing(agentBin, filepath.Join(dataC, "sandboxes")),
		Rootfs: "/", DataDir: dataC, Blobs: local})
	q := create(alone)
	if paused, err := alone.Pause(ctx, q); err != nil || paused.Mode != store.PauseCheckpoint || paused.Archive != nil {
		t.Fatalf("pause on a host with a blob store of its own: %+v %v, want no archive", paused, err)
	}
	alone.Destroy(context.Background(), q)
}

// sharedDir is a blob directory the test's host agents share, as they would a bucket.
type sharedDir struct{ *blobs.Local }

func (sharedDir) Location() string { return "test:shared" }
