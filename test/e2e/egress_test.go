//go:build linux

package e2e

// Egress, the in-sandbox API grant and git clone on create, end to end: a real lbb serve
// (and lbb host, with LBB_E2E_REMOTE_HOST=1), real sandboxes on ns and gvisor, and real
// servers on the host's loopback that the sandboxes reach only because the server runs with
// --egress-permit 127.0.0.0/8: HTTP, HTTPS with a throwaway CA (trusted inside through the
// tools' CA variables), a PyPI-style simple index, git's smart HTTP (git http-backend), and
// a DNS server the guard resolves the tests' names with (--egress-resolver).

import (
	"archive/zip"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// egressRig is the servers the sandboxes reach.
type egressRig struct {
	dns            string // host:port
	http, tls      int    // ports
	caPEM          string
	httpURL, tlsOf func(name string) string
}

// names the tests' DNS server answers (A records; every other name: NXDOMAIN).
var egressNames = map[string]string{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1", "pypi.test": "127.0.0.1",
	"git.test": "127.0.0.1", "meta.test": "169.254.169.254"}

func newEgressRig(t *testing.T) *egressRig {
	t.Helper()
	r := &egressRig{dns: dnsServer(t, egressNames)}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, req *http.Request) { fmt.Fprintf(w, "hello from %s", req.Host) })
	mux.HandleFunc("/big/{n}", func(w http.ResponseWriter, req *http.Request) {
		var n int64
		fmt.Sscan(req.PathValue("n"), &n)
		w.Header().Set("Content-Length", fmt.Sprint(n))
		io.CopyN(w, zeroReader{}, n)
	})
	wheel, wheelSum := tinyWheel(t)
	mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-1.0-py3-none-any.whl#sha256=%s">tinypkg-1.0-py3-none-any.whl</a></body></html>`, wheelSum)
	})
	mux.HandleFunc("/files/tinypkg-1.0-py3-none-any.whl", func(w http.ResponseWriter, req *http.Request) { w.Write(wheel) })
	mux.Handle("/git/", &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + gitRepo(t), "GIT_HTTP_EXPORT_ALL=1"}})

	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	ca, cert := testCA(t, "allowed.test", "other.test", "pypi.test", "git.test")
	r.caPEM = ca
	secure := httptest.NewUnstartedServer(mux)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	r.http, r.tls = plain.Listener.Addr().(*net.TCPAddr).Port, secure.Listener.Addr().(*net.TCPAddr).Port
	r.httpURL = func(name string) string { return fmt.Sprintf("http://%s:%d", name, r.http) }
	r.tlsOf = func(name string) string { return fmt.Sprintf("https://%s:%d", name, r.tls) }
	return r
}

// args are lbb serve's flags that let sandboxes reach the rig (permit: its loopback).
func (r *egressRig) args(permit bool) []string {
	a := []string{"--egress-resolver", r.dns, "--pool-min", "1", "--pool-max", "1"}
	if permit {
		a = append(a, "--egress-permit", "127.0.0.0/8")
	}
	return a
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// dnsServer answers A queries for names on UDP on the host's loopback.
func dnsServer(t *testing.T, names map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			m := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired},
				Questions: []dnsmessage.Question{q}}
			ip, ok := names[strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")]
			switch {
			case !ok:
				m.Header.RCode = dnsmessage.RCodeNameError
			case q.Type == dnsmessage.TypeA:
				m.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
					Body: &dnsmessage.AResource{A: netip.MustParseAddr(ip).As4()}}}
			}
			if out, err := m.Pack(); err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// testCA makes a throwaway CA and a certificate of it for names; it answers the CA's PEM.
func testCA(t *testing.T, names ...string) (string, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lbb test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tinyWheel is a valid, minimal wheel and its sha256.
func tinyWheel(t *testing.T) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := [][2]string{{"tinypkg/__init__.py", "X = 1\n"},
		{"tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"},
		{"tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: lbb-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"tinypkg-1.0.dist-info/RECORD", "tinypkg/__init__.py,,\ntinypkg-1.0.dist-info/METADATA,,\ntinypkg-1.0.dist-info/WHEEL,,\ntinypkg-1.0.dist-info/RECORD,,\n"}}
	for _, f := range files {
		w, _ := z.Create(f[0])
		io.WriteString(w, f[1])
	}
	z.Close()
	sum := sha256.Sum256(b.Bytes())
	return b.Bytes(), hex.EncodeToString(sum[:])
}

// gitRepo makes a bare repository repo.git (README "hello from git") in a directory it answers.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `set -e
git init -q -b main src
echo "hello from git" > src/README
git -C src add README
git -C src -c user.email=t@lbb.test -c user.name=t commit -qm init
git clone -q --bare src repo.git`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making the git repository: %v\n%s", err, out)
	}
	return dir
}

// isolations are the drivers the tests run on: ns, and gvisor when runsc is installed.
func isolations(t *testing.T) []string {
	if _, why := runsc(); why != "" {
		t.Logf("gvisor skipped: %s", why)
		return []string{"ns"}
	}
	return []string{"ns", "gvisor"}
}

// caEnv makes the tools inside trust the rig's CA (for the test only).
var caEnv = map[string]string{"SSL_CERT_FILE": "/workspace/ca.pem", "CURL_CA_BUNDLE": "/workspace/ca.pem",
	"REQUESTS_CA_BUNDLE": "/workspace/ca.pem", "PIP_CERT": "/workspace/ca.pem", "NODE_EXTRA_CA_CERTS": "/workspace/ca.pem",
	"GIT_SSL_CAINFO": "/workspace/ca.pem"}

// lines runs script in sb and answers its output lines by their first word.
func lines(t *testing.T, c *lbb.Client, sb, script string) map[string]string {
	t.Helper()
	cmd, err := c.Sandboxes.Exec(bg, sb, lbb.ExecParams{Argv: []string{"bash", "-c", script}, WaitMs: 120000, TimeoutMs: 120000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(cmd.Stdout.String(), "\n") {
		k, v, _ := strings.Cut(l, " ")
		out[k] = v
	}
	if cmd.Status != lbb.StatusSucceeded {
		t.Errorf("script: %s %s\nstdout %s\nstderr %s", cmd.Status, cmd.Error, cmd.Stdout.String(), cmd.Stderr.String())
	}
	return out
}

func wantLine(t *testing.T, got map[string]string, key string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got[key], w) {
			t.Errorf("%s: %q lacks %q", key, got[key], w)
		}
	}
}

func TestEgress(t *testing.T) {
	requireEnv(t)
	rig := newEgressRig(t)
	s := startServer(t, rig.args(true)...)
	c := s.client(t, "main")

	for _, iso := range isolations(t) {
		t.Run(iso, func(t *testing.T) {
			// none: no listener, no variable, nothing reaches the guard.
			run, err := c.Sandboxes.Run(bg, lbb.RunParams{Isolation: iso, Code: `import os, socket
def run(input, config):
    out = {"env": sorted(k for k in os.environ if "proxy" in k.lower() or k.startswith("LBB_"))}
    for port in (3128, 1080, 7700):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3)
            out[port] = "connected"
        except OSError as e:
            out[port] = e.strerror
    return out`})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(run.Result); got != `{"env":[],"3128":"Connection refused","1080":"Connection refused","7700":"Connection refused"}` {
				t.Errorf("egress none: %s (%s)", got, run.Error)
			}
			if rec, err := c.Sandboxes.Get(bg, run.Sandbox); err != nil || rec.Usage.Egress != nil || rec.Egress == nil || rec.Egress.Mode != "none" {
				t.Errorf("egress none: the record says %+v %+v (%v)", rec.Egress, rec.Usage.Egress, err)
			}

			// allowlist: every tool reaches an allowed name, and fails to another with the
			// guard's reason.
			_, sb := s.sandbox(t, lbb.CreateParams{Isolation: iso, Env: caEnv, Egress: &lbb.Egress{Mode: "allowlist",
				Allow: []string{fmt.Sprintf("allowed.test:%d", rig.tls), fmt.Sprintf("pypi.test:%d", rig.tls), "meta.test"}}})
			write(t, c, sb.ID, "ca.pem", rig.caPEM)
			ok, no := rig.tlsOf("allowed.test"), rig.tlsOf("other.test")
			got := lines(t, c, sb.ID, fmt.Sprintf(`OK=%s NO=%s
fetch='fetch(process.argv[1]).then(r => r.text()).then(console.log, e => { for (; e; e = e.cause) console.log(String(e)) })'
urlopen='import sys, urllib.request
try: print(urllib.request.urlopen(sys.argv[1]).read().decode())
except Exception as e: print(e)'
echo "curl-ok $(curl -sS $OK/hello 2>&1)"
echo "curl-no $(curl -sS -v $NO/hello 2>&1 | grep -m1 '< HTTP/1.1 ')"
echo "socks-ok $(curl -sS --proxy "$ALL_PROXY" $OK/hello 2>&1)"
echo "urllib-ok $(python3 -c "$urlopen" $OK/hello 2>&1)"
echo "urllib-no $(python3 -c "$urlopen" $NO/hello 2>&1)"
echo "node-ok $(node -e "$fetch" $OK/hello 2>&1)"
echo "node-no $(node -e "$fetch" $NO/hello 2>&1 | tr '\n' ' ')"
pip download -q --no-deps --retries 0 --index-url https://pypi.test:%[3]d/simple/ -d dl tinypkg > pip.log 2>&1; echo "pip-ok $? $(ls dl)"
pip download -q --no-deps --retries 1 --index-url https://other.test:%[3]d/simple/ -d dl2 tinypkg > pip2.log 2>&1; echo "pip-no $? $(grep -o 'Tunnel connection failed: [^)]*' pip2.log | head -1)"
git clone -q $OK/git/repo.git r1 2>&1; echo "git-ok $? $(cat r1/README)"
echo "git-no $(git clone -q $NO/git/repo.git r2 2>&1 | tail -1)"
echo "meta $(curl -sS http://meta.test/ 2>&1)"
echo "direct $(python3 -c 'import socket; socket.create_connection(("1.1.1.1", 80), timeout=3)' 2>&1 | tail -1)"
`, ok, no, rig.tls))
			host := fmt.Sprintf("other.test:%d", rig.tls)
			wantLine(t, got, "curl-ok", "hello from allowed.test")
			wantLine(t, got, "curl-no", "403 "+host+" is not on the sandbox's egress allowlist")
			wantLine(t, got, "socks-ok", "hello from allowed.test")
			wantLine(t, got, "urllib-ok", "hello from allowed.test")
			wantLine(t, got, "urllib-no", "Tunnel connection failed: 403 "+host+" is not on the sandbox's egress allowlist")
			wantLine(t, got, "node-ok", "hello from allowed.test")
			// Node tells the proxy's status, not its reason.
			wantLine(t, got, "node-no", "Proxy response (403) !== 200 when HTTP Tunneling")
			wantLine(t, got, "pip-ok", "0 tinypkg-1.0-py3-none-any.whl")
			wantLine(t, got, "pip-no", "403 other.test")
			wantLine(t, got, "git-ok", "0 hello from git")
			wantLine(t, got, "git-no", "403")
			wantLine(t, got, "meta", "meta.test resolves to 169.254.169.254, a cloud metadata address")
			wantLine(t, got, "direct", "Network is unreachable")
			cmds, err := c.Sandboxes.Commands(bg, sb.ID, lbb.ListParams{})
			if err != nil || len(cmds.Data) == 0 {
				t.Fatalf("commands: %v", err)
			}
			if e := cmds.Data[0].Egress; e == nil || e.Connections < 5 || e.Refused < 5 || e.BytesIn == 0 {
				t.Errorf("the command's egress: %+v", e)
			}
			// Every life of the sandbox has its egress: after a snapshot (restored in place),
			// a pause and resume (gvisor: a checkpoint and restore, on a fresh channel), a
			// stop and resume.
			again := func(what string) {
				t.Helper()
				if got := lines(t, c, sb.ID, fmt.Sprintf(`echo "curl-ok $(curl -sS %s/hello 2>&1)"`, ok)); !strings.Contains(got["curl-ok"], "hello from allowed.test") {
					t.Errorf("%s: %q", what, got["curl-ok"])
				}
			}
			if iso == "gvisor" {
				snap, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{})
				if err != nil {
					t.Fatal(err)
				}
				again("after a snapshot")
				// A fork has its source's egress, with a quota of its own.
				fork, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: snap.ID})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Sandboxes.Delete(bg, fork.ID)
				if fork.Egress == nil || fork.Egress.Mode != "allowlist" || fork.Usage.Egress != nil {
					t.Errorf("the fork's egress: %+v, used %+v", fork.Egress, fork.Usage.Egress)
				}
				wantLine(t, lines(t, c, fork.ID, fmt.Sprintf(`echo "curl-ok $(curl -sS %s/hello 2>&1)"; echo "curl-no $(curl -sS %s/hello 2>&1)"`, ok, no)),
					"curl-ok", "hello from allowed.test")
			}
			if _, err := c.Sandboxes.Pause(bg, sb.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
				t.Fatal(err)
			}
			again("after a pause")
			// The refused destinations are audited with the sandbox as the actor.
			r := s.call("GET", "/v1/audit?graph=main&limit=200", s.key, nil, "")
			if !strings.Contains(string(r.body), `"actor":"`+sb.ID+`"`) || !strings.Contains(string(r.body), `"path":"`+host+`"`) {
				t.Errorf("no audit entry of %s refused to %s: %s", host, sb.ID, r.body)
			}

			// The quota: a download past it is cut, and the run's record says so.
			run, err = c.Sandboxes.Run(bg, lbb.RunParams{Isolation: iso, Egress: &lbb.Egress{Mode: "public", QuotaBytes: 300000},
				Code: fmt.Sprintf(`import urllib.request
def run(input, config):
    return len(urllib.request.urlopen("%s/big/5000000").read())`, rig.httpURL("allowed.test"))})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := c.Sandboxes.Get(bg, run.Sandbox)
			if err != nil {
				t.Fatal(err)
			}
			if run.OK || rec.EndReason != "egress_quota_exceeded" || rec.Usage.Egress == nil || !rec.Usage.Egress.QuotaExceeded ||
				rec.Usage.Egress.BytesIn+rec.Usage.Egress.BytesOut != 300000 {
				t.Errorf("quota: run %s %s; sandbox %s %+v", run.Status, run.Error, rec.EndReason, rec.Usage.Egress)
			}
		})
	}

	t.Run("refused address", func(t *testing.T) {
		// Without --egress-permit a name that resolves to loopback is refused.
		closed := startServer(t, rig.args(false)...)
		run, err := closed.client(t, "main").Sandboxes.Run(bg, lbb.RunParams{Language: "shell", Egress: &lbb.Egress{Mode: "public"},
			Code: fmt.Sprintf(`curl -sS %s/hello > "$LBB_RESULT" 2>&1 || true`, rig.httpURL("allowed.test"))})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(run.Result), "allowed.test resolves to 127.0.0.1, a loopback address") {
			t.Errorf("got %s", run.Result)
		}
	})
}

func TestSandboxAPIGrant(t *testing.T) {
	requireEnv(t)
	s := startServer(t, "--pool-min", "1", "--pool-max", "1")
	c := s.client(t, "main")
	for _, iso := range isolations(t) {
		t.Run(iso, func(t *testing.T) {
			sb := newSandbox(t, c, lbb.CreateParams{Isolation: iso,
				API: &lbb.APIGrantRequest{Scopes: []string{"sandboxes:read", "sandboxes:write"}, MaxRuns: 1}})
			if sb.API == nil || sb.API.Key == "" {
				t.Fatalf("no grant on the record: %+v", sb.API)
			}
			key := grantKey(t, s, sb.API.Key)
			if key.Sandbox != sb.ID || key.Parent == "" || key.ExpiresAt == nil || key.RevokedAt != nil {
				t.Fatalf("the grant's key: %+v", key)
			}
			// The key's prefix, split so that the script's own text does not hold it.
			half := len(key.Prefix) / 2
			got := lines(t, c, sb.ID, fmt.Sprintf(`code() { curl -s -o /dev/null -w '%%{http_code}' "$@"; }
api="$LBB_URL/v1/sandboxes"
echo "read $(code "$api?graph=$LBB_GRAPH")"
echo "delete $(code -X DELETE "$api/%[1]s?graph=$LBB_GRAPH")"
echo "keys $(code "$LBB_URL/v1/keys")"
echo "stolen $(code -H 'Authorization: Bearer stolen' "$api?graph=$LBB_GRAPH")"
run='{"run": {"code": "def run(i, c): return 7"}}'
echo "run1 $(code -X POST -H 'Idempotency-Key: %[1]s-1' -H 'Content-Type: application/json' -d "$run" "$api?graph=$LBB_GRAPH")"
echo "run2 $(code -X POST -H 'Idempotency-Key: %[1]s-2' -H 'Content-Type: application/json' -d "$run" "$api?graph=$LBB_GRAPH")"
P="%[2]s""%[3]s"
# Everything a process could read of its environment, its processes' and the files, saved
# first, then searched: the searching grep's own arguments name what it looks for.
(env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline) 2>/dev/null | tr '\0' '\n' > /tmp/seen
found=$( (grep -e "$P" -e "lbb""_sk_" /tmp/seen; grep -rlsF -e "$P" -e "lbb""_sk_" --exclude=seen /workspace /tmp /root /etc /run /var /home) | cut -c1-150)
echo "leaks $(printf %%s "$found" | grep -c .)"
echo "leaklines $(printf %%s "$found" | tr '\n' '|')"
`, sb.ID, key.Prefix[:half], key.Prefix[half:]))
			for k, want := range map[string]string{"read": "200", "delete": "403", "keys": "403", "stolen": "200", "run1": "200", "run2": "429", "leaks": "0"} {
				if got[k] != want {
					t.Errorf("%s: %s, want %s (%s)", k, got[k], want, got["leaklines"])
				}
			}
			// Our Python SDK, as it is, from inside: LBB_URL and LBB_GRAPH are set, no key.
			sdk, err := filepath.Glob("../../sdk/python/src/lbb/*.py")
			if err != nil || len(sdk) == 0 {
				t.Fatalf("the Python SDK's sources: %v", err)
			}
			for _, f := range sdk {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				write(t, c, sb.ID, "sdk/lbb/"+filepath.Base(f), string(b))
			}
			got = lines(t, c, sb.ID, `PYTHONPATH=/workspace/sdk python3 -c 'import lbb; print("sdk", [s.id for s in lbb.LbbClient().sandboxes.list()])' 2>&1 | tail -1`)
			wantLine(t, got, "sdk", sb.ID)
			r := s.call("GET", "/v1/audit?graph=main&limit=200", s.key, nil, "")
			if n := strings.Count(string(r.body), `"actor":"`+sb.ID+`"`); n < 6 {
				t.Errorf("%d audit entries name %s as the actor, want 6 at least: %s", n, sb.ID, r.body)
			}

			// A resume renews the grant: a fresh key, the old one revoked.
			if _, err := c.Sandboxes.Stop(bg, sb.ID); err != nil {
				t.Fatal(err)
			}
			resumed, err := c.Sandboxes.Resume(bg, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if resumed.API == nil || resumed.API.Key == key.ID || grantKey(t, s, key.ID).RevokedAt == nil {
				t.Errorf("resume: grant %+v, old key %+v", resumed.API, grantKey(t, s, key.ID))
			}
			got = lines(t, c, sb.ID, `echo "read $(curl -s -o /dev/null -w '%{http_code}' "$LBB_URL/v1/sandboxes/`+sb.ID+`?graph=$LBB_GRAPH")"`)
			if got["read"] != "200" {
				t.Errorf("after resume: read %s", got["read"])
			}
			// The grant ends with the sandbox.
			if _, err := c.Sandboxes.Delete(bg, sb.ID); err != nil {
				t.Fatal(err)
			}
			if k := grantKey(t, s, resumed.API.Key); k.RevokedAt == nil {
				t.Errorf("the grant outlived its sandbox: %+v", k)
			}
		})
	}

	// A grant never exceeds its creator: a key without sandboxes:delete cannot grant it, and
	// nobody grants admin.
	narrow := s.call("POST", "/v1/keys", s.key, nil, `{"name": "narrow", "graphs": ["main"], "scopes": ["sandboxes:read", "sandboxes:write"]}`).obj(t)
	for body, want := range map[string]int{
		`{"api": {"scopes": ["sandboxes:delete"]}}`: 403,
		`{"api": {"scopes": ["admin"]}}`:            400,
	} {
		if r := s.call("POST", "/v1/sandboxes?graph=main", narrow["secret"].(string), nil, body); r.status != want {
			t.Errorf("%s: %d %s, want %d", body, r.status, r.body, want)
		}
	}
}

type keyRecord struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Parent    string     `json:"parent"`
	Sandbox   string     `json:"sandbox"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// grantKey reads a key's record with the admin key.
func grantKey(t *testing.T, s *server, id string) keyRecord {
	t.Helper()
	r := s.call("GET", "/v1/keys?limit=500", s.key, nil, "")
	var l struct{ Data []keyRecord }
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("keys: %v %s", err, r.body)
	}
	for _, k := range l.Data {
		if k.ID == id {
			return k
		}
	}
	t.Fatalf("no key %s", id)
	return keyRecord{}
}

func TestGitCloneOnCreate(t *testing.T) {
	requireEnv(t)
	rig := newEgressRig(t)
	s := startServer(t, rig.args(true)...)
	c := s.client(t, "main")
	url := rig.httpURL("git.test") + "/git/repo.git"
	for _, iso := range isolations(t) {
		t.Run(iso, func(t *testing.T) {
			// Its egress is none: the repository's host is let through for the clone alone.
			_, sb := s.sandbox(t, lbb.CreateParams{Isolation: iso, Git: &lbb.GitClone{URL: url, Depth: 1}})
			got := lines(t, c, sb.ID, `echo "readme $(cat README)"; echo "branch $(git rev-parse --abbrev-ref HEAD)"
echo "proxies $(env | grep -ci proxy)"; echo "after $(curl -sS -m 5 --noproxy '' -x http://127.0.0.1:3128 `+url+` 2>&1 | tail -1)"`)
			wantLine(t, got, "readme", "hello from git")
			wantLine(t, got, "branch", "main")
			wantLine(t, got, "proxies", "0")
			wantLine(t, got, "after", "Failed to connect")
			if sb.Git == nil || sb.Git.URL != url {
				t.Errorf("the record's git: %+v", sb.Git)
			}
		})
	}
	// A failed clone fails the create with git's error; a URL outside the strict set is refused.
	_, err := c.Sandboxes.Create(bg, lbb.CreateParams{Git: &lbb.GitClone{URL: rig.httpURL("git.test") + "/git/nothing.git"}})
	if err == nil || !strings.Contains(err.Error(), "git clone") {
		t.Errorf("a clone of no repository: %v", err)
	}
	for _, bad := range []string{"https://user:pw@example.org/r.git", "ssh://example.org/r.git", "https://example.org/r.git?x=1", "file:///etc"} {
		if _, err := c.Sandboxes.Create(bg, lbb.CreateParams{Git: &lbb.GitClone{URL: bad}}); err == nil || !strings.Contains(err.Error(), "git.url") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := c.Sandboxes.Create(bg, lbb.CreateParams{Git: &lbb.GitClone{URL: url, Branch: "--upload-pack=x"}}); err == nil {
		t.Errorf("a branch that is an option was taken")
	}
}
