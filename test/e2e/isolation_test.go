//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// kernelCode answers the kernel the code sees: gVisor's Sentry reports its own release and
// /proc/version, whatever the host runs.
const kernelCode = `import os
def run(input, config):
    return {"release": os.uname().release, "version": open("/proc/version").read().strip()}`

// runsc answers where runsc is (where scripts/install-runsc.sh puts it, and where lbb serve
// looks), or why gvisor cannot be tested here.
func runsc() (string, string) {
	p := gvisor.DefaultRunsc
	if _, err := os.Stat(p); err != nil {
		return "", "runsc is not installed at " + p + " (run scripts/install-runsc.sh)"
	}
	return p, ""
}

func hostRelease(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

type kernel struct {
	Release string `json:"release"`
	Version string `json:"version"`
}

// runKernel runs kernelCode with body's isolation fields and answers the kernel it saw and
// the sandbox's record.
func runKernel(t *testing.T, s *server, key string, body map[string]any) (kernel, map[string]any) {
	t.Helper()
	r, res := s.run(key, jsonBody(t, body))
	if r.status != 200 || res["ok"] != true {
		t.Fatalf("run %s: %d %s", key, r.status, r.body)
	}
	var k kernel
	raw, _ := json.Marshal(res["result"])
	if err := json.Unmarshal(raw, &k); err != nil || k.Release == "" {
		t.Fatalf("run %s: result %s", key, raw)
	}
	rec := s.call("GET", "/v1/sandboxes/"+res["sandbox"].(string)+"?graph=main", "", nil, "")
	if rec.status != 200 {
		t.Fatalf("sandbox record: %d %s", rec.status, rec.body)
	}
	return k, map[string]any{"answer": res, "record": rec.obj(t)}
}

func wantIsolation(t *testing.T, what string, got map[string]any, want string) {
	t.Helper()
	if iso := got["answer"].(map[string]any)["isolation"]; iso != want {
		t.Errorf("%s: the answer says isolation %v, want %s", what, iso, want)
	}
	if iso := got["record"].(map[string]any)["isolation"]; iso != want {
		t.Errorf("%s: the record says isolation %v, want %s", what, iso, want)
	}
}

// TestIsolation: one server (default ns) runs each call on the isolation it names: a
// one-call run on gvisor and one on ns, which see different kernels; a template saved with
// isolation gvisor, and a call that overrides it; a Level 3 sandbox on gvisor; and the 400s.
func TestIsolation(t *testing.T) {
	_, noGvisor := runsc()
	// A small ns pool keeps the shared machine calm; gvisor keeps its own (--pool-gvisor-min 1).
	s := startServer(t, "--pool-min", "1", "--pool-max", "2")
	host := hostRelease(t)

	if noGvisor != "" {
		// What a host without runsc answers: gvisor is known but unavailable, saying why.
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "no-gvisor"},
			`{"run": {"code": "def run(i, c): return 1", "isolation": "gvisor"}}`)
		if r.status != 400 || r.errCode(t) != "isolation_unavailable" || !strings.Contains(string(r.body), "runsc") {
			t.Errorf("gvisor without runsc: %d %s, want 400 isolation_unavailable naming runsc", r.status, r.body)
		}
	}

	t.Run("one-call ns and gvisor", func(t *testing.T) {
		nsK, nsRec := runKernel(t, s, "kern-ns", map[string]any{"run": map[string]any{"code": kernelCode}, "isolation": "ns"})
		wantIsolation(t, "isolation ns", nsRec, "ns")
		if nsK.Release != host {
			t.Errorf("on ns the code sees kernel %q, want the host's %q", nsK.Release, host)
		}
		defK, defRec := runKernel(t, s, "kern-default", map[string]any{"run": map[string]any{"code": kernelCode}})
		wantIsolation(t, "no isolation (the server's default)", defRec, "ns")
		if defK.Release != host {
			t.Errorf("on the default the code sees kernel %q, want the host's %q", defK.Release, host)
		}
		if noGvisor != "" {
			testkit.SkipPrivileged(t, "%s", noGvisor)
		}
		t0 := time.Now()
		gvK, gvRec := runKernel(t, s, "kern-gvisor", map[string]any{"run": map[string]any{"code": kernelCode, "isolation": "gvisor"}})
		t.Logf("one-call gvisor run: %v end to end; kernel %q (%s); host %q", time.Since(t0).Round(time.Millisecond), gvK.Release, gvK.Version, host)
		wantIsolation(t, "run.isolation gvisor", gvRec, "gvisor")
		if gvK.Release == host || gvK.Version == nsK.Version {
			t.Errorf("on gvisor the code sees kernel %q (%s); on ns %q (%s): want different kernels", gvK.Release, gvK.Version, nsK.Release, nsK.Version)
		}
	})

	t.Run("one-call microvm", func(t *testing.T) {
		// The microvm driver, offered beside ns: its sandbox runs on the guest kernel the
		// image build fetched (under TCG on a host whose KVM cannot boot a guest: seconds).
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "kern-microvm"},
			string(jsonBody(t, map[string]any{"run": map[string]any{"code": kernelCode, "isolation": "microvm"}, "wait_ms": 240000})))
		if r.status == 400 && r.errCode(t) == "isolation_unavailable" {
			testkit.SkipPrivileged(t, "microvm is not available here: %s", r.body)
		}
		var res map[string]any
		if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res["ok"] != true {
			t.Fatalf("microvm run: %d %s", r.status, r.body)
		}
		k := res["result"].(map[string]any)
		if iso := res["isolation"]; iso != "microvm" {
			t.Errorf("the answer says isolation %v, want microvm", iso)
		}
		if rel := k["release"]; rel == host || !strings.Contains(fmt.Sprint(rel), "cloud-amd64") {
			t.Errorf("on microvm the code sees kernel %v, want the guest's (a Debian cloud kernel), not the host's %q", rel, host)
		}
		t.Logf("one-call microvm run: kernel %v", k["release"])
	})

	t.Run("warm gvisor", func(t *testing.T) {
		if noGvisor != "" {
			testkit.SkipPrivileged(t, "%s", noGvisor)
		}
		// The server keeps gvisor slots (--pool-gvisor-min, default 1) beside ns's: once one
		// is parked, a one-call gvisor run takes it.
		deadline := time.Now().Add(2 * time.Minute)
		for metric(t, s, `lbb_pool_ready{key="gvisor/python"}`) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("no gvisor/python slot got ready:\n%s", lastLines(s.stderr.String(), 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
		warm := metric(t, s, `lbb_pool_claims_total{key="gvisor/python",path="warm"}`)
		t0 := time.Now()
		k, rec := runKernel(t, s, "kern-gvisor-warm", map[string]any{"run": map[string]any{"code": kernelCode, "isolation": "gvisor"}})
		t.Logf("warm one-call gvisor run: %v end to end", time.Since(t0).Round(time.Millisecond))
		wantIsolation(t, "warm gvisor", rec, "gvisor")
		if k.Release == host {
			t.Errorf("the warm gvisor run saw the host's kernel %q", k.Release)
		}
		if got := metric(t, s, `lbb_pool_claims_total{key="gvisor/python",path="warm"}`); got != warm+1 {
			t.Errorf("warm gvisor/python claims went from %v to %v, want one more", warm, got)
		}
	})

	t.Run("template", func(t *testing.T) {
		if noGvisor != "" {
			testkit.SkipPrivileged(t, "%s", noGvisor)
		}
		r := s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil,
			jsonBody(t, map[string]any{"name": "kernel", "code": kernelCode, "isolation": "gvisor"}))
		if r.status != 201 || r.obj(t)["isolation"] != "gvisor" {
			t.Fatalf("template: %d %s", r.status, r.body)
		}
		if g := s.call("GET", "/v1/sandboxes/templates/kernel?graph=main", "", nil, ""); g.obj(t)["isolation"] != "gvisor" {
			t.Errorf("GET template: %s", g.body)
		}
		k, rec := runKernel(t, s, "tpl-gvisor", map[string]any{"run": map[string]any{"template": "kernel"}})
		wantIsolation(t, "the template's isolation", rec, "gvisor")
		if k.Release == host {
			t.Errorf("the template's run saw the host's kernel %q; want gVisor's", k.Release)
		}
		k, rec = runKernel(t, s, "tpl-ns", map[string]any{"run": map[string]any{"template": "kernel", "isolation": "ns"}})
		wantIsolation(t, "the call over the template", rec, "ns")
		if k.Release != host {
			t.Errorf("a call naming ns over a gvisor template saw kernel %q; want the host's %q", k.Release, host)
		}
	})

	t.Run("level 3 gvisor", func(t *testing.T) {
		if noGvisor != "" {
			testkit.SkipPrivileged(t, "%s", noGvisor)
		}
		r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"isolation": "gvisor", "expires_in_seconds": 300}`)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		sb := r.obj(t)
		id := sb["id"].(string)
		defer s.call("DELETE", "/v1/sandboxes/"+id+"?graph=main", "", nil, "")
		if sb["isolation"] != "gvisor" || sb["status"] != "running" {
			t.Fatalf("created: %s", r.body)
		}
		c := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "l3-uname"},
			`{"argv": ["sh", "-c", "uname -r; echo hello > f; cat f"], "wait_ms": 60000}`)
		cmd := c.obj(t)
		out, _ := cmd["stdout"].(map[string]any)
		tail, _ := out["tail"].(string)
		if c.status != 200 || cmd["status"] != "succeeded" || !strings.HasSuffix(tail, "hello\n") {
			t.Fatalf("exec: %d %s", c.status, c.body)
		}
		if rel := strings.SplitN(tail, "\n", 2)[0]; rel == host || rel == "" {
			t.Errorf("the Level 3 gvisor sandbox runs kernel %q; want gVisor's, not the host's %q", rel, host)
		}
		g := s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "")
		if g.obj(t)["isolation"] != "gvisor" {
			t.Errorf("record: %s", g.body)
		}
		// The sandbox is gvisor's: its state is under <data-dir>/gvisor, not ns's.
		if _, err := os.Stat(filepath.Join(s.dataDir, "gvisor", id)); err != nil {
			t.Errorf("no gvisor state for %s: %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(s.dataDir, "sandboxes", id)); err == nil {
			t.Errorf("the ns driver holds %s too", id)
		}
		// Stop and resume find it on gvisor.
		for _, step := range []string{"stop", "resume"} {
			if r := s.call("POST", "/v1/sandboxes/"+id+"/"+step+"?graph=main", "", nil, ""); r.status != 200 || r.obj(t)["isolation"] != "gvisor" {
				t.Fatalf("%s: %d %s", step, r.status, r.body)
			}
		}
		c = s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "l3-after"},
			`{"argv": ["cat", "f"], "wait_ms": 60000}`)
		if out, _ := c.obj(t)["stdout"].(map[string]any); out["tail"] != "hello\n" {
			t.Errorf("after resume: %d %s", c.status, c.body)
		}
		if d := s.call("DELETE", "/v1/sandboxes/"+id+"?graph=main", "", nil, ""); d.status != 200 {
			t.Errorf("delete: %d %s", d.status, d.body)
		}
	})

	t.Run("CLI", func(t *testing.T) {
		if noGvisor != "" {
			testkit.SkipPrivileged(t, "%s", noGvisor)
		}
		file := filepath.Join(t.TempDir(), "kernel.py")
		if err := os.WriteFile(file, []byte(kernelCode), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errb, err := s.cli("run", file, "--isolation", "gvisor", "--json")
		if err != nil {
			t.Fatalf("lbb run --isolation gvisor: %v %s", err, errb)
		}
		var run struct {
			Isolation string `json:"isolation"`
			Result    kernel `json:"result"`
		}
		if err := json.Unmarshal([]byte(out), &run); err != nil || run.Isolation != "gvisor" || run.Result.Release == host {
			t.Errorf("lbb run --isolation gvisor: %v %s", err, out)
		}
		out, errb, err = s.cli("sandbox", "create", "--isolation", "gvisor", "--json")
		if err != nil {
			t.Fatalf("lbb sandbox create --isolation gvisor: %v %s", err, errb)
		}
		var sb struct {
			ID        string `json:"id"`
			Isolation string `json:"isolation"`
		}
		if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Isolation != "gvisor" {
			t.Errorf("lbb sandbox create --isolation gvisor: %v %s", err, out)
		}
		if sb.ID != "" {
			s.cli("sandbox", "delete", sb.ID)
		}
		if _, errb, err := s.cli("templates", "create", "viacli", "--file", file, "--isolation", "nope"); err == nil || !strings.Contains(errb, "nope") {
			t.Errorf("lbb templates create --isolation nope: %v %s", err, errb)
		}
	})

	t.Run("400s", func(t *testing.T) {
		for _, tc := range []struct {
			what, path, body, code string
			idem                   bool
		}{
			{"run.isolation unknown", "/v1/sandboxes", `{"run": {"code": "def run(i, c): return 1", "isolation": "firecracker"}}`, "invalid_request", true},
			{"isolation unknown", "/v1/sandboxes", `{"run": {"code": "def run(i, c): return 1"}, "isolation": "vmware"}`, "invalid_request", true},
			{"create unknown", "/v1/sandboxes", `{"isolation": "firecracker"}`, "invalid_request", false},
			{"template unknown", "/v1/sandboxes/templates", `{"name": "bad", "isolation": "firecracker"}`, "invalid_request", false},
			{"run.isolation and isolation differ", "/v1/sandboxes", `{"run": {"code": "def run(i, c): return 1", "isolation": "ns"}, "isolation": "gvisor"}`, "invalid_request", true},
			// local is known, but only ever a server's default: no call may pick it.
			{"run on local", "/v1/sandboxes", `{"run": {"code": "def run(i, c): return 1", "isolation": "local"}}`, "isolation_unavailable", true},
			{"create on local", "/v1/sandboxes", `{"isolation": "local"}`, "isolation_unavailable", false},
			{"template on local", "/v1/sandboxes/templates", `{"name": "bad", "isolation": "local"}`, "isolation_unavailable", false},
		} {
			hdr := map[string]string{}
			if tc.idem {
				hdr["Idempotency-Key"] = "bad-" + strings.ReplaceAll(tc.what, " ", "-")
			}
			r := s.call("POST", tc.path+"?graph=main", "", hdr, tc.body)
			if r.status != 400 || r.errCode(t) != tc.code {
				t.Errorf("%s: %d %s, want 400 %s", tc.what, r.status, r.body, tc.code)
			}
		}
	})
}

// TestIsolationRestart: a gvisor sandbox outlives a crash of the server that made it: the
// restarted server finds which driver holds it (from the drivers' own state), stops it with
// its disk kept, resumes it on gvisor and reaps gvisor's warm slots, as it does ns's.
func TestIsolationRestart(t *testing.T) {
	if _, why := runsc(); why != "" {
		requireEnv(t)
		testkit.SkipPrivileged(t, "%s", why)
	}
	s := startServer(t, "--pool-min", "1", "--pool-max", "2")
	host := hostRelease(t)
	r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"isolation": "gvisor", "expires_in_seconds": 600}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := r.obj(t)["id"].(string)
	c := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "before"},
		`{"argv": ["sh", "-c", "echo kept > f"], "wait_ms": 60000}`)
	if c.status != 200 || c.obj(t)["status"] != "succeeded" {
		t.Fatalf("exec: %d %s", c.status, c.body)
	}
	slotsBefore, _ := filepath.Glob(filepath.Join(s.dataDir, "gvisor", "sbx_*"))
	s.kill9()
	s.start()

	g := s.call("GET", "/v1/sandboxes/"+id+"?graph=main", "", nil, "").obj(t)
	if g["status"] != "stopped" || g["isolation"] != "gvisor" {
		t.Fatalf("after the crash: %v", g)
	}
	if r := s.call("POST", "/v1/sandboxes/"+id+"/resume?graph=main", "", nil, ""); r.status != 200 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	c = s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "after"},
		`{"argv": ["sh", "-c", "cat f; uname -r"], "wait_ms": 60000}`)
	out, _ := c.obj(t)["stdout"].(map[string]any)
	tail, _ := out["tail"].(string)
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	if len(lines) != 2 || lines[0] != "kept" || lines[1] == host {
		t.Fatalf("after resume: %d %s; want the file kept and gVisor's kernel", c.status, c.body)
	}
	// The slots the crashed server left on gvisor are reaped (new ones may be building).
	for _, dir := range slotsBefore {
		if slot := filepath.Base(dir); slot != id {
			waitFor(t, 30*time.Second, "gvisor slot "+slot+" reaped", func() bool {
				_, err := os.Stat(dir)
				return os.IsNotExist(err)
			})
		}
	}
	if d := s.call("DELETE", "/v1/sandboxes/"+id+"?graph=main", "", nil, ""); d.status != 200 {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
}

// metric reads one sample of the server's /metrics (0 when absent).
func metric(t *testing.T, s *server, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(s.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}
