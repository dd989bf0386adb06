//go:build linux

package e2e

import (
	"crypto/rand"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// fleetHost is one `lbb host` of a fleet, with its data directory.
type fleetHost struct {
	name, dir, token, url string
	proc                  *proc
}

// where answers which of hosts holds sandbox id on its disk (its driver's state directory).
func where(hosts []*fleetHost, id string) string {
	for _, h := range hosts {
		if m, _ := filepath.Glob(filepath.Join(h.dir, "*", id)); len(m) > 0 {
			return h.name
		}
	}
	return ""
}

// TestFleetTwoHosts: one control plane and two `lbb host` processes, each with its own data
// directory. Sandboxes land on both hosts and commands, files and previews work on each.
// Host a is killed (SIGKILL) while one-call runs and a command run on it: every run is
// succeeded or lost, none ran twice (a retry of its key answers the same record), a's
// sandboxes end host_lost while b's go on (stop and resume too), and new runs succeed on b.
// A sandbox stopped on a keeps its record and cannot resume while a is lost. Host a started
// again on its data directory is reconciled: nothing of what the control plane ended is left
// on the machine, the stopped sandbox resumes there with its files, and new sandboxes land on
// it again.
func TestFleetTwoHosts(t *testing.T) {
	requireEnv(t)
	if remoteHost {
		t.Skip("runs its own host agents; once is enough")
	}
	log := &testkit.Buffer{}
	hosts := []*fleetHost{{name: "a"}, {name: "b"}}
	startHost := func(h *fleetHost, listen string) {
		h.proc, h.url = launch(t, []string{"host", "--listen", listen, "--token", h.token, "--data-dir", h.dir,
			"--images-dir", imagesDir, "--pool-min", "1", "--pool-max", "2"}, log, hostLine)
	}
	for _, h := range hosts {
		h.dir, h.token = filepath.Join(newDataDir(t), "data"), rand.Text()
		startHost(h, "127.0.0.1:0")
	}
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), stderr: log}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.dataDir, "--images-dir", imagesDir,
		"--host-agent", "a=" + hosts[0].url + ",b=" + hosts[1].url, "--host-agent-token", hosts[0].token + "," + hosts[1].token,
		"--host-lost-after", "3s", "--preview-addr", "127.0.0.1:0"}
	if postgresStore {
		args = append(args, "--store", postgresSchema(t))
	}
	s.proc, s.url = launch(t, args, log, servingLine)
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(b))
	t.Cleanup(func() {
		s.stop()
		for _, h := range hosts {
			if held := h.proc.end(syscall.SIGTERM); len(held) > 0 {
				t.Errorf("host %s exited, but processes it started still hold its output: %s", h.name, strings.Join(held, "; "))
			}
		}
		if t.Failed() {
			t.Logf("log:\n%s", lastLines(log.String(), 80))
		} else if testing.Verbose() {
			for line := range strings.Lines(log.String()) {
				if strings.Contains(line, `"part":"fleet"`) || strings.Contains(line, "host_lost") {
					t.Log(strings.TrimSpace(line))
				}
			}
		}
	})

	// Long-lived sandboxes: on both hosts; a file written through the API is read by a
	// command and read back.
	create := func() string {
		t.Helper()
		r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 600}`)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		return r.obj(t)["id"].(string)
	}
	on := map[string][]string{}
	for i := range 4 {
		id := create()
		h := where(hosts, id)
		if h == "" {
			t.Fatalf("sandbox %s is on neither host's disk", id)
		}
		on[h] = append(on[h], id)
		if sb := s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "").obj(t); sb["host"] != h {
			t.Fatalf("sandbox %s on %s says host %v", id, h, sb["host"])
		}
		content := fmt.Sprintf("hello from %s %d", h, i)
		if r := s.call("PUT", "/v1/sandboxes/"+id+"/files/content?graph=main&path=note.txt", "",
			map[string]string{"Content-Type": "application/octet-stream"}, content); r.status != 200 && r.status != 201 {
			t.Fatalf("write on %s: %d %s", h, r.status, r.body)
		}
		c := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "cat-" + id},
			`{"argv": ["cat", "note.txt"], "wait_ms": 60000}`).obj(t)
		if out, _ := c["stdout"].(map[string]any); c["status"] != "succeeded" || out["tail"] != content {
			t.Fatalf("command on %s: %v", h, c)
		}
		if r := s.call("GET", "/v1/sandboxes/"+id+"/files/content?graph=main&path=note.txt", "", nil, ""); r.status != 200 || string(r.body) != content {
			t.Fatalf("read on %s: %d %s", h, r.status, r.body)
		}
	}
	if len(on["a"]) == 0 || len(on["b"]) == 0 {
		t.Fatalf("sandboxes did not land on both hosts: %v", on)
	}
	// A preview of a port reaches the sandbox on its host.
	for _, h := range []string{"a", "b"} {
		id := on[h][0]
		if r := s.call("PUT", "/v1/sandboxes/"+id+"/files/content?graph=main&path=srv.py", "",
			map[string]string{"Content-Type": "application/octet-stream"}, previewServer); r.status != 200 && r.status != 201 {
			t.Fatalf("write srv.py on %s: %d %s", h, r.status, r.body)
		}
		s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "srv-" + id},
			`{"argv": ["python3", "srv.py", "8000"], "wait_ms": 0}`)
		r := s.call("POST", "/v1/sandboxes/"+id+"/ports/8000/url?graph=main", "", nil, `{"expires_in_seconds": 300}`)
		if r.status != 200 && r.status != 201 {
			t.Fatalf("preview URL on %s: %d %s", h, r.status, r.body)
		}
		raw := r.obj(t)["url"].(string)
		pu, _ := url.Parse(raw)
		hc := previewClient(pu.Port())
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			resp, err := hc.Get(raw)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(string(b), "lbb preview") {
					break
				}
				err = fmt.Errorf("%d %s", resp.StatusCode, b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the preview of a sandbox on %s: %v", h, err)
			}
		}
	}

	// A sandbox on a is stopped: its disk stays there.
	parked := ""
	for i := 0; parked == ""; i++ {
		if id := create(); where(hosts, id) == "a" {
			parked = id
		} else if i == 6 {
			t.Fatal("no sandbox lands on a")
		}
	}
	if r := s.call("PUT", "/v1/sandboxes/"+parked+"/files/content?graph=main&path=kept.txt", "",
		map[string]string{"Content-Type": "application/octet-stream"}, "kept on a"); r.status != 200 && r.status != 201 {
		t.Fatalf("write on a: %d %s", r.status, r.body)
	}
	if r := s.call("POST", "/v1/sandboxes/"+parked+"/stop?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("stop on a: %d %s", r.status, r.body)
	}

	// A command runs in a sandbox on a, and one-call runs on both hosts, when a dies.
	lostCmd := s.call("POST", "/v1/sandboxes/"+on["a"][0]+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "sleeper"},
		`{"argv": ["sleep", "60"], "wait_ms": 0}`).obj(t)["id"].(string)
	const n = 8
	body := `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(4)\n    return input", "input": %d}, "wait_ms": 0}`
	cmds := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, m := s.run(fmt.Sprintf("run-%d", i), fmt.Sprintf(body, i))
			cmds[i] = m["command"].(string)
		})
	}
	wg.Wait()
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; i < n; {
		c := s.call("GET", "/v1/commands/"+cmds[i]+"?graph=main", "", nil, "").obj(t)
		if c["status"] == "running" || c["status"] == "succeeded" {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %d did not start: %v", i, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	hosts[0].proc.end(syscall.SIGKILL)
	killed := time.Now()

	// Every run ends succeeded or lost; the retry of each key answers its one record.
	status := map[string]int{}
	for i, id := range cmds {
		c := s.call("GET", "/v1/commands/"+id+"?graph=main&wait_ms=30000", "", nil, "").obj(t)
		st, _ := c["status"].(string)
		if st != "succeeded" && st != "lost" {
			t.Fatalf("run %d: %v", i, c)
		}
		status[st]++
		r, m := s.run(fmt.Sprintf("run-%d", i), fmt.Sprintf(body, i))
		if r.header.Get("Idempotent-Replayed") != "true" || m["command"] != id || m["status"] != st {
			t.Fatalf("retry of run %d: %d %v %s", i, r.status, r.header, r.body)
		}
		if st == "lost" {
			sb := s.call("GET", "/v1/sandboxes/"+m["sandbox"].(string)+"?graph=main", "", nil, "").obj(t)
			if sb["end_reason"] != "host_lost" || sb["host"] != "a" {
				t.Fatalf("the sandbox of lost run %d: %v", i, sb)
			}
		}
	}
	if status["lost"] == 0 || status["succeeded"] == 0 {
		t.Fatalf("runs ended %v; want some on each host", status)
	}
	t.Logf("runs when host a died: %v", status)

	// a's sandboxes end host_lost, its command lost; b's go on.
	waitHostLost(t, s, on["a"], killed)
	if c := s.call("GET", "/v1/commands/"+lostCmd+"?graph=main&wait_ms=20000", "", nil, "").obj(t); c["status"] != "lost" {
		t.Fatalf("the command running on host a: %v", c)
	}
	for _, id := range on["b"] {
		c := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "after-" + id},
			`{"argv": ["cat", "note.txt"], "wait_ms": 60000}`).obj(t)
		if c["status"] != "succeeded" {
			t.Fatalf("command on host b after a died: %v", c)
		}
	}
	// A stopped sandbox resumes on the host that holds its disk.
	kept := on["b"][0]
	for _, step := range []string{"stop", "resume"} {
		if r := s.call("POST", "/v1/sandboxes/"+kept+"/"+step+"?graph=main", "", nil, ""); r.status != 200 {
			t.Fatalf("%s %s: %d %s", step, kept, r.status, r.body)
		}
	}
	if r := s.call("GET", "/v1/sandboxes/"+kept+"/files/content?graph=main&path=note.txt", "", nil, ""); r.status != 200 || !strings.HasPrefix(string(r.body), "hello from b") {
		t.Fatalf("read after resume: %d %s", r.status, r.body)
	}
	hostStates := func() map[string]any {
		got := map[string]any{}
		for _, h := range s.call("GET", "/v1/hosts", "", nil, "").obj(t)["data"].([]any) {
			got[h.(map[string]any)["id"].(string)] = h.(map[string]any)["state"]
		}
		return got
	}
	if got := hostStates(); got["a"] != "lost" || got["b"] != "up" {
		t.Fatalf("GET /v1/hosts while a is dead: %v", got)
	}
	// The stopped sandbox on a keeps its record, and cannot resume while a is lost.
	if sb := s.call("GET", "/v1/sandboxes/"+parked+"?graph=main", "", nil, "").obj(t); sb["status"] != "stopped" {
		t.Fatalf("the stopped sandbox on a, a lost: %v", sb)
	}
	if r := s.call("POST", "/v1/sandboxes/"+parked+"/resume?graph=main", "", nil, ""); r.status != 503 {
		t.Fatalf("resume on a lost host: %d %s", r.status, r.body)
	}
	if m := s.metrics(t); !strings.Contains(m, `lbb_host_up{host="a",state="lost"} 0`) || !strings.Contains(m, `lbb_host_up{host="b",state="up"} 1`) {
		t.Fatalf("metrics per host:\n%s", grepLines(m, "lbb_host_"))
	}
	for i := range 3 {
		_, m := s.run(fmt.Sprintf("after-%d", i), `{"run": {"code": "def run(input, config):\n    return input + 1", "input": 41}, "wait_ms": 60000}`)
		if m["status"] != "succeeded" || m["result"] != 42.0 {
			t.Fatalf("run %d after host a died: %v", i, m)
		}
	}
	if id := create(); where(hosts, id) != "b" {
		t.Fatalf("a new sandbox went to %q, not b", where(hosts, id))
	}
	l := s.call("GET", "/v1/commands?graph=main&limit=1000", "", nil, "").obj(t)
	if got, want := len(l["data"].([]any)), 4+2+1+n+len(on["b"])+3; got != want {
		t.Fatalf("%d command records, want %d", got, want)
	}

	// a comes back on its data directory and address: what the control plane ended there
	// goes, and it takes new sandboxes again.
	u, _ := url.Parse(hosts[0].url)
	startHost(hosts[0], u.Host)
	deadline = time.Now().Add(30 * time.Second)
	for _, id := range on["a"] {
		for len(sandboxTraces(id)) > 0 || where(hosts, id) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("left of %s after host a came back: %v %q", id, sandboxTraces(id), where(hosts, id))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for got := hostStates(); got["a"] != "up"; got = hostStates() {
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/hosts once a is back: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The stopped sandbox resumes on a with its workspace.
	if r := s.call("POST", "/v1/sandboxes/"+parked+"/resume?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("resume once a is back: %d %s", r.status, r.body)
	}
	if r := s.call("GET", "/v1/sandboxes/"+parked+"/files/content?graph=main&path=kept.txt", "", nil, ""); r.status != 200 || string(r.body) != "kept on a" {
		t.Fatalf("read after resume on a: %d %s", r.status, r.body)
	}
	for i := 0; ; i++ {
		if where(hosts, create()) == "a" {
			break
		}
		if i == 5 {
			t.Fatal("no new sandbox went to host a after it came back")
		}
	}
}

// grepLines answers the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// waitHostLost waits (30 s at most after killed) until each of ids, host a's sandboxes, is no
// longer running, and fails unless each ended destroyed with end_reason host_lost.
func waitHostLost(t *testing.T, s *server, ids []string, killed time.Time) {
	t.Helper()
	for _, id := range ids {
		var sb map[string]any
		for {
			sb = s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "").obj(t)
			if sb["status"] != "running" || time.Since(killed) > 30*time.Second {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if sb["status"] != "destroyed" || sb["end_reason"] != "host_lost" {
			t.Fatalf("sandbox %s on host a after it died: %v", id, sb)
		}
	}
	t.Logf("host a's sandboxes ended host_lost %s after it died", time.Since(killed).Round(100*time.Millisecond))
}
