package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestCheckpointModes: a checkpoint holds the sandbox's memory, the env values its processes
// were given included, so what pause and snapshot write is the server's alone (directories
// 0700, files 0600), and it goes with its snapshot, or at resume.
func TestCheckpointModes(t *testing.T) {
	requireGvisor(t)
	s := startServer(t, "--runtime", "gvisor", "--pool=false")
	c := s.client(t, "main")
	sb := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 600, Env: map[string]string{"TOKEN": "checkpoint-secret"}})

	snap, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ownerOnly(t, filepath.Join(s.dataDir, "snapshots"))
	if _, err := c.Sandboxes.Pause(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	ownerOnly(t, filepath.Join(s.dataDir, "paused"))
	if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "paused", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the checkpoint stays after resume: %v", err)
	}
	if _, err := c.DeleteSnapshot(bg, snap.ID); err != nil {
		t.Fatal(err)
	}
	if dirs := snapshotDirs(t, s); len(dirs) > 0 {
		t.Errorf("deleted snapshot %s leaves %v", snap.ID, dirs)
	}
}

// ownerOnly checks that no one but the owner may read anything under root, root included.
func ownerOnly(t *testing.T, root string) {
	t.Helper()
	n := 0
	// Walk, not WalkDir: it answers the mode of every entry, which is what is checked.
	err := filepath.Walk(root, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm()&^want != 0 {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("%s: %d entries, %v", root, n, err)
	}
}
