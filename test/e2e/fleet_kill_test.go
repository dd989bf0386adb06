//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFleetKillDuringRuns: a control plane on PostgreSQL and two `lbb host` processes; 50
// one-call runs at once, each of which first tells a server of the test's (on loopback,
// through its sandbox's egress) that it started, then sleeps. Host a is killed (SIGKILL)
// while at least 5 of them run there. Every run ends succeeded or lost; none ran twice (no run
// told the test twice, also well after the end); a succeeded run told it once and answers
// its input; a lost run's sandbox was on a and ended host_lost; every retry of a key answers
// its one record; the graph holds exactly 50 command records and 50 sandboxes, all ended.
// Host a started again on its data directory leaves nothing of its runs on the machine.
func TestFleetKillDuringRuns(t *testing.T) {
	requireEnv(t)
	if remoteHost || fleetMode {
		t.Skip("runs its own host agents; once is enough")
	}
	var mu sync.Mutex
	marks := map[string]int{}
	mark := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		marks[r.URL.Path[1:]]++
		mu.Unlock()
		w.Write([]byte("ok"))
	}))
	t.Cleanup(mark.Close)
	marked := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := make(map[string]int, len(marks))
		for k, v := range marks {
			m[k] = v
		}
		return m
	}
	// The sandboxes reach it by a name (127.0.0.1 itself is NO_PROXY inside) that the egress
	// guard resolves with the test's DNS server, through --egress-permit of loopback.
	markURL := "http://mark.test:" + mark.URL[strings.LastIndex(mark.URL, ":")+1:]
	permit := []string{"--egress-permit", "127.0.0.0/8", "--egress-resolver", dnsServer(t, map[string]string{"mark.test": "127.0.0.1"})}
	f, cps := postgresFleet(t, 1, permit, permit)
	s, hosts := cps[0], f.hosts

	const n = 50
	code := "import time, urllib.request\n" +
		"def run(input, config):\n" +
		"    urllib.request.urlopen(config['mark'] + '/' + str(input), timeout=30).read()\n" +
		"    time.sleep(3)\n" +
		"    return input\n"
	body := func(i int) string {
		return jsonBody(t, map[string]any{"run": map[string]any{"code": code, "input": i, "config": map[string]string{"mark": markURL},
			"egress": map[string]any{"mode": "public"}}, "wait_ms": 0})
	}
	// One run first, waited for: the marker works through the fleet.
	probe := jsonBody(t, map[string]any{"run": map[string]any{"code": code, "input": -1, "config": map[string]string{"mark": markURL},
		"egress": map[string]any{"mode": "public"}}, "wait_ms": 60000})
	_, pm := s.run("probe", probe)
	probeCmd, _ := pm["command"].(string)
	if m := pm; m["status"] != "succeeded" || m["result"] != -1.0 || marked()["-1"] != 1 {
		t.Fatalf("a run that tells the test it started: %v (marks %v)", m, marked())
	}
	cmds, sbs := make([]string, n), make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, m := s.run(fmt.Sprintf("run-%d", i), body(i))
			cmds[i], sbs[i] = m["command"].(string), m["sandbox"].(string)
		})
	}
	wg.Wait()
	submitted := time.Now()

	// a dies once at least 5 of the runs are running there (they told the test they started).
	runningOn := func(host string) int {
		k, got := 0, marked()
		for i, id := range sbs {
			if got[fmt.Sprint(i)] == 0 {
				continue
			}
			sb := s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "").obj(t)
			if sb["host"] == host && sb["status"] == "running" {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(2 * time.Minute); runningOn("a") < 5; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no 5 runs running on host a in 2 minutes; started: %v", marked())
		}
	}
	startedAtKill := len(marked())
	hosts[0].proc.end(syscall.SIGKILL)
	killed := time.Now()

	status := map[string]int{}
	byHost := map[string]map[string]int{"a": {}, "b": {}}
	for i, id := range cmds {
		var c map[string]any
		for deadline := time.Now().Add(2 * time.Minute); ; {
			c = s.call("GET", "/v1/commands/"+id+"?graph=main&wait_ms=20000", "", nil, "").obj(t)
			if c["status"] != "queued" && c["status"] != "running" && c["status"] != "starting" || time.Now().After(deadline) {
				break
			}
		}
		st, _ := c["status"].(string)
		sb := s.call("GET", "/v1/sandboxes/"+sbs[i]+"?graph=main", "", nil, "").obj(t)
		host, _ := sb["host"].(string)
		times := marked()[fmt.Sprint(i)]
		switch {
		case st == "succeeded":
			if c["result"] != float64(i) || times != 1 || sb["status"] != "destroyed" || sb["end_reason"] != "run_finished" {
				t.Errorf("run %d succeeded with result %v, started %d times; its sandbox %v", i, c["result"], times, sb)
			}
		case st == "lost":
			if times > 1 || host != "a" || sb["status"] != "destroyed" || sb["end_reason"] != "host_lost" {
				t.Errorf("run %d lost, started %d times; its sandbox %v", i, times, sb)
			}
		default:
			t.Errorf("run %d ended %q, want succeeded or lost: %v", i, st, c)
		}
		status[st]++
		if byHost[host] != nil {
			byHost[host][st]++
		} else {
			t.Errorf("run %d: its sandbox is on host %q: %v", i, host, sb)
		}
		r, m := s.run(fmt.Sprintf("run-%d", i), body(i))
		if r.header.Get("Idempotent-Replayed") != "true" || m["command"] != id || m["status"] != st {
			t.Errorf("retry of run %d: %d %v %s", i, r.status, r.header, r.body)
		}
	}
	settled := time.Since(killed)
	if status["lost"] == 0 || status["succeeded"] == 0 {
		t.Errorf("runs ended %v; want some of each", status)
	}

	// Every record accounted for: 50 commands and 50 sandboxes, all ended, no other.
	l := s.call("GET", "/v1/commands?graph=main&limit=1000", "", nil, "").obj(t)["data"].([]any)
	want := map[string]bool{}
	for _, id := range cmds {
		want[id] = true
	}
	want[probeCmd] = true
	for _, c := range l {
		id := c.(map[string]any)["id"].(string)
		if !want[id] {
			t.Errorf("a command record no run made: %v", c)
		}
		delete(want, id)
	}
	if len(l) != n+1 || len(want) != 0 {
		t.Errorf("%d command records, want %d; missing %v", len(l), n+1, want)
	}
	sl := s.call("GET", "/v1/sandboxes?graph=main&limit=1000", "", nil, "").obj(t)["data"].([]any)
	if len(sl) != n+1 {
		t.Errorf("%d sandbox records, want %d", len(sl), n+1)
	}
	for _, sb := range sl {
		if sb.(map[string]any)["status"] != "destroyed" {
			t.Errorf("a sandbox not ended: %v", sb)
		}
	}

	// No run starts again later (a retry by the fleet would tell the test a second time).
	time.Sleep(5 * time.Second)
	if got := marked(); len(got) > n+1 {
		t.Errorf("%d runs told the test they started, of %d", len(got), n+1)
	}
	for k, v := range marked() {
		if v != 1 {
			t.Errorf("run %s started %d times", k, v)
		}
	}
	// a comes back on its data directory: what it ran when it died goes (processes, mounts,
	// cgroups, disks).
	var onA []string
	for i, id := range sbs {
		if s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "").obj(t)["host"] == "a" {
			onA = append(onA, sbs[i])
		}
	}
	u, _ := url.Parse(hosts[0].url)
	f.startHost(hosts[0], u.Host)
	for deadline, i := time.Now().Add(60*time.Second), 0; i < len(onA); {
		if left := sandboxTraces(onA[i]); len(left) > 0 || where(hosts, onA[i]) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("left of %s after host a came back: %v %q", onA[i], left, where(hosts, onA[i]))
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		i++
	}
	t.Logf("50 runs: %v (by host %v); %d had started when a was killed %s after they were sent; all settled %s after",
		status, byHost, startedAtKill, killed.Sub(submitted).Round(100*time.Millisecond), settled.Round(100*time.Millisecond))
}
