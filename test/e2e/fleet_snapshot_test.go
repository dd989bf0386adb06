//go:build linux

package e2e

import (
	"strings"
	"syscall"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestFleetSnapshotAnywhere: two `lbb host` processes on gvisor share a bucket. A snapshot
// taken on host a is archived there (memory, disk, state), and so is the checkpoint of the
// source's pause; a is killed and declared lost; a fork of the snapshot starts on host b from
// the archive, with the source's process (its memory) and files as they were at the
// snapshot, and the paused source resumes on b, the same process. Deleting the source
// deletes the snapshot and its archive.
func TestFleetSnapshotAnywhere(t *testing.T) {
	requireGvisor(t)
	if remoteHost {
		t.Skip("runs its own host agents; once is enough")
	}
	fl := sharedFleet(t, "--runtime", "gvisor", "--pool=false")
	s, hosts := fl.s, fl.hosts
	c := s.client(t, "main")
	var sb *lbb.Sandbox
	for i := 0; sb == nil; i++ {
		got := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 600, Isolation: "gvisor"})
		if where(hosts, got.ID) == "a" {
			sb = got
		} else if i == 6 {
			t.Fatal("no sandbox lands on a")
		}
	}
	st := startHolder(t, c, sb.ID)
	write(t, c, sb.ID, "data/kept.txt", "from the source")
	r := s.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshot?graph=main", "", nil, `{}`)
	if r.status != 201 && r.status != 200 {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	snap := r.obj(t)
	archive, _ := snap["archive"].(map[string]any)
	if archive == nil || archive["sha256"] == "" {
		t.Fatalf("a snapshot without an archive: %v", snap)
	}
	t.Logf("snapshot %s: %.0f ms, %.1f MiB on disk, archive %.1f MiB", snap["id"], snap["duration_ms"],
		snap["size_bytes"].(float64)/(1<<20), archive["bytes"].(float64)/(1<<20))
	atSnap := carriesOn(t, c, sb.ID, "after the snapshot", st)
	write(t, c, sb.ID, "data/after.txt", "written after the snapshot")
	atPause := carriesOn(t, c, sb.ID, "before the pause", atSnap)
	r = s.call("POST", "/v1/sandboxes/"+sb.ID+"/pause?graph=main", "", nil, "")
	if p := r.obj(t); r.status != 200 || p["pause_mode"] != "checkpoint" || p["checkpoint"] == nil {
		t.Fatalf("pause: %d %v", r.status, p)
	}

	hosts[0].proc.end(syscall.SIGKILL)
	waitLost(t, s, "a")
	f, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: snap["id"].(string)})
	if err != nil || f.Status != "running" {
		t.Fatalf("fork with host a lost: %+v %v", f, err)
	}
	if rec := s.call("GET", "/v1/sandboxes/"+f.ID+"?graph=main", "", nil, "").obj(t); rec["host"] != "b" {
		t.Fatalf("the fork: %v, want it on b", rec)
	}
	got := carriesOn(t, c, f.ID, "the fork on b", holderState{token: st.token, pid: st.pid, n: atSnap.n - 6})
	if got.n > atSnap.n+1000 {
		t.Fatalf("the fork's counter %d, far past the snapshot's %d", got.n, atSnap.n)
	}
	if read(t, c, f.ID, "data/kept.txt") != "from the source" {
		t.Fatal("the fork lacks the source's file")
	}
	if _, err := c.Files.Read(bg, f.ID, "data/after.txt"); !lbb.IsNotFound(err) {
		t.Fatalf("the fork has a file written after the snapshot: %v", err)
	}

	// The paused source resumes on b from its checkpoint's archive.
	if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
		t.Fatalf("resume of the paused source with host a lost: %v", err)
	}
	if rec := s.call("GET", "/v1/sandboxes/"+sb.ID+"?graph=main", "", nil, "").obj(t); rec["host"] != "b" || rec["checkpoint"] != nil {
		t.Fatalf("the resumed source: %v, want it on b", rec)
	}
	carriesOn(t, c, sb.ID, "the source resumed on b", atPause)
	if read(t, c, sb.ID, "data/after.txt") != "written after the snapshot" {
		t.Fatal("the resumed source lacks its file")
	}

	// The source goes, and its snapshot with its archive; the fork runs on.
	if _, err := c.Sandboxes.Delete(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSnapshot(bg, snap["id"].(string)); !lbb.IsNotFound(err) {
		t.Fatalf("the deleted sandbox's snapshot: %v, want 404", err)
	}
	carriesOn(t, c, f.ID, "the fork after its source went", got)
	bs, err := blobs.NewS3(bg, fl.bucket, blobs.S3Options{StageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Stat(bg, archive["sha256"].(string)); !errdefs.IsNotFound(err) {
		t.Fatalf("the deleted snapshot's archive: %v, want it gone", err)
	}
	for _, l := range strings.Split(fl.log.String(), "\n") {
		if strings.Contains(l, `"msg":"checkpoint archived"`) || strings.Contains(l, `"msg":"checkpoint restored"`) {
			t.Log(l)
		}
	}
}
