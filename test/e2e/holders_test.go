//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/postgres"
)

// TestControlPlaneHolders: two control planes on one PostgreSQL database and two hosts. (a)
// One is SIGKILLed and restarted while the other works: the other's command and one-call
// run still succeed, its sandbox still runs, its reservation of a key stays. (b) The other
// is SIGKILLed while a command and a run execute: within --peer-dead-after and a heartbeat
// the survivor adopts it: both end lost (a retry of the run's key answers that record, and
// runs nothing), its reservation is released, and its long-lived sandbox is stopped, disk
// kept, and resumes through the survivor; when the killed one comes back, it leaves that
// sandbox to the survivor.
func TestControlPlaneHolders(t *testing.T) {
	requireEnv(t)
	if remoteHost || fleetMode {
		t.Skip("runs its own control planes and host agents; once is enough")
	}
	t0 := time.Now()
	f, cps := postgresFleet(t, 2, nil, []string{"--peer-dead-after", "3s"})
	t.Logf("%v: the fleet is up", time.Since(t0).Round(100*time.Millisecond))
	cp1, cp2 := cps[0], cps[1]
	storeURL := flagOf(cp1.proc.cmd.Args, "--store")

	// A long-lived sandbox through one, a file on its disk, a command that runs 6 s in it,
	// and a one-call run of 6 s.
	r := cp1.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 600}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	sb := r.obj(t)["id"].(string)
	exec := func(s *server, key, argv string) map[string]any {
		t.Helper()
		r := s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": key},
			`{"argv": `+argv+`, "wait_ms": 0}`)
		if r.status != 200 && r.status != 202 {
			t.Fatalf("command %s: %d %s", key, r.status, r.body)
		}
		return r.obj(t)
	}
	if c := exec(cp1, "write", `["sh", "-c", "echo kept > kept.txt"]`); c["id"] == nil {
		t.Fatalf("command: %v", c)
	}
	slowCmd := exec(cp1, "slow", `["sh", "-c", "sleep 6; echo done"]`)["id"].(string)
	const sleepy = `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(%s)\n    return 'finished'"}, "wait_ms": 0}`
	_, m := cp1.run("run-1", strings.Replace(sleepy, "%s", "6", 1))
	run1 := m["command"].(string)
	// A reservation of a call one makes now (a key reserved, no command yet), as its own
	// store would write it.
	id1 := planeID(t, cp1)
	reserve(t, storeURL, id1, "in-flight-1")

	// (a) Two is killed and restarted while one works.
	cp2.proc.end(syscall.SIGKILL)
	cp2.proc, cp2.url = launch(t, cp2.proc.cmd.Args[1:], f.log, servingLine)
	t.Logf("%v: two restarted", time.Since(t0).Round(100*time.Millisecond))
	for _, id := range []string{slowCmd, run1} {
		if c := waitCommand(t, cp1, id, 30*time.Second); c["status"] != "succeeded" {
			t.Fatalf("one's command %s after two's restart: %v", id, c)
		}
	}
	if rec := cp1.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t); rec["status"] != "running" {
		t.Fatalf("one's sandbox after two's restart: %v", rec)
	}
	if !reserved(t, storeURL, "in-flight-1") {
		t.Fatal("two's start released a key one had reserved")
	}

	// (b) One is killed while a command and a run execute.
	t.Logf("%v: (a) done", time.Since(t0).Round(100*time.Millisecond))
	longCmd := exec(cp1, "long", `["sh", "-c", "sleep 60"]`)["id"].(string)
	_, m = cp1.run("run-2", strings.Replace(sleepy, "%s", "60", 1))
	run2, run2Sandbox := m["command"].(string), m["sandbox"].(string)
	if r := cp2.call("POST", "/v1/sandboxes/"+sb+"/resume?graph=main", "", nil, ""); r.status != 409 {
		t.Fatalf("one's sandbox through two while one lives: %d %s, want 409", r.status, r.body)
	}
	killed := time.Now()
	cp1.proc.end(syscall.SIGKILL)
	for _, id := range []string{longCmd, run2} {
		if c := waitCommand(t, cp2, id, 20*time.Second); c["status"] != "lost" {
			t.Fatalf("one's command %s through two after one died: %v", id, c)
		}
	}
	t.Logf("two adopted one %v after its kill (--peer-dead-after 3s)", time.Since(killed).Round(100*time.Millisecond))
	again, m2 := cp2.run("run-2", strings.Replace(sleepy, "%s", "60", 1))
	if again.header.Get("Idempotent-Replayed") != "true" || m2["status"] != "lost" || m2["command"] != run2 {
		t.Fatalf("the run's retry through two: %d %v %s", again.status, again.header, again.body)
	}
	// The adoption goes on (sandboxes stopped, then reservations released) after the commands.
	for deadline := time.Now().Add(10 * time.Second); reserved(t, storeURL, "in-flight-1"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("one's reservation of a call that ran nothing was not released by its adopter")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(sandboxTraces(run2Sandbox)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lost run's sandbox is left: %v", sandboxTraces(run2Sandbox))
		}
	}
	rec := cp2.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t)
	if rec["status"] != "stopped" {
		t.Fatalf("one's long-lived sandbox after its adoption: %v", rec)
	}
	if r := cp2.call("POST", "/v1/sandboxes/"+sb+"/resume?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("resume through two: %d %s", r.status, r.body)
	}
	if c := waitCommand(t, cp2, exec(cp2, "read", `["cat", "kept.txt"]`)["id"].(string), 30*time.Second); c["status"] != "succeeded" ||
		!strings.Contains(c["stdout"].(map[string]any)["tail"].(string), "kept") {
		t.Fatalf("the file after resuming through two: %v", c)
	}
	if c := exec(cp2, "long", `["sh", "-c", "sleep 60"]`); c["id"] != longCmd || c["status"] != "lost" {
		t.Fatalf("the lost command's key retried through two: %v", c)
	}
	// One comes back on its data directory: a new life, which leaves alone what two holds now
	// (the sandbox two resumed runs on).
	t.Logf("%v: (b) done", time.Since(t0).Round(100*time.Millisecond))
	cp1.proc, cp1.url = launch(t, cp1.proc.cmd.Args[1:], f.log, servingLine)
	t.Logf("%v: one restarted", time.Since(t0).Round(100*time.Millisecond))
	if rec := cp2.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t); rec["status"] != "running" {
		t.Fatalf("the sandbox two holds after one came back: %v", rec)
	}
	if r := cp1.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "one-again"}, `{"argv": ["true"]}`); r.status != 409 {
		t.Fatalf("two's sandbox through one's new life: %d %s, want 409", r.status, r.body)
	}
	if !strings.Contains(string(cp2.call("GET", "/metrics", "", nil, "").body), "lbb_control_plane_adoptions_total 1") {
		t.Error("two's /metrics does not count one adoption")
	}
	if !strings.Contains(f.log.String(), "adopted a dead control plane") {
		t.Error("no log line of the adoption")
	}
}

// flagOf answers the value of flag in args.
func flagOf(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// planeID answers the control plane id of server s (its data directory's).
func planeID(t *testing.T, s *server) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "control-plane-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// reserve writes, as control plane holder's store does, a reservation of key in graph main
// of a call that has run nothing yet.
func reserve(t *testing.T, storeURL, holder, key string) {
	t.Helper()
	db, err := postgres.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetHolder(holder)
	if err := db.CreateIdempotency(context.Background(), store.Idempotency{Graph: "main", Key: key, Route: "POST /v1/sandboxes",
		RequestHash: "h", State: store.IdempotencyRunning, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// reserved reports whether key of graph main is reserved.
func reserved(t *testing.T, storeURL, key string) bool {
	t.Helper()
	db, err := postgres.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.GetIdempotency(context.Background(), "main", key)
	return err == nil
}

// waitCommand waits for command id to end, through s, and answers its record.
func waitCommand(t *testing.T, s *server, id string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := s.call("GET", "/v1/commands/"+id+"?graph=main", "", nil, "").obj(t)
		if st, _ := c["status"].(string); st != "queued" && st != "running" || time.Now().After(deadline) {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}
