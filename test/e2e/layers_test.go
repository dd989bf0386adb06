//go:build linux

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestTemplateLayers: templates that carry their own packages, end to end on a real server.
// The CLI saves a template whose image installs a Python package from a PyPI-style index on
// the host's loopback (the server's --build-pip-index; the build's egress reaches it and
// nothing else) and runs a step; its build is followed live, and its runs on ns and gvisor
// import the package; after its first run the pool keeps a slot with the layer mounted, which
// the next run on ns claims; on microvm the layer is a second disk. A second template with the same recipe shares the layer (no build);
// a build whose step reaches a host that is not a package source fails at that step, and
// its version is never used.
func TestTemplateLayers(t *testing.T) {
	rig := newEgressRig(t)
	index := rig.httpURL("pypi.test") + "/simple/"
	aptRepo := debRepo(t)
	s := startServer(t, append(rig.args(true), "--build-pip-index", index,
		"--build-apt-source", "deb [trusted=yes] "+aptRepo+" ./")...)
	if remoteHost {
		r := s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil, `{"name": "pk", "image": {"run": ["true"]}}`)
		if r.status != 503 || r.errCode(t) != "not_supported" {
			t.Fatalf("a recipe on a remote host agent: %d %s, want 503 not_supported", r.status, r.body)
		}
		return
	}
	const code = "import tinypkg\ndef run(i, c):\n    return {'x': tinypkg.X, 'marker': open('/etc/lbb-marker').read().strip()}"
	codeFile := t.TempDir() + "/main.py"
	if err := os.WriteFile(codeFile, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	out, errOut, err := s.cli("templates", "create", "pk", "--file", codeFile, "--pip", "tinypkg", "--run", "echo from-the-layer > /etc/lbb-marker")
	if err != nil {
		t.Fatalf("templates create: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("build followed by the CLI in %s:\n%s", time.Since(t0).Round(time.Millisecond), out)
	for _, want := range []string{"building its image", "==> pip", "Successfully installed tinypkg-1.0", "==> run[0]", "ready: pk@1", "pip tinypkg 1.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the CLI's build output lacks %q", want)
		}
	}

	runOn := func(key, isolation string) map[string]any {
		body := `{"run": {"template": "pk"}, "wait_ms": 60000}`
		if isolation != "" {
			body = fmt.Sprintf(`{"run": {"template": "pk"}, "isolation": %q, "wait_ms": 60000}`, isolation)
		}
		_, m := s.run(key, body)
		if m["ok"] != true {
			t.Fatalf("run on %s: %v", isolation, m)
		}
		return m["result"].(map[string]any)
	}
	for _, iso := range []string{"ns", "gvisor"} {
		if _, no := runsc(); iso == "gvisor" && no != "" {
			t.Logf("gvisor not run: %s", no)
			continue
		}
		t1 := time.Now()
		if res := runOn("pk-"+iso, iso); res["x"] != 1.0 || res["marker"] != "from-the-layer" {
			t.Errorf("a run of the template on %s: %v", iso, res)
		}
		t.Logf("one-call run of the layered template on %s: %s", iso, time.Since(t1).Round(time.Millisecond))
	}

	// Warm slots of the layer: its first run (above) made the pool keep a key of its own;
	// demand gives it a slot with the layer mounted, and the next run claims it.
	layerWarm := func() (ready, warm float64) {
		for _, line := range strings.Split(s.metrics(t), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || !strings.Contains(line, `key="layer-`) {
				continue
			}
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			switch {
			case strings.HasPrefix(line, "lbb_pool_ready{"):
				ready += v
			case strings.HasPrefix(line, "lbb_pool_claims_total{") && strings.Contains(line, `path="warm"`):
				warm += v
			}
		}
		return ready, warm
	}
	waitFor(t, 2*time.Minute, "a ready slot of the layer", func() bool { r, _ := layerWarm(); return r >= 1 })
	t1 := time.Now()
	if res := runOn("pk-ns-warm", "ns"); res["x"] != 1.0 || res["marker"] != "from-the-layer" {
		t.Errorf("a warm run of the template: %v", res)
	}
	if _, warm := layerWarm(); warm < 1 {
		t.Errorf("the run after the layer's slot was ready was not warm (%v warm claims)", warm)
	}
	t.Logf("one-call run of the layered template on ns, warm: %s", time.Since(t1).Round(time.Millisecond))

	// A long-lived sandbox of the layer: its first starts cold and asks for bare slots of the
	// layer; once one is ready, the next is handed it.
	create := func() string {
		r := s.call("POST", "/v1/sandboxes?graph=main", "", nil, `{"template": "pk", "isolation": "ns", "expires_in_seconds": 300}`)
		if r.status != 201 {
			t.Fatalf("create a sandbox of the template: %d %s", r.status, r.body)
		}
		id, _ := r.obj(t)["id"].(string)
		t.Cleanup(func() { s.call("DELETE", "/v1/sandboxes/"+id+"?graph=main", "", nil, "") })
		return id
	}
	create()
	_, before := layerWarm()
	waitFor(t, 2*time.Minute, "a ready bare slot of the layer", func() bool {
		for _, line := range strings.Split(s.metrics(t), "\n") {
			if strings.HasPrefix(line, "lbb_pool_ready{") && strings.Contains(line, `key="layer-`) && strings.Contains(line, "/bare/") && !strings.HasSuffix(line, " 0") {
				return true
			}
		}
		return false
	})
	id := create()
	if _, after := layerWarm(); after != before+1 {
		t.Errorf("a sandbox of the layer created with its slot ready was not warm (%v warm claims, %v before)", after, before)
	}
	r := s.call("POST", "/v1/sandboxes/"+id+"/commands?graph=main", "", map[string]string{"Idempotency-Key": "pk-marker"},
		`{"argv": ["cat", "/etc/lbb-marker"], "wait_ms": 30000}`)
	if cmd := r.obj(t); r.status != 200 || cmd["status"] != "succeeded" || !strings.HasPrefix(cmd["stdout"].(map[string]any)["tail"].(string), "from-the-layer") {
		t.Errorf("the warm sandbox of the layer: %d %s", r.status, r.body)
	}

	// On microvm the layer is a second read-only disk its guest stacks over the base.
	t.Run("microvm", func(t *testing.T) {
		t1 := time.Now()
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "pk-microvm"},
			`{"run": {"template": "pk"}, "isolation": "microvm", "wait_ms": 240000}`)
		if r.status == 400 && r.errCode(t) == "isolation_unavailable" {
			testkit.SkipPrivileged(t, "microvm is not available here: %s", r.body)
		}
		m := r.obj(t)
		res, _ := m["result"].(map[string]any)
		if r.status != 200 || m["ok"] != true || res["x"] != 1.0 || res["marker"] != "from-the-layer" {
			t.Fatalf("a run of the template on microvm: %d %s", r.status, r.body)
		}
		t.Logf("one-call run of the layered template on microvm: %s", time.Since(t1).Round(time.Millisecond))
	})

	// The same recipe in another template: the same layer, no build.
	r = s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil,
		jsonBody(t, map[string]any{"name": "pk2", "code": code, "image": map[string]any{"pip": []string{"tinypkg"}, "run": []string{"echo from-the-layer > /etc/lbb-marker"}}}))
	first := s.call("GET", "/v1/sandboxes/templates/pk?graph=main", "", nil, "").obj(t)
	if r.status != 201 || r.obj(t)["layer"] != first["layer"] {
		t.Fatalf("pk2: %d %s, want layer %v", r.status, r.body, first["layer"])
	}
	b := waitBuild(t, s, "pk2")
	if b["status"] != "ready" || b["cached"] != true {
		t.Errorf("pk2's build: %v, want ready and cached", b)
	}

	// A Debian package from the operator's apt source (a repository on the host's loopback).
	r = s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil, jsonBody(t, map[string]any{"name": "deb",
		"code":  "import subprocess\ndef run(i, c):\n    return subprocess.run(['lbb-hello'], capture_output=True, text=True).stdout.strip()",
		"image": map[string]any{"apt": []string{"lbb-hello"}}}))
	if r.status != 201 {
		t.Fatalf("deb: %d %s", r.status, r.body)
	}
	if b := waitBuild(t, s, "deb"); b["status"] != "ready" || b["resolved"].(map[string]any)["apt lbb-hello"] != "1.0" {
		t.Errorf("the apt build: %v", b)
	} else if _, m := s.run("deb-run", `{"run": {"template": "deb"}, "wait_ms": 60000}`); m["result"] != "hello from a deb" {
		t.Errorf("a run of the apt template: %v", m)
	}

	// A build step that reaches beyond the package sources fails the build at that step.
	r = s.call("POST", "/v1/sandboxes/templates?graph=main", "", nil, jsonBody(t, map[string]any{"name": "leak", "code": code,
		"image": map[string]any{"run": []string{"true", fmt.Sprintf("python3 -c \"import urllib.request as u; print(u.urlopen('%s/hello', timeout=10).read())\"", rig.httpURL("allowed.test"))}}}))
	if r.status != 201 {
		t.Fatalf("leak: %d %s", r.status, r.body)
	}
	b = waitBuild(t, s, "leak")
	if b["status"] != "failed" || b["step"] != "run[1]" || !strings.Contains(b["log"].(string), "==> run[1]") {
		t.Errorf("a build that reaches another host: %v", b)
	}
	r = s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "leak-run"}, `{"run": {"template": "leak"}}`)
	if r.status != 409 || r.errCode(t) != "template_build_failed" {
		t.Errorf("a run of a failed build: %d %s", r.status, r.body)
	}
	// The base is untouched for other templates.
	_, m := s.run("plain", `{"run": {"code": "import os\ndef run(i, c):\n    return os.path.exists('/etc/lbb-marker')"}, "wait_ms": 60000}`)
	if m["result"] != false {
		t.Errorf("a run on the base sees the layer: %v", m)
	}
}

// waitBuild polls a template's build until it ends.
func waitBuild(t *testing.T, s *server, ref string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b := s.call("GET", "/v1/sandboxes/templates/"+ref+"/build?graph=main", "", nil, "").obj(t)
		if b["status"] != "building" || time.Now().After(deadline) {
			return b
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// debRepo serves, on the host's loopback, a flat apt repository of one package, lbb-hello
// (a script at /usr/bin/lbb-hello), and answers its URL.
func debRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pkg := filepath.Join(dir, "pkg")
	for _, f := range []struct {
		path, body string
		mode       os.FileMode
	}{
		{"DEBIAN/control", "Package: lbb-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: lbb tests <t@example.org>\nDescription: a test package\n", 0o644},
		{"usr/bin/lbb-hello", "#!/bin/sh\necho hello from a deb\n", 0o755},
	} {
		p := filepath.Join(pkg, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	repo := filepath.Join(dir, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, filepath.Join(repo, "lbb-hello_1.0_all.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	scan := exec.Command("dpkg-scanpackages", ".")
	scan.Dir = repo
	index, err := scan.Output()
	if err != nil {
		t.Fatalf("dpkg-scanpackages: %v", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "Packages"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	t.Cleanup(srv.Close)
	// By a name (the rig's DNS answers it with loopback): the proxy the build's egress gives
	// apt is not used for 127.0.0.1.
	return fmt.Sprintf("http://pypi.test:%d/", srv.Listener.Addr().(*net.TCPAddr).Port)
}
