//go:build linux

package e2e

import (
	"crypto/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// waitingLine is what lbb serve --hosts remote prints while no host has joined.
var waitingLine = regexp.MustCompile(`lbb: (waiting) for a host to join`)

// TestFleetJoin: one lbb serve --hosts remote and two lbb host --control processes, each with
// its own data directory, on loopback. The hosts are given their tokens by lbb hosts add and
// join on their own; a wrong token is refused with a stable code. Sandboxes land on both;
// host a killed (SIGKILL): its sandboxes end host_lost and new ones go to b; a started again
// (at another address) joins again, is reconciled (nothing of what ended is left on its
// disk) and takes new sandboxes; stopped sandboxes are no load; a one-call run succeeds. The
// control plane restarted has both hosts back and places on both. With
// PostgreSQL, a second control plane on the database takes the hosts that joined the first.
func TestFleetJoin(t *testing.T) {
	requireEnv(t)
	if remoteHost {
		t.Skip("runs its own host agents; once is enough")
	}
	log := &testkit.Buffer{}
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), stderr: log}
	storeArgs := []string{"--host-secret", rand.Text()}
	if postgresStore {
		storeArgs = append(storeArgs, "--store", postgresSchema(t))
	}
	// The hosts' tokens, from the control plane's store and host secret.
	hosts := []*fleetHost{{name: "a"}, {name: "b"}}
	for _, h := range hosts {
		out, err := exec.Command(lbbBin, append([]string{"hosts", "add", h.name, "--data-dir", s.dataDir}, storeArgs...)...).Output()
		if err != nil {
			t.Fatalf("lbb hosts add %s: %v", h.name, err)
		}
		h.token, h.dir = strings.TrimSpace(string(out)), filepath.Join(newDataDir(t), "data")
		if !strings.HasPrefix(h.token, "lbbh_"+h.name+".") {
			t.Fatalf("token of %s: %q", h.name, h.token)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s.url = "http://" + addr
	s.proc, _ = launch(t, append([]string{"serve", "--hosts", "remote", "--addr", addr, "--data-dir", s.dataDir,
		"--images-dir", imagesDir, "--host-lost-after", "3s"}, storeArgs...), log, waitingLine)
	startHost := func(h *fleetHost) {
		h.proc, h.url = launch(t, []string{"host", "--control", s.url, "--token", h.token, "--listen", "127.0.0.1:0",
			"--data-dir", h.dir, "--images-dir", imagesDir, "--pool=false"}, log, hostLine)
	}
	t.Cleanup(func() {
		s.stop()
		for _, h := range hosts {
			if held := h.proc.end(syscall.SIGTERM); len(held) > 0 {
				t.Errorf("host %s exited, but processes it started still hold its output: %s", h.name, strings.Join(held, "; "))
			}
		}
		if t.Failed() {
			t.Logf("log:\n%s", lastLines(log.String(), 80))
		}
	})
	// Before any host joined, the API answers 503; a registration with a wrong token is
	// refused.
	if r := s.call("GET", "/v1/hosts", "-", nil, ""); r.status != 503 {
		t.Fatalf("the API with no host: %d %s", r.status, r.body)
	}
	wrong := func() {
		t.Helper()
		r := s.call("POST", "/v1/hosts/register", "lbbh_a.bm90LXRoZS10b2tlbg", nil, `{"id":"a","url":"http://127.0.0.1:1"}`)
		if r.status != 401 || !strings.Contains(string(r.body), `"code":"host_token_invalid"`) {
			t.Fatalf("registering with a wrong token: %d %s", r.status, r.body)
		}
	}
	wrong()
	for _, h := range hosts {
		startHost(h)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the control plane did not start once hosts joined")
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(b))
	wrong()

	// hostStates answers each host's state and URL in GET /v1/hosts.
	hostStates := func() map[string][2]string {
		got := map[string][2]string{}
		for _, h := range s.call("GET", "/v1/hosts", "", nil, "").obj(t)["data"].([]any) {
			m := h.(map[string]any)
			url, _ := m["url"].(string)
			got[m["id"].(string)] = [2]string{m["state"].(string), url}
		}
		return got
	}
	waitHosts := func(want map[string]string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got := hostStates()
			ok := true
			for id, w := range want {
				if got[id][0] != w {
					ok = false
				}
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("hosts %v, want %v", got, want)
			}
		}
	}
	waitHosts(map[string]string{"a": "up", "b": "up"})
	if got := hostStates(); got["a"][1] != hosts[0].url || got["b"][1] != hosts[1].url {
		t.Fatalf("hosts' URLs %v, want %s and %s", got, hosts[0].url, hosts[1].url)
	}
	if postgresStore {
		// A second control plane on the database, started before work arrives: the hosts
		// that registered with the first are its hosts too.
		s2 := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), stderr: log, key: s.key}
		s2.proc, s2.url = launch(t, append([]string{"serve", "--hosts", "remote", "--addr", "127.0.0.1:0", "--data-dir", s2.dataDir,
			"--images-dir", imagesDir, "--host-lost-after", "3s"}, storeArgs...), log, servingLine)
		t.Cleanup(s2.stop)
		r := s2.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 600}`)
		if r.status != 201 {
			t.Fatalf("create through the second control plane: %d %s", r.status, r.body)
		}
		sb := r.obj(t)
		if h := where(hosts, sb["id"].(string)); h == "" || h != sb["host"] {
			t.Fatalf("a sandbox of the second control plane: host %v, on %q's disk", sb["host"], h)
		}
		if r := s2.call("DELETE", "/v1/sandboxes/"+sb["id"].(string)+"?graph=main", "", nil, ""); r.status != 200 && r.status != 204 {
			t.Fatalf("delete through the second control plane: %d %s", r.status, r.body)
		}
	}

	create := func() (id, host string) {
		t.Helper()
		r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"expires_in_seconds": 600}`)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		sb := r.obj(t)
		id = sb["id"].(string)
		if h := where(hosts, id); h != sb["host"] {
			t.Fatalf("sandbox %s says host %v, is on %q's disk", id, sb["host"], h)
		}
		return id, sb["host"].(string)
	}
	on := map[string][]string{}
	for range 4 {
		id, h := create()
		on[h] = append(on[h], id)
	}
	if len(on["a"]) != 2 || len(on["b"]) != 2 {
		t.Fatalf("placed %v, want two on each host", on)
	}
	// Commands run on a's sandboxes.
	for _, id := range on["a"] {
		c := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "echo-" + id},
			`{"argv": ["echo", "hi"], "wait_ms": 60000}`).obj(t)
		if c["status"] != "succeeded" {
			t.Fatalf("command on a: %v", c)
		}
	}

	hosts[0].proc.end(syscall.SIGKILL)
	killed := time.Now()
	waitHostLost(t, s, on["a"], killed)
	waitHosts(map[string]string{"a": "lost", "b": "up"})
	for range 2 {
		id, h := create()
		if h != "b" {
			t.Fatalf("sandbox %s went to %s with a lost", id, h)
		}
		on["b"] = append(on["b"], id)
	}

	// a again, on its data directory, at another port: it joins again and is reconciled.
	old := hosts[0].url
	startHost(hosts[0])
	if hosts[0].url == old {
		t.Logf("host a came back at the same address %s", old)
	}
	waitHosts(map[string]string{"a": "up", "b": "up"})
	if got := hostStates()["a"][1]; got != hosts[0].url {
		t.Fatalf("host a at %s, recorded at %s", hosts[0].url, got)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := ""
		for _, id := range on["a"] {
			if where(hosts[:1], id) != "" {
				left = id
			}
		}
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s, ended host_lost, is still on a's disk", left)
		}
	}
	// b runs four, a none: the next sandboxes go to a.
	for range 2 {
		if id, h := create(); h != "a" {
			t.Fatalf("sandbox %s went to %s; a runs none, b four", id, h)
		}
	}
	// Stopped sandboxes are no load: with b's four stopped, b takes the next one.
	for _, id := range on["b"] {
		if r := s.call("POST", "/v1/sandboxes/"+id+"/stop?graph=main", "", nil, ""); r.status != 200 {
			t.Fatalf("stop %s: %d %s", id, r.status, r.body)
		}
	}
	if id, h := create(); h != "b" {
		t.Fatalf("sandbox %s went to %s; a runs two, b none (four stopped)", id, h)
	}
	if m := s.metrics(t); !strings.Contains(m, `lbb_host_up{host="a",state="up"} 1`) || !strings.Contains(m, `lbb_host_up{host="b",state="up"} 1`) {
		t.Fatalf("metrics per host:\n%s", grepLines(m, "lbb_host_"))
	}
	if _, m := s.run("run-1", `{"run": {"code": "def run(input, config):\n    return input + 1", "input": 41}, "wait_ms": 60000}`); m["status"] != "succeeded" || m["result"] != 42.0 {
		t.Fatalf("a one-call run on the fleet: %v", m)
	}

	// The control plane restarted: it has its hosts back (the store's, and their next
	// registration) and places on them.
	s.stop()
	s.proc, _ = launch(t, append([]string{"serve", "--hosts", "remote", "--addr", addr, "--data-dir", s.dataDir,
		"--images-dir", imagesDir, "--host-lost-after", "3s"}, storeArgs...), log, servingLine)
	waitHosts(map[string]string{"a": "up", "b": "up"})
	seen := map[string]bool{}
	for range 2 {
		_, h := create()
		seen[h] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("after the control plane restarted, sandboxes went to %v; want both hosts", seen)
	}
}
