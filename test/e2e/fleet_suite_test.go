//go:build linux

package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs/s3test"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// fleetMode (LBB_E2E_FLEET=1) runs every server of the suite as a fleet: lbb serve on its own
// PostgreSQL schema (--store) and a SeaweedFS bucket (--blobs), with no sandboxes of its own,
// and two `lbb host` processes (a and b), each with its own data directory and cgroup parent,
// sharing the bucket (--host-agent a=URL,b=URL). `make test` runs the cases that cover
// routing through the fleet this way (see the Makefile's LBB_E2E_FLEET line); the tests that
// start their own hosts skip.
var fleetMode = os.Getenv("LBB_E2E_FLEET") == "1"

// testFleet is the hosts of a server of fleetMode, and their bucket.
type testFleet struct {
	hosts  []*fleetHost
	bucket string
}

// procs answers the hosts' processes (none for a nil fleet).
func (f *testFleet) procs() []*proc {
	if f == nil {
		return nil
	}
	var ps []*proc
	for _, h := range f.hosts {
		ps = append(ps, h.proc)
	}
	return ps
}

// startFleet starts the server's two hosts (again, on their data directories, after a stop
// or kill9) with common and the server's own flags, and answers the flags of lbb serve that
// make them its hosts and their bucket its blobs.
func (s *server) startFleet(common []string) []string {
	t := s.t
	t.Helper()
	if s.fleet == nil {
		s3 := s3test.Start(t)
		for k, v := range s3test.Env {
			t.Setenv(k, v)
		}
		s.fleet = &testFleet{bucket: s3.NewBucket(t)}
		// The hosts' data directories sit beside the server's, in the directory newDataDir
		// made before startServer registered the stop: removed after the hosts have ended. A
		// directory of their own, registered after the stop, was removed first, and the hosts
		// made parts of it again as they stopped.
		for _, name := range []string{"a", "b"} {
			dir := filepath.Join(filepath.Dir(s.dataDir), "host-"+name)
			s.fleet.hosts = append(s.fleet.hosts, &fleetHost{name: name, dir: dir, token: rand.Text()})
		}
	}
	var urls, tokens []string
	for _, h := range s.fleet.hosts {
		// The host's flags are the server's (as LBB_E2E_REMOTE_HOST's are) on its own data
		// directory: the last --data-dir wins.
		args := append(append([]string{"host", "--listen", "127.0.0.1:0", "--token", h.token}, common...), s.args...)
		args = append(args, "--data-dir", h.dir, "--blobs", s.fleet.bucket,
			// Both machines are this one: their own cgroups, so that neither reaps the other's.
			"--cgroup-parent", "lbb-e2e-fleet-"+h.name)
		h.proc, h.url = launch(t, args, s.stderr, hostLine)
		urls, tokens = append(urls, h.name+"="+h.url), append(tokens, h.token)
	}
	return []string{"--host-agent", strings.Join(urls, ","), "--host-agent-token", strings.Join(tokens, ","), "--blobs", s.fleet.bucket}
}

// startFleetServer starts a control plane (lbb serve, its own data directory) on store and the
// hosts of f, with extra flags.
func startFleetServer(t *testing.T, f *shared, store string, extra ...string) *server {
	t.Helper()
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), stderr: f.log}
	var urls, tokens []string
	for _, h := range f.hosts {
		urls, tokens = append(urls, h.name+"="+h.url), append(tokens, h.token)
	}
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.dataDir, "--images-dir", imagesDir,
		"--host-agent", strings.Join(urls, ","), "--host-agent-token", strings.Join(tokens, ","),
		"--host-lost-after", "3s", "--preview-addr", "127.0.0.1:0", "--blobs", f.bucket, "--store", store}, extra...)
	s.proc, s.url = launch(t, args, f.log, servingLine)
	key, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(key))
	t.Cleanup(func() { s.proc.end(syscall.SIGTERM) })
	return s
}

// postgresFleet starts two `lbb host` processes (sharedFleet's, with hostArgs) and n control
// planes on one PostgreSQL schema and the hosts' bucket, with serveArgs.
func postgresFleet(t *testing.T, n int, hostArgs, serveArgs []string) (*shared, []*server) {
	t.Helper()
	store := postgresSchema(t)
	f := sharedFleet(t, hostArgs...)
	f.s.proc.end(syscall.SIGTERM) // sharedFleet's control plane, on SQLite: its hosts are wanted
	var cps []*server
	for range n {
		cps = append(cps, startFleetServer(t, f, store, serveArgs...))
	}
	return f, cps
}

// TestFleetTwoControlPlanes: two control planes (lbb serve, each with its own data directory)
// on one PostgreSQL database and one SeaweedFS bucket, and two `lbb host` processes that both
// route to. What is written through one is read through the other: Files of the graph (one
// kept from a sandbox through one, one uploaded through two; each read, and imported into a
// sandbox, through the other), a memory snapshot on gvisor taken through one (its record, and
// the list of its sandbox's snapshots, through two), and a one-call run's record (its key's
// retry through the other answers it). A long-lived sandbox stays held by the control plane
// that made it (docs/deploy.md): its files, its resume after a stop and a fork of its snapshot
// go through that one, and the other answers 409 "not held by this server".
func TestFleetTwoControlPlanes(t *testing.T) {
	requireGvisor(t)
	if remoteHost || fleetMode {
		t.Skip("runs its own host agents; once is enough")
	}
	f, cps := postgresFleet(t, 2, nil, nil)
	c1, c2 := cps[0].client(t, "main"), cps[1].client(t, "main")

	// A long-lived sandbox is held by the control plane that made it (docs/deploy.md): its
	// workspace is reached through that one; the other says so.
	sb := newSandbox(t, c1, lbb.CreateParams{ExpiresInSeconds: 600})
	if where(f.hosts, sb.ID) == "" {
		t.Fatalf("sandbox %s is on neither host's disk", sb.ID)
	}
	write(t, c1, sb.ID, "one.txt", "written through one")
	if _, err := c2.Files.Read(bg, sb.ID, "one.txt"); !lbb.IsConflict(err) || !strings.Contains(err.Error(), "not held by this server") {
		t.Fatalf("a file of one's sandbox read through two: %v, want 409 naming the holder", err)
	}
	if got, err := c2.Sandboxes.Get(bg, sb.ID); err != nil || got.Status != "running" {
		t.Fatalf("one's sandbox through two: %+v %v", got, err)
	}

	// Files of the graph: kept from a sandbox through one, uploaded through two; each read
	// through the other, and imported into a sandbox through it.
	content := "# Report\n\nkept through one\n"
	execOK(t, c1, sb.ID, "bash", "-c", "printf '# Report\\n\\nkept through one\\n' > report.md")
	sum := sha256.Sum256([]byte(content))
	kept, err := c1.GraphFiles.Keep(bg, sb.ID, "report.md", lbb.WithIdempotencyKey("keep-1"))
	if err != nil || kept.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("keep through one: %+v %v", kept, err)
	}
	graphContent := func(c *lbb.Client, id string) string {
		t.Helper()
		rc, err := c.GraphFiles.Content(bg, id)
		if err != nil {
			t.Fatalf("the content of File %s: %v", id, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := graphContent(c2, kept.ID); got != content {
		t.Fatalf("the kept File through two: %q", got)
	}
	up, err := c2.GraphFiles.Upload(bg, "units.csv", strings.NewReader("cm,1\nm,100\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := graphContent(c1, up.ID); got != "cm,1\nm,100\n" {
		t.Fatalf("the uploaded File through one: %q", got)
	}
	other := newSandbox(t, c2, lbb.CreateParams{ExpiresInSeconds: 600})
	if _, err := c2.GraphFiles.Import(bg, other.ID, "data/report.md", kept.SHA256, lbb.WithIdempotencyKey("imp-1")); err != nil {
		t.Fatalf("import through two of the File kept through one: %v", err)
	}
	if got := read(t, c2, other.ID, "data/report.md"); got != content {
		t.Fatalf("the imported File: %q", got)
	}
	if _, err := c1.GraphFiles.Import(bg, sb.ID, "data/units.csv", up.SHA256, lbb.WithIdempotencyKey("imp-2")); err != nil {
		t.Fatalf("import through one of the File uploaded through two: %v", err)
	}
	if got := execOK(t, c1, sb.ID, "cat", "data/units.csv"); got.Stdout.Tail != "cm,1\nm,100\n" {
		t.Fatalf("the imported File: %q", got.Stdout.Tail)
	}
	if l, err := c1.GraphFiles.List(bg, lbb.ListParams{}); err != nil || len(l.Data) != 2 {
		t.Fatalf("Files through one: %+v %v", l, err)
	}

	// A stopped sandbox (its workspace archived to the bucket) stays held by its control
	// plane too: the other refuses to resume it, its own resumes it with its files.
	if st, err := c1.Sandboxes.Stop(bg, sb.ID); err != nil || st.Status != "stopped" {
		t.Fatalf("stop through one: %+v %v", st, err)
	}
	if _, err := c2.Sandboxes.Resume(bg, sb.ID); !lbb.IsConflict(err) || !strings.Contains(err.Error(), "not held by this server") {
		t.Fatalf("resume through two of one's sandbox: %v, want 409", err)
	}
	if st, err := c1.Sandboxes.Resume(bg, sb.ID); err != nil || st.Status != "running" {
		t.Fatalf("resume through one: %+v %v", st, err)
	}
	if got := read(t, c1, sb.ID, "data/units.csv"); got != "cm,1\nm,100\n" {
		t.Fatalf("after stop and resume: %q", got)
	}

	// A memory snapshot taken through one is read through two (its record in the database,
	// its archive in the bucket); it is forked through one, which holds its source.
	gv := newSandbox(t, c1, lbb.CreateParams{ExpiresInSeconds: 600, Isolation: "gvisor"})
	st := startHolder(t, c1, gv.ID)
	write(t, c1, gv.ID, "data/kept.txt", "before the snapshot")
	snap, err := c1.Sandboxes.Snapshot(bg, gv.ID, lbb.SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot through one: %v", err)
	}
	atSnap := carriesOn(t, c1, gv.ID, "after the snapshot", st)
	write(t, c1, gv.ID, "data/after.txt", "after the snapshot")
	if got, err := c2.GetSnapshot(bg, snap.ID); err != nil || got.ID != snap.ID || got.Sandbox != gv.ID {
		t.Fatalf("the snapshot through two: %+v %v", got, err)
	}
	if sr := cps[1].call("GET", "/v1/sandboxes/"+gv.ID+"/snapshots?graph=main", "", nil, ""); sr.status != 200 || !strings.Contains(string(sr.body), snap.ID) {
		t.Fatalf("snapshots through two: %d %s", sr.status, sr.body)
	}
	if _, err := c2.Sandboxes.Fork(bg, gv.ID, lbb.ForkRequest{Snapshot: snap.ID}); !lbb.IsConflict(err) || !strings.Contains(err.Error(), "not held by this server") {
		t.Fatalf("fork through two of one's sandbox: %v, want 409", err)
	}
	fork, err := c1.Sandboxes.Fork(bg, gv.ID, lbb.ForkRequest{Snapshot: snap.ID})
	if err != nil || fork.Status != "running" {
		t.Fatalf("fork through one: %+v %v", fork, err)
	}
	carriesOn(t, c1, fork.ID, "the fork", holderState{token: st.token, pid: st.pid, n: atSnap.n - 6})
	if read(t, c1, fork.ID, "data/kept.txt") != "before the snapshot" {
		t.Fatal("the fork lacks the source's file")
	}
	if _, err := c1.Files.Read(bg, fork.ID, "data/after.txt"); !lbb.IsNotFound(err) {
		t.Fatalf("the fork has a file written after the snapshot: %v", err)
	}
	t.Logf("source on %s, fork on %s", where(f.hosts, gv.ID), where(f.hosts, fork.ID))

	// A one-call run through two; its key's retry through one answers its record.
	_, m := cps[1].run("one-call", `{"run": {"code": "def run(input, config):\n    return input * 2", "input": 21}, "wait_ms": 60000}`)
	r, again := cps[0].run("one-call", `{"run": {"code": "def run(input, config):\n    return input * 2", "input": 21}, "wait_ms": 60000}`)
	if m["result"] != 42.0 || r.header.Get("Idempotent-Replayed") != "true" || again["command"] != m["command"] {
		t.Fatalf("run through two %v; its retry through one %v", m, again)
	}

	for id, c := range map[string]*lbb.Client{sb.ID: c1, other.ID: c2, gv.ID: c1, fork.ID: c1} {
		if d, err := c.Sandboxes.Delete(bg, id); err != nil || d.Status != "destroyed" {
			t.Fatalf("delete %s: %+v %v", id, d, err)
		}
	}
}

// TestFleetSDKSeedSamples runs the Python SDK's seed 000 samples (sdk/python/tests/
// test_seed000.py, as sdk/test.sh runs them against a server of its own) against a server of
// the suite: in fleetMode, a fleet. sdk/test.sh runs them against one server already, so
// this runs in fleetMode alone.
func TestFleetSDKSeedSamples(t *testing.T) {
	requireEnv(t)
	if !fleetMode {
		t.Skip("sdk/test.sh runs the samples against one server; this runs them against a fleet (LBB_E2E_FLEET=1)")
	}
	python := "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import httpx, pytest").Run(); err != nil {
		testkit.SkipPrivileged(t, "no python3 with httpx and pytest: %v", err)
	}
	s := startServer(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_seed000.py")
	cmd.Dir = filepath.Join(root, "sdk", "python")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "sdk", "python", "src"), "PYTHONDONTWRITEBYTECODE=1",
		"LBB_TEST_URL="+s.url, "LBB_TEST_API_KEY="+s.key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "passed") {
		t.Fatalf("the Python SDK's seed samples against the fleet: %v\n%s", err, out)
	}
	t.Logf("%s", lastLines(strings.TrimSpace(string(out)), 3))
	// The samples' sandboxes are on both hosts.
	on := map[any]int{}
	for _, sb := range s.call("GET", "/v1/sandboxes?graph=main&limit=1000", "", nil, "").obj(t)["data"].([]any) {
		on[sb.(map[string]any)["host"]]++
	}
	t.Logf("the samples' sandboxes by host: %v", on)
	if on["a"] == 0 || on["b"] == 0 {
		t.Fatalf("the samples' sandboxes are not on both hosts: %v", on)
	}
}
