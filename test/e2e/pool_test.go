//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// The warm pool seen from the outside: long-lived sandboxes and one-call runs served from
// slots the pool made, against a real `lbb serve` (the pool is on by default).

// metric sums the samples of a Prometheus metric from /metrics whose labels include all of
// labels ("key", "bare", …).
func (s *server) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(s.metrics(t)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, fmt.Sprintf("%s=%q", labels[i], labels[i+1])) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// waitReady waits until the pool has a parked slot of key.
func (s *server) waitReady(t *testing.T, key string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "a ready "+key+" slot", func() bool { return s.metric(t, "lbb_pool_ready", "key", key) >= 1 })
}

// sandboxState says what of a sandbox the ns driver keeps on the host: its state directory.
func (s *server) sandboxState(id string) []string {
	left := sandboxTraces(id)
	if _, err := os.Lstat(filepath.Join(s.dataDir, "sandboxes", id)); err == nil {
		left = append(left, "state directory "+filepath.Join(s.dataDir, "sandboxes", id))
	}
	return left
}

// TestPoolLevel3: a long-lived sandbox is a warm slot handed over (its id is the slot's,
// which the driver knows it by), the time to interactive (create, then `node -v`) is served
// warm, and it stops, resumes with its workspace and machine id, and is deleted leaving
// nothing.
func TestPoolLevel3(t *testing.T) {
	s := startServer(t)
	c := s.client(t, "main")
	s.waitReady(t, "bare")
	warm0 := s.metric(t, "lbb_pool_claims_total", "key", "bare", "path", "warm")

	t0 := time.Now()
	created := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{}`)
	if created.status != 201 {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	id := created.obj(t)["id"].(string)
	tCreate := time.Since(t0)
	r := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "node-v"},
		`{"argv": ["node", "-v"], "wait_ms": 30000}`)
	tti := time.Since(t0)
	cmd := r.obj(t)
	if r.status != 200 || cmd["status"] != "succeeded" || !strings.HasPrefix(cmd["stdout"].(map[string]any)["tail"].(string), "v24.") {
		t.Fatalf("node -v: %d %s", r.status, r.body)
	}
	t.Logf("time to interactive, warm: create %.1f ms, create + node -v %.1f ms", ms(tCreate), ms(tti))
	if got := s.metric(t, "lbb_pool_claims_total", "key", "bare", "path", "warm"); got != warm0+1 {
		t.Fatalf("warm claims of bare slots %v → %v: the create was not served warm", warm0, got)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "sandboxes", id)); err != nil {
		t.Fatalf("the driver does not know the sandbox by its id: %v", err)
	}

	write(t, c, id, "kept.txt", "from before the stop")
	execOK(t, c, id, "sh", "-c", "echo made > /workspace/made.txt")
	mid := strings.TrimSpace(execOK(t, c, id, "cat", "/etc/machine-id").Stdout.Tail)
	if len(mid) != 32 {
		t.Fatalf("machine id %q", mid)
	}
	if st, err := c.Sandboxes.Stop(bg, id); err != nil || st.Status != "stopped" {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if len(sandboxTraces(id)) > 0 {
		t.Fatalf("a stopped sandbox still runs: %v", sandboxTraces(id))
	}
	if r, err := c.Sandboxes.Resume(bg, id); err != nil || r.Status != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if got := read(t, c, id, "kept.txt"); got != "from before the stop" {
		t.Fatalf("after resume: %q", got)
	}
	if got := read(t, c, id, "made.txt"); got != "made\n" {
		t.Fatalf("after resume: %q", got)
	}
	if got := strings.TrimSpace(execOK(t, c, id, "cat", "/etc/machine-id").Stdout.Tail); got != mid {
		t.Errorf("machine id after resume %q, was %q", got, mid)
	}
	d := s.call("DELETE", "/v1/sandboxes/"+id+"?graph=main", "", nil, "")
	if d.status != 200 || d.obj(t)["status"] != "destroyed" {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	if left := s.sandboxState(id); len(left) > 0 {
		t.Fatalf("left after delete:\n%s", strings.Join(left, "\n"))
	}

	// A second create, also warm, is another machine.
	s.waitReady(t, "bare")
	sb2 := newSandbox(t, c, lbb.CreateParams{})
	if got := strings.TrimSpace(execOK(t, c, sb2.ID, "cat", "/etc/machine-id").Stdout.Tail); got == mid || len(got) != 32 {
		t.Errorf("second sandbox's machine id %q (the first's was %q)", got, mid)
	}
	if got := s.metric(t, "lbb_pool_claims_total", "key", "bare", "path", "warm"); got != warm0+2 {
		t.Errorf("warm claims of bare slots %v → %v", warm0, got)
	}
	c.Sandboxes.Delete(bg, sb2.ID)
	if left := s.sandboxState(sb2.ID); len(left) > 0 {
		t.Fatalf("left after delete:\n%s", strings.Join(left, "\n"))
	}
}

// TestPoolCrashKeepsWarmSandbox: after a crash, a long-lived sandbox that came from the pool
// is stopped with its disk kept (the driver knows it by its record's id) and resumes; the
// parked slots are reaped and rebuilt.
func TestPoolCrashKeepsWarmSandbox(t *testing.T) {
	s := startServer(t)
	c := s.client(t, "main")
	s.waitReady(t, "bare")
	warm0 := s.metric(t, "lbb_pool_claims_total", "key", "bare", "path", "warm")
	sb := newSandbox(t, c, lbb.CreateParams{})
	if got := s.metric(t, "lbb_pool_claims_total", "key", "bare", "path", "warm"); got != warm0+1 {
		t.Fatalf("the create was not served warm (%v → %v)", warm0, got)
	}
	write(t, c, sb.ID, "kept.txt", "survives a crash")
	ents, _ := os.ReadDir(filepath.Join(s.dataDir, "sandboxes"))
	var parked []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sbx_") && e.Name() != sb.ID {
			parked = append(parked, e.Name())
		}
	}
	if len(parked) == 0 {
		t.Fatal("no parked slot to see reaped")
	}
	s.kill9()
	s.start()
	c = s.client(t, "main")
	got, err := c.Sandboxes.Get(bg, sb.ID)
	if err != nil || got.Status != "stopped" || got.EndReason != "server_restart" {
		t.Fatalf("after the crash: %+v %v", got, err)
	}
	for _, id := range parked {
		if left := s.sandboxState(id); len(left) > 0 {
			t.Errorf("parked slot %s survived the restart: %v", id, left)
		}
	}
	if r, err := c.Sandboxes.Resume(bg, sb.ID); err != nil || r.Status != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if got := read(t, c, sb.ID, "kept.txt"); got != "survives a crash" {
		t.Fatalf("after the crash and resume: %q", got)
	}
	c.Sandboxes.Delete(bg, sb.ID)
	if left := s.sandboxState(sb.ID); len(left) > 0 {
		t.Fatalf("left after delete: %v", left)
	}
}

// runWarm posts a one-call python run (extra: more fields of run) once a python slot is
// ready, checks that it was served warm, and answers the decoded body.
func (s *server) runWarm(t *testing.T, key, code, extra string) map[string]any {
	t.Helper()
	s.waitReady(t, "python")
	w0 := s.metric(t, "lbb_pool_claims_total", "key", "python", "path", "warm")
	body := fmt.Sprintf(`{"run": {"code": %q%s}, "wait_ms": 60000}`, code, extra)
	r, m := s.run(key, body)
	if r.status != 200 {
		t.Fatalf("%s: %d %s", key, r.status, r.body)
	}
	if w := s.metric(t, "lbb_pool_claims_total", "key", "python", "path", "warm"); w != w0+1 {
		t.Fatalf("%s was not served warm (warm claims %v → %v)", key, w0, w)
	}
	return m
}

func resultOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok || m["ok"] != true {
		t.Fatalf("run: %v", m)
	}
	return r
}

// TestPoolHostileRuns: hostile one-call runs on warm slots are contained as on cold ones,
// the next warm claim is healthy, and nothing crosses from one claim to the next.
func TestPoolHostileRuns(t *testing.T) {
	s := startServer(t)

	// A fork bomb stops at the pids limit.
	m := s.runWarm(t, "fork-bomb", `import os, time
def run(input, config):
    n = 0
    try:
        while n < 100000:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError as e:
        return {"forks": n, "errno": e.errno}
    return {"forks": n, "errno": 0}`, "")
	if r := resultOf(t, m); r["errno"] != 11.0 || r["forks"].(float64) >= 256 {
		t.Errorf("fork bomb: %v", r)
	}

	// A memory bomb ends as oom.
	m = s.runWarm(t, "memory-bomb", "def run(input, config):\n    x = b'x' * (3 << 30)\n    return len(x)", "")
	if m["status"] != "oom" || m["ok"] != false {
		t.Errorf("memory bomb: status %v: %v", m["status"], m)
	}

	// Nothing of the host is reachable: its files, its loopback, the outside.
	marker := fmt.Sprintf("lbb-e2e-pool-%d", time.Now().UnixNano())
	var planted []string
	for _, dir := range []string{os.TempDir(), "/root", "/"} {
		p := filepath.Join(dir, marker)
		if os.WriteFile(p, []byte("host secret"), 0o644) == nil {
			planted = append(planted, p)
			defer os.Remove(p)
		}
	}
	port := runtimetest.HostSecret(t)
	paths, _ := json.Marshal(planted)
	m = s.runWarm(t, "host-reach", runtimetest.AttemptPy+fmt.Sprintf(`import os
def run(input, config):
    return {"files": [p for p in %s if os.path.exists(p)],
            "host": attempt("127.0.0.1", %d), "out": attempt("1.1.1.1", 80),
            "ifaces": sorted(os.listdir("/sys/class/net"))}`, paths, port), "")
	r := resultOf(t, m)
	if fmt.Sprint(r["files"]) != "[]" || r["host"] != "ECONNREFUSED" || r["out"] != "ENETUNREACH" || fmt.Sprint(r["ifaces"]) != "[lo]" {
		t.Errorf("host reach: %v", r)
	}

	// The next claim is healthy, and nothing crosses between claims.
	probe := `import os, random
def run(input, config):
    seen = {p: os.path.exists(p) for p in ("/tmp/claim-1", "/workspace/claim-1")}
    for p in ("/tmp/claim-1", "/workspace/claim-1"):
        with open(p, "w") as f:
            f.write("x")
    return {"seen": seen, "random": random.random(), "urandom": os.urandom(16).hex(),
            "machine_id": open("/etc/machine-id").read().strip(), "sum": sum(input)}`
	var got []map[string]any
	for i := range 2 {
		m := s.runWarm(t, fmt.Sprintf("probe-%d", i), probe, `, "input": [1, 2, 3]`)
		got = append(got, resultOf(t, m))
	}
	a, b := got[0], got[1]
	t.Logf("claim 1: %v\nclaim 2: %v", a, b)
	for i, r := range got {
		if r["sum"] != 6.0 || fmt.Sprint(r["seen"]) != "map[/tmp/claim-1:false /workspace/claim-1:false]" {
			t.Errorf("claim %d: %v", i+1, r)
		}
		if len(fmt.Sprint(r["machine_id"])) != 32 {
			t.Errorf("claim %d: machine id %v", i+1, r["machine_id"])
		}
	}
	if a["random"] == b["random"] || a["urandom"] == b["urandom"] || a["machine_id"] == b["machine_id"] {
		t.Errorf("two warm claims share random state or machine id: %v %v", a, b)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
