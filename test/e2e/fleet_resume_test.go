//go:build linux

package e2e

import (
	"crypto/rand"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs/s3test"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestFleetResumeAnywhere: two `lbb host` processes with their own data directories share a
// bucket (SeaweedFS on loopback). A sandbox stopped on host a has its workspace archived
// there; a is killed (SIGKILL) and declared lost; the sandbox resumes on host b with its
// files, and its record says b. When a comes back, its stale copy of the sandbox is destroyed.
func TestFleetResumeAnywhere(t *testing.T) {
	requireEnv(t)
	if remoteHost {
		t.Skip("runs its own host agents; once is enough")
	}
	f := sharedFleet(t)
	s, hosts, startHost := f.s, f.hosts, f.startHost

	// A sandbox on a, with a file, stopped: its workspace goes to the bucket.
	sb := ""
	for i := 0; sb == ""; i++ {
		r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 600}`)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		if id := r.obj(t)["id"].(string); where(hosts, id) == "a" {
			sb = id
		} else if i == 6 {
			t.Fatal("no sandbox lands on a")
		}
	}
	c := s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "write"},
		`{"argv": ["bash", "-c", "head -c 300000 /dev/urandom > data.bin && sha256sum data.bin"], "wait_ms": 60000}`).obj(t)
	sum, _ := c["stdout"].(map[string]any)["tail"].(string)
	if c["status"] != "succeeded" || len(sum) < 64 {
		t.Fatalf("write on a: %v", c)
	}
	if r := s.call("POST", "/v1/sandboxes/"+sb+"/stop?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("stop on a: %d %s", r.status, r.body)
	}
	if rec := s.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t); rec["workspace"] == nil {
		t.Fatalf("a stopped sandbox without an archived workspace: %v", rec)
	}

	// a dies and is declared lost; the sandbox resumes on b from the archive.
	hosts[0].proc.end(syscall.SIGKILL)
	waitLost(t, s, "a")
	if r := s.call("POST", "/v1/sandboxes/"+sb+"/resume?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("resume with host a lost: %d %s", r.status, r.body)
	}
	if rec := s.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t); rec["host"] != "b" || rec["status"] != "running" {
		t.Fatalf("the resumed sandbox: %v", rec)
	}
	c = s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "check"},
		`{"argv": ["sha256sum", "data.bin"], "wait_ms": 60000}`).obj(t)
	if got, _ := c["stdout"].(map[string]any)["tail"].(string); c["status"] != "succeeded" || got != sum {
		t.Fatalf("the file after resuming on b: %v (want %q)", c, sum)
	}

	// a comes back: its stale copy goes.
	u, _ := url.Parse(hosts[0].url)
	startHost(hosts[0], u.Host)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(hosts[0].dir, "*", sb)); len(m) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host a still holds sandbox %s after it came back", sb)
		}
	}
	if rec := s.call("GET", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "").obj(t); rec["host"] != "b" || rec["status"] != "running" {
		t.Fatalf("the sandbox once a is back: %v", rec)
	}
}

// sharedFleet starts a control plane and two `lbb host` processes (a and b, extra flags
// hostArgs) with their own data directories sharing a bucket (SeaweedFS on loopback), and
// answers them.
func sharedFleet(t *testing.T, hostArgs ...string) *shared {
	t.Helper()
	s3 := s3test.Start(t)
	bucket := s3.NewBucket(t)
	for k, v := range s3test.Env {
		t.Setenv(k, v)
	}
	log := &testkit.Buffer{}
	hosts := []*fleetHost{{name: "a"}, {name: "b"}}
	startHost := func(h *fleetHost, listen string) {
		h.proc, h.url = launch(t, append([]string{"host", "--listen", listen, "--token", h.token, "--data-dir", h.dir,
			"--images-dir", imagesDir, "--pool-min", "0", "--pool-gvisor-min", "0", "--blobs", bucket,
			// Their own cgroups: both machines are this one, and the same sandbox has a
			// (stale) copy on each.
			"--cgroup-parent", "lbb-e2e-fleet-" + h.name}, hostArgs...), log, hostLine)
	}
	for _, h := range hosts {
		h.dir, h.token = filepath.Join(newDataDir(t), "data"), rand.Text()
		startHost(h, "127.0.0.1:0")
	}
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), stderr: log}
	s.proc, s.url = launch(t, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.dataDir, "--images-dir", imagesDir,
		"--host-agent", "a=" + hosts[0].url + ",b=" + hosts[1].url, "--host-agent-token", hosts[0].token + "," + hosts[1].token,
		"--host-lost-after", "3s", "--preview-addr", "127.0.0.1:0", "--blobs", bucket}, log, servingLine)
	key, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(key))
	t.Cleanup(func() {
		s.stop()
		for _, h := range hosts {
			if h.proc != nil {
				h.proc.end(syscall.SIGTERM)
			}
		}
		if t.Failed() {
			t.Logf("log:\n%s", lastLines(log.String(), 80))
		}
	})

	return &shared{s: s, hosts: hosts, startHost: startHost, log: log, bucket: bucket}
}

// shared is a fleet of sharedFleet: its control plane, its hosts, how to start a host again
// (on its data directory), their log, and the bucket's URL.
type shared struct {
	s         *server
	hosts     []*fleetHost
	startHost func(h *fleetHost, listen string)
	log       *testkit.Buffer
	bucket    string
}

// waitLost waits until the control plane declares host name lost.
func waitLost(t *testing.T, s *server, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		states := map[string]any{}
		for _, h := range s.call("GET", "/v1/hosts", "", nil, "").obj(t)["data"].([]any) {
			states[h.(map[string]any)["id"].(string)] = h.(map[string]any)["state"]
		}
		if states[name] == "lost" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s is not lost: %v", name, states)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
