//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// sandboxTraces lists what of a sandbox is left on the host: mounts, cgroups, processes.
func sandboxTraces(id string) []string {
	var left []string
	if b, err := os.ReadFile("/proc/mounts"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, id) {
				left = append(left, "mount: "+line)
			}
		}
	}
	// lbb*: the default parent's, gvisor's (lbb-gvisor) and a fleet host's own (--cgroup-parent).
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/lbb*/" + id); len(cgs) > 0 {
		left = append(left, cgs...)
	}
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/lbb*/" + id); len(cgs) > 0 {
		left = append(left, cgs...)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			left = append(left, "process: "+p)
		}
	}
	return left
}

// TestCrashRecovery kills lbb serve with SIGKILL while a run sleeps, restarts it, and checks
// that the command is lost, nothing of its sandbox is left, and a retry never runs it again.
func TestCrashRecovery(t *testing.T) {
	s := startServer(t)
	body := `{"run": {"code": "import time\ndef run(input, config):\n    print('started', flush=True)\n    time.sleep(30)\n    return 'finished'"}, "wait_ms": 1500}`
	r, m := s.run("crash-1", body)
	if r.status != 202 {
		t.Fatalf("want 202 while it sleeps: %d %s", r.status, r.body)
	}
	sbx, cmd := m["sandbox"].(string), m["command"].(string)
	if len(sandboxTraces(sbx)) == 0 {
		t.Fatalf("the running sandbox %s has no mount, cgroup or process to look for", sbx)
	}
	s.kill9()

	s.start()
	deadline := time.Now().Add(10 * time.Second)
	for len(sandboxTraces(sbx)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := sandboxTraces(sbx); len(left) > 0 {
		t.Fatalf("left after restart:\n%s", strings.Join(left, "\n"))
	}
	c := s.call("GET", "/v1/commands/"+cmd+"?graph=main", "", nil, "").obj(t)
	if c["status"] != "lost" || c["finished_at"] == nil {
		t.Fatalf("command after restart: %v", c)
	}
	sb := s.call("GET", "/v1/sandboxes/"+sbx+"?graph=main", "", nil, "").obj(t)
	if sb["end_reason"] != "lost" || sb["status"] != "destroyed" {
		t.Fatalf("sandbox after restart: %v", sb)
	}
	again, m2 := s.run("crash-1", body)
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || m2["status"] != "lost" || m2["command"] != cmd {
		t.Fatalf("retry: %d %v %s", again.status, again.header, again.body)
	}
	l := s.call("GET", "/v1/commands?graph=main", "", nil, "").obj(t)
	if n := len(l["data"].([]any)); n != 1 {
		t.Fatalf("%d command records; the retry ran again", n)
	}
	time.Sleep(500 * time.Millisecond)
	if left := sandboxTraces(sbx); len(left) > 0 {
		t.Fatalf("the retry started something: %v", left)
	}
}

// TestGracefulShutdown stops the server with SIGTERM while a run sleeps past the grace
// period: the server ends the sandbox and records how.
func TestGracefulShutdown(t *testing.T) {
	// 3 s: the half-second run must be claimed and finish within it, and under load a claim
	// alone has taken 0.6 s.
	s := startServer(t, "--shutdown-grace", "3s")
	quick, mq := s.run("quick", `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(0.5)\n    return 'done'"}, "wait_ms": 0}`)
	slow, ms := s.run("slow", `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(60)"}, "wait_ms": 0}`)
	if quick.status != 202 || slow.status != 202 {
		t.Fatalf("%d %d", quick.status, slow.status)
	}
	t0 := time.Now()
	s.stop()
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	if left := sandboxTraces(ms["sandbox"].(string)); len(left) > 0 {
		t.Fatalf("left after shutdown: %v", left)
	}
	s.start()
	q := s.call("GET", "/v1/commands/"+mq["command"].(string)+"?graph=main", "", nil, "").obj(t)
	if q["status"] != "succeeded" {
		t.Fatalf("a run shorter than the grace period: %v", q)
	}
	c := s.call("GET", "/v1/commands/"+ms["command"].(string)+"?graph=main", "", nil, "").obj(t)
	sb := s.call("GET", "/v1/sandboxes/"+ms["sandbox"].(string)+"?graph=main", "", nil, "").obj(t)
	if c["status"] != "killed" || sb["end_reason"] != "server_shutdown" {
		t.Fatalf("a run past the grace period: command %v, sandbox %v", c["status"], sb["end_reason"])
	}
}

// TestShutdownLeavesNothing stops, with SIGTERM, a server (on each isolation) that holds a
// long-lived sandbox running a command, a one-call run in flight, and its warm pool, being
// built: once it has exited, nothing of theirs is left on the host — no process (none names
// its data directory or holds its output), no mount, no loop device, no cgroup.
func TestShutdownLeavesNothing(t *testing.T) {
	for _, iso := range []string{"ns", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			requireEnv(t)
			if _, no := runsc(); iso == "gvisor" && no != "" {
				testkit.SkipPrivileged(t, "%s", no)
			}
			s := startServer(t, "--runtime", iso, "--shutdown-grace", "1s")
			r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 300}`)
			if r.status != 201 {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			sb := r.obj(t)["id"].(string)
			c := s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "sleeper"},
				`{"argv": ["sh", "-c", "sleep 300 & sleep 300"], "wait_ms": 0}`)
			if c.status != 202 {
				t.Fatalf("command: %d %s", c.status, c.body)
			}
			run, m := s.run("in-flight", `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(60)"}, "wait_ms": 0}`)
			if run.status != 202 {
				t.Fatalf("run: %d %s", run.status, run.body)
			}
			ids := []string{sb, m["sandbox"].(string)}
			if left := s.traces(ids); len(left) == 0 {
				t.Fatal("the running sandboxes leave no trace to look for")
			}
			t0 := time.Now()
			s.stop()
			// It ends what it started within its grace period: a step that ignored the
			// shutdown (a warm pool's build waiting out its 30 s for an agent) kept the server
			// alive far longer.
			if d := time.Since(t0); d > 15*time.Second {
				t.Errorf("the server took %v to stop, with a grace period of 1s", d)
			}
			var left []string
			for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if left = s.traces(ids); len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("left after the server stopped:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// traces lists what of the server's sandboxes (ids, and any other) is on the host:
// processes whose command line names its data directory, mounts under it, loop devices on
// its files, and the sandboxes' cgroups and processes (sandboxTraces).
func (s *server) traces(ids []string) []string {
	var left []string
	for _, id := range ids {
		left = append(left, sandboxTraces(id)...)
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s.dataDir) {
			left = append(left, "process "+p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, s.dataDir) {
				left = append(left, "mount: "+line)
			}
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s.dataDir) {
			left = append(left, "loop device "+p+": "+strings.TrimSpace(string(b)))
		}
	}
	return left
}

// TestRetention runs the janitor with short retention periods.
func TestRetention(t *testing.T) {
	s := startServer(t, "--output-retention", "1s", "--retention", "3s", "--janitor-interval", "200ms")
	_, m := s.run("ret-1", `{"run": {"code": "def run(input, config):\n    print('kept for a while')\n    return 1"}}`)
	cmd := "/v1/commands/" + m["command"].(string) + "?graph=main"
	if c := s.call("GET", cmd, "", nil, "").obj(t); c["stdout"].(map[string]any)["tail"] != "kept for a while\n" {
		t.Fatalf("fresh record: %v", c)
	}
	waitFor(t, 10*time.Second, "the output to expire", func() bool {
		o := s.call("GET", cmd, "", nil, "").obj(t)["stdout"].(map[string]any)
		return o["head"] == "" && o["tail"] == "" && o["expired"] == true && o["bytes"] == 17.0 &&
			o["truncated"] == true && o["dropped_bytes"] == 17.0
	})
	replay, _ := s.run("ret-1", `{"run": {"code": "def run(input, config):\n    print('kept for a while')\n    return 1"}}`)
	if strings.Contains(string(replay.body), "kept for a while") {
		t.Fatalf("the replayed answer keeps expired output: %s", replay.body)
	}
	waitFor(t, 10*time.Second, "the records to go", func() bool {
		return s.call("GET", cmd, "", nil, "").status == 404 &&
			s.call("GET", "/v1/sandboxes/"+m["sandbox"].(string)+"?graph=main", "", nil, "").status == 404
	})
	// The key still never runs twice.
	again, _ := s.run("ret-1", `{"run": {"code": "def run(input, config):\n    print('kept for a while')\n    return 1"}}`)
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after retention the key ran again: %s", again.body)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
