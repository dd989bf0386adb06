//go:build linux

package e2e

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Pause, snapshot and fork against a real `lbb serve`: on gvisor with memory (checkpoint
// and restore), on ns by the freezer.

// holderScript is sdk/testdata/holder.py (the SDK suites run it too): a Python process that
// keeps its state in memory only, a token drawn at its start and a counter it advances every
// 20 ms, and takes a note from /workspace/note.in. It writes all of it, with its pid, to
// /workspace/state, so a reader can tell the same process carrying on (same token, counter
// past what it was) from one started again (a new token).
func holderScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../sdk/testdata/holder.py")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type holderState struct {
	token string
	n     int
	pid   string
	note  string
}

// holding starts lbb serve on the runtime rt without a warm pool, and the holder in a
// sandbox there.
func holding(t *testing.T, rt string) (*server, *lbb.Client, *lbb.Sandbox, holderState) {
	t.Helper()
	s := startServer(t, "--runtime", rt, "--pool=false")
	c := s.client(t, "main")
	sb := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 900})
	if sb.Isolation != "" && sb.Isolation != rt {
		t.Fatalf("isolation %q, want %s", sb.Isolation, rt)
	}
	return s, c, sb, startHolder(t, c, sb.ID)
}

// pauseAndRestart pauses the sandbox id, ends the server with end (s.stop, s.kill9), starts
// it again and answers a client of it and the sandbox as the restarted server has it.
func pauseAndRestart(t *testing.T, s *server, c *lbb.Client, id string, end func()) (*lbb.Client, *lbb.Sandbox, error) {
	t.Helper()
	if _, err := c.Sandboxes.Pause(bg, id); err != nil {
		t.Fatal(err)
	}
	end()
	s.start()
	c = s.client(t, "main")
	got, err := c.Sandboxes.Get(bg, id)
	return c, got, err
}

// startHolder starts the holder in the background: the command that starts it ends at once,
// so nothing runs as a command (pause and snapshot refuse while one does).
func startHolder(t *testing.T, c *lbb.Client, sb string) holderState {
	t.Helper()
	write(t, c, sb, "holder.py", holderScript(t))
	execOK(t, c, sb, "sh", "-c", "setsid python3 /workspace/holder.py </dev/null >/dev/null 2>&1 &")
	var st holderState
	waitFor(t, 30*time.Second, "the holder's first state", func() bool {
		st = readState(t, c, sb)
		return st.token != ""
	})
	return st
}

func readState(t *testing.T, c *lbb.Client, sb string) holderState {
	t.Helper()
	rc, err := c.Files.Read(bg, sb, "state")
	if lbb.IsNotFound(err) {
		return holderState{}
	}
	if err != nil {
		t.Fatalf("reading the state of %s: %v", sb, err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("reading the state of %s: %v", sb, err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return holderState{}
	}
	n, _ := strconv.Atoi(f[1])
	st := holderState{token: f[0], n: n, pid: f[2]}
	if len(f) > 3 {
		st.note = f[3]
	}
	return st
}

// carriesOn waits until sb's holder has moved past was, and checks it is the same process.
func carriesOn(t *testing.T, c *lbb.Client, sb, what string, was holderState) holderState {
	t.Helper()
	var st holderState
	waitFor(t, 30*time.Second, what+": the holder counting on", func() bool {
		st = readState(t, c, sb)
		return st.token != "" && st.n > was.n+5
	})
	if st.token != was.token || st.pid != was.pid {
		t.Fatalf("%s: the holder is %+v, was %+v: started again, its memory lost", what, st, was)
	}
	return st
}

func snapshotDirs(t *testing.T, s *server) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(s.dataDir, "snapshots"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "snp_") {
			out = append(out, d.Name())
			return filepath.SkipDir
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func requireGvisor(t *testing.T) {
	t.Helper()
	requireEnv(t)
	if _, why := runsc(); why != "" {
		testkit.SkipPrivileged(t, "memory snapshots need gvisor: %s", why)
	}
}

// TestSnapshotGvisor: pause keeps a process's memory across resume; a snapshot leaves the
// sandbox running; two forks of one snapshot both start from its memory and files and then
// go their own ways; deleting the source keeps the forks and removes its snapshots; the 409s.
func TestSnapshotGvisor(t *testing.T) {
	requireGvisor(t)
	s, c, sb, st := holding(t, "gvisor")

	// Pause with a command running freezes the sandbox, command and all (TestPauseCommandsRunning
	// follows one through).
	bgCmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"sleep", "60"}, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Sandboxes.Pause(bg, sb.ID); err != nil || p.Status != "paused" || p.PauseMode != "freeze" {
		t.Fatalf("pause with a command running: %+v %v, want it frozen", p, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dataDir, "paused", sb.ID)); len(ents) != 0 {
		t.Fatalf("a checkpoint of a sandbox with a command running: %v", ents)
	}
	if r, err := c.Sandboxes.Resume(bg, sb.ID); err != nil || r.Status != "running" {
		t.Fatalf("resume with a command running: %+v %v", r, err)
	}
	if got, err := c.Commands.Get(bg, bgCmd.ID, -1); err != nil || got.Status != "running" {
		t.Fatalf("the command after pause and resume: %+v %v", got, err)
	}
	// (A snapshot and a fork carry the command on: TestSnapshotCommandsRunningGvisor.)
	if _, err := c.Commands.Kill(bg, bgCmd.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commands.Get(bg, bgCmd.ID, 10_000); err != nil {
		t.Fatal(err)
	}

	// Pause: saved with its memory, RAM freed; resume: the same process carries on.
	st = carriesOn(t, c, sb.ID, "before pause", st)
	p, err := c.Sandboxes.Pause(bg, sb.ID)
	if err != nil || p.Status != "paused" || p.PausedAt == nil || p.PauseMode != "checkpoint" {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if _, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"true"}}); !lbb.IsConflict(err) {
		t.Fatalf("exec in a paused sandbox: %v, want 409", err)
	}
	if _, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{}); !lbb.IsConflict(err) {
		t.Fatalf("snapshot of a paused sandbox: %v, want 409", err)
	}
	if _, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{}); !lbb.IsConflict(err) {
		t.Fatalf("fork of a paused sandbox without a snapshot: %v, want 409", err)
	}
	// A repeated pause (a retry whose answer was lost) answers the paused sandbox.
	if again, err := c.Sandboxes.Pause(bg, sb.ID); err != nil || again.Status != "paused" {
		t.Fatalf("pause of a paused sandbox: %+v %v, want it paused, no error", again, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dataDir, "paused", sb.ID)); len(ents) == 0 {
		t.Fatalf("no checkpoint in %s", filepath.Join(s.dataDir, "paused", sb.ID))
	}
	r, err := c.Sandboxes.Resume(bg, sb.ID)
	if err != nil || r.Status != "running" || r.PausedAt != nil {
		t.Fatalf("resume: %+v %v", r, err)
	}
	st = carriesOn(t, c, sb.ID, "after resume", st)
	if _, err := os.Stat(filepath.Join(s.dataDir, "paused", sb.ID)); !os.IsNotExist(err) {
		t.Fatalf("the used checkpoint stays: %v", err)
	}

	// A snapshot; the sandbox runs on, the same process.
	write(t, c, sb.ID, "data/kept.txt", "from the source")
	snap, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{Metadata: map[string]string{"step": "1"}})
	if err != nil || !snap.Memory || snap.Sandbox != sb.ID || snap.SizeBytes <= 0 || snap.Isolation != "gvisor" {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	t.Logf("snapshot %s: %.0f ms, %.1f MiB", snap.ID, snap.DurationMs, float64(snap.SizeBytes)/(1<<20))
	atSnap := carriesOn(t, c, sb.ID, "after the snapshot", st)
	write(t, c, sb.ID, "data/after.txt", "written after the snapshot")

	// Two forks of the one snapshot: each starts from its memory and files.
	f1, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: snap.ID, Metadata: map[string]string{"fork": "1"}})
	if err != nil || f1.ForkedFrom == nil || f1.ForkedFrom.Snapshot != snap.ID || f1.Status != "running" {
		t.Fatalf("fork 1: %+v %v", f1, err)
	}
	f2, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: snap.ID})
	if err != nil || f2.ForkedFrom == nil || f2.ID == f1.ID {
		t.Fatalf("fork 2: %+v %v", f2, err)
	}
	for _, f := range []string{f1.ID, f2.ID} {
		got := readState(t, c, f)
		if got.token != st.token || got.pid != st.pid {
			t.Fatalf("fork %s: the holder is %+v, want the source's process (%+v)", f, got, st)
		}
		if got.n > atSnap.n+1000 {
			t.Fatalf("fork %s: counter %d, far past the snapshot's %d", f, got.n, atSnap.n)
		}
		if read(t, c, f, "data/kept.txt") != "from the source" {
			t.Fatalf("fork %s lacks the source's file", f)
		}
		if _, err := c.Files.Read(bg, f, "data/after.txt"); !lbb.IsNotFound(err) {
			t.Fatalf("fork %s has a file written after the snapshot: %v", f, err)
		}
	}
	// …and then diverge: each holder takes its own note, in its own memory.
	write(t, c, f1.ID, "note.in", "one")
	write(t, c, f2.ID, "note.in", "two")
	for f, want := range map[string]string{f1.ID: "one", f2.ID: "two", sb.ID: ""} {
		waitFor(t, 30*time.Second, "the note of "+f, func() bool {
			got := readState(t, c, f)
			return got.token == st.token && got.note == want && got.n > atSnap.n
		})
	}
	write(t, c, f1.ID, "data/f1.txt", "only in fork 1")
	if _, err := c.Files.Read(bg, f2.ID, "data/f1.txt"); !lbb.IsNotFound(err) {
		t.Fatalf("fork 2 sees fork 1's file: %v", err)
	}

	// Deleting the source: its snapshots go (records and bytes), its forks run on.
	if dirs := snapshotDirs(t, s); len(dirs) != 1 || dirs[0] != snap.ID {
		t.Fatalf("snapshot dirs %v, want [%s]", dirs, snap.ID)
	}
	if _, err := c.Sandboxes.Delete(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if dirs := snapshotDirs(t, s); len(dirs) != 0 {
		t.Fatalf("the deleted sandbox's snapshots stay: %v", dirs)
	}
	if _, err := c.GetSnapshot(bg, snap.ID); !lbb.IsNotFound(err) {
		t.Fatalf("the deleted sandbox's snapshot: %v, want 404", err)
	}
	for _, f := range []string{f1.ID, f2.ID} {
		st := readState(t, c, f)
		carriesOn(t, c, f, "fork "+f+" after its source went", st)
		execOK(t, c, f, "python3", "-c", "print(1)")
	}

	// A fork without a snapshot takes one (kept under the source), and a fork's pause keeps
	// its memory too.
	f3, err := c.Sandboxes.Fork(bg, f1.ID, lbb.ForkRequest{})
	if err != nil || f3.ForkedFrom == nil || f3.ForkedFrom.Sandbox != f1.ID {
		t.Fatalf("fork of a fork: %+v %v", f3, err)
	}
	if l, err := c.Sandboxes.Snapshots(bg, f1.ID, lbb.ListParams{}); err != nil || len(l.Snapshots) != 1 || l.Snapshots[0].ID != f3.ForkedFrom.Snapshot {
		t.Fatalf("the fork's snapshot: %+v %v", l, err)
	}
	if got := readState(t, c, f3.ID); got.token != st.token || got.note != "one" {
		t.Fatalf("fork of fork 1: %+v", got)
	}
	if _, err := c.Sandboxes.Delete(bg, f1.ID); err != nil {
		t.Fatal(err)
	}
	if dirs := snapshotDirs(t, s); len(dirs) != 0 {
		t.Fatalf("fork 1's snapshots stay after its delete: %v", dirs)
	}
	carriesOn(t, c, f3.ID, "the fork of a deleted fork", readState(t, c, f3.ID))
}

// TestSnapshotGvisorRestart: a sandbox paused on gvisor is on disk, memory and all: it stays
// paused across a server restart and resumes with its processes.
func TestSnapshotGvisorRestart(t *testing.T) {
	requireGvisor(t)
	s, c, sb, st := holding(t, "gvisor")
	st = carriesOn(t, c, sb.ID, "before pause", st)
	c, got, err := pauseAndRestart(t, s, c, sb.ID, s.stop)
	if err != nil || got.Status != "paused" {
		t.Fatalf("after a restart: %+v %v, want paused", got, err)
	}
	if r, err := c.Sandboxes.Resume(bg, sb.ID); err != nil || r.Status != "running" {
		t.Fatalf("resume after a restart: %+v %v", r, err)
	}
	carriesOn(t, c, sb.ID, "resumed after a restart", st)

	// The CLI: snapshot, snapshots, fork, pause, snapshots --delete.
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := s.cli(args...)
		if err != nil {
			t.Fatalf("lbb %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	snap := cli("sandbox", "snapshot", sb.ID, "--label", "by=cli")
	if !strings.HasPrefix(snap, "snp_") {
		t.Fatalf("lbb sandbox snapshot: %q", snap)
	}
	if out := cli("sandbox", "snapshots", sb.ID); !strings.Contains(out, snap) || !strings.Contains(out, "by=cli") {
		t.Fatalf("lbb sandbox snapshots:\n%s", out)
	}
	fork := cli("sandbox", "fork", sb.ID, "--snapshot", snap)
	if !strings.HasPrefix(fork, "sbx_") {
		t.Fatalf("lbb sandbox fork: %q", fork)
	}
	if out := cli("sandbox", "pause", fork); !strings.Contains(out, "paused") || !strings.Contains(out, "forked from") {
		t.Fatalf("lbb sandbox pause:\n%s", out)
	}
	cli("sandbox", "snapshots", "--delete", snap)
	if _, err := c.GetSnapshot(bg, snap); !lbb.IsNotFound(err) {
		t.Fatalf("after lbb sandbox snapshots --delete: %v", err)
	}
	if out := cli("sandbox", "resume", fork); !strings.Contains(out, "running") {
		t.Fatalf("lbb sandbox resume of the paused fork:\n%s", out)
	}
	carriesOn(t, c, fork, "the CLI's fork", readState(t, c, fork))
}

// TestSnapshotNs: on ns, pause is the freezer (the same process resumes; a restart stops
// it), and snapshots and forks answer 409 not_supported.
func TestSnapshotNs(t *testing.T) {
	s, c, sb, st := holding(t, "ns")
	st = carriesOn(t, c, sb.ID, "before pause", st)
	p, err := c.Sandboxes.Pause(bg, sb.ID)
	if err != nil || p.Status != "paused" {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if _, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"true"}}); !lbb.IsConflict(err) {
		t.Fatalf("exec in a frozen sandbox: %v, want 409", err)
	}
	if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	st = carriesOn(t, c, sb.ID, "after thaw", st)

	for what, call := range map[string]func() error{
		"snapshot": func() error { _, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{}); return err },
		"fork":     func() error { _, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{}); return err },
	} {
		err := call()
		if lbb.CodeOf(err) != "not_supported" || !strings.Contains(err.Error(), `memory snapshots need isolation "gvisor"`) ||
			!strings.Contains(err.Error(), sb.ID) {
			t.Fatalf("%s on ns: %v, want 409 not_supported naming gvisor and the sandbox", what, err)
		}
	}
	carriesOn(t, c, sb.ID, "after the refused snapshot", st)
	if dirs := snapshotDirs(t, s); len(dirs) != 0 {
		t.Fatalf("snapshot dirs on ns: %v", dirs)
	}

	// A restart stops a frozen sandbox like a running one; resume starts it cold.
	c, got, err := pauseAndRestart(t, s, c, sb.ID, s.kill9)
	if err != nil || got.Status != "stopped" || got.EndReason != "server_restart" || got.PausedAt != nil {
		t.Fatalf("a frozen sandbox after a restart: %+v %v, want stopped (server_restart)", got, err)
	}
	if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if read(t, c, sb.ID, "holder.py") != holderScript(t) {
		t.Fatal("the workspace did not survive")
	}
	// Deleting a paused sandbox works.
	if _, err := c.Sandboxes.Pause(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Sandboxes.Delete(bg, sb.ID); err != nil || d.Status != "destroyed" {
		t.Fatalf("delete a paused sandbox: %+v %v", d, err)
	}
}

// TestSnapshotFigures measures, as the client sees them on this host, pause, resume,
// snapshot and fork→first exec on gvisor, and pause and resume on ns (-run Figures -v).
func TestSnapshotFigures(t *testing.T) {
	requireEnv(t)
	const n = 5
	measure := func(name string, f func() error) time.Duration {
		t0 := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return time.Since(t0)
	}
	p50 := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	for _, rt := range []string{"gvisor", "ns"} {
		if _, why := runsc(); rt == "gvisor" && why != "" {
			t.Logf("gvisor skipped: %s", why)
			continue
		}
		s, c, sb, _ := holding(t, rt)
		var pause, resume, snap, snapServer, fork []time.Duration
		for i := 0; i < n; i++ {
			pause = append(pause, measure("pause", func() error { _, err := c.Sandboxes.Pause(bg, sb.ID); return err }))
			resume = append(resume, measure("resume", func() error { _, err := c.Sandboxes.Resume(bg, sb.ID); return err }))
			if rt != "gvisor" {
				continue
			}
			var sn *lbb.Snapshot
			snap = append(snap, measure("snapshot", func() (err error) { sn, err = c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{}); return err }))
			snapServer = append(snapServer, time.Duration(sn.DurationMs*float64(time.Millisecond)))
			var f *lbb.Sandbox
			fork = append(fork, measure("fork→first exec", func() (err error) {
				if f, err = c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: sn.ID}); err != nil {
					return err
				}
				_, err = c.Sandboxes.Exec(bg, f.ID, lbb.ExecParams{Argv: []string{"true"}})
				return err
			}))
			if _, err := c.Sandboxes.Delete(bg, f.ID); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s, p50 of %d: pause %v, resume %v", rt, n, p50(pause), p50(resume))
		if rt == "gvisor" {
			t.Logf("%s, p50 of %d: snapshot %v (server: %v), fork→first exec %v", rt, n, p50(snap), p50(snapServer), p50(fork))
		}
		s.stop()
	}
}
