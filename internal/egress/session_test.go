package egress

// The guard with the real guest agent (testkit.Agent) as a plain process: the tools a
// sandbox uses (curl, Python's urllib) go through the agent's proxies, over the channel, to
// the guard, and on to servers on the host's loopback. No isolation here: the hostile suite
// (internal/runtime/runtimetest) and test/e2e run the same through real sandboxes.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/agent/agenttest"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

type rig struct {
	t    *testing.T
	c    *agent.Client
	sb   *Sandbox
	sess *Session
	port int // the HTTP server's
}

// newRig starts the agent, a server on the host's loopback (/ says hello, /big/N sends N
// bytes) and a session of the guard for a sandbox with policy p.
func newRig(t *testing.T, p store.Egress, permit bool) *rig {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		if _, err := fmt.Sscanf(r.URL.Path, "/big/%d", &n); err == nil {
			w.Header().Set("Content-Length", fmt.Sprint(n))
			io.CopyN(w, zeros{}, int64(n))
			return
		}
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	t.Cleanup(srv.Close)
	o := Options{Lookup: lookup(map[string]string{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"})}
	if permit {
		o.Permit = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	g := NewGuard(o)
	sb, err := g.NewSandbox("sbx_t", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	proc := agenttest.StartProcess(t, testkit.Agent(t), "--workspace", t.TempDir(), "--etc-dir", t.TempDir(), "--path", os.Getenv("PATH"))
	t.Cleanup(func() { proc.C.Close(); <-proc.Exited })
	r := &rig{t: t, c: proc.C, sb: sb, port: srv.Listener.Addr().(*net.TCPAddr).Port}
	// Port 0: the agent runs on the host here, where 3128 and 7700 may be taken.
	req := agent.ListenRequest{API: "127.0.0.1:0", Env: map[string]string{"LBB_GRAPH": "g"}}
	if sb.On() {
		req.Proxy, req.SOCKS = "127.0.0.1:0", "127.0.0.1:0"
	}
	r.sess, err = g.Open(context.Background(), proc.C, sb, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.sess.Close)
	return r
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func (r *rig) sh(script string) (string, string, agent.Exit) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return agenttest.Exec(ctx, r.t, r.c, agent.ExecRequest{ID: fmt.Sprint(time.Now().UnixNano()), Argv: []string{"sh", "-c", script}}, nil)
}

func TestProxies(t *testing.T) {
	r := newRig(t, store.Egress{Mode: store.EgressAllowlist, Allow: []string{"allowed.test:*"}}, true)
	p := r.port
	for _, tc := range []struct{ what, script, want string }{
		{"plain http", fmt.Sprintf("curl -sS http://allowed.test:%d/", p), "hello allowed.test"},
		{"CONNECT", fmt.Sprintf("curl -sS --proxytunnel http://allowed.test:%d/", p), "hello allowed.test"},
		{"SOCKS5", fmt.Sprintf("curl -sS --noproxy '' -x \"$ALL_PROXY\" http://allowed.test:%d/", p), "hello allowed.test"},
		{"urllib", fmt.Sprintf("python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://allowed.test:%d/\").read().decode())'", p), "hello allowed.test"},
		{"denied, plain", fmt.Sprintf("curl -sS http://other.test:%d/", p), "lbb egress: other.test:%d is not on the sandbox's egress allowlist"},
		{"denied, CONNECT", fmt.Sprintf("curl -sS -v --proxytunnel http://other.test:%d/ 2>&1", p), "403 other.test:%d is not on the sandbox's egress allowlist"},
		{"denied, SOCKS", fmt.Sprintf("curl -sS --noproxy '' -x \"$ALL_PROXY\" http://other.test:%d/ 2>&1", p), "Can't complete SOCKS5 connection to other.test. (2)"},
		{"denied, urllib", fmt.Sprintf("python3 -c 'import urllib.request; urllib.request.urlopen(\"https://other.test:%d/\")' 2>&1", p), "Tunnel connection failed: 403 other.test:%d is not on the sandbox's egress allowlist"},
	} {
		out, errOut, _ := r.sh(tc.script)
		want := tc.want
		if strings.Contains(want, "%d") {
			want = fmt.Sprintf(want, p)
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: %q (stderr %q), want %q", tc.what, out, errOut, want)
		}
	}
	u := r.sb.Usage()
	if u.Connections < 3 || u.Refused != 4 || u.BytesIn == 0 || u.BytesOut == 0 {
		t.Errorf("usage %+v", u)
	}
	// The env a process gets: the proxies, NO_PROXY for the sandbox's own services, and the
	// session's env; never a credential.
	out, _, _ := r.sh("env | sort")
	for _, v := range []string{"HTTP_PROXY=http://127.0.0.1:", "https_proxy=http://127.0.0.1:", "ALL_PROXY=socks5h://127.0.0.1:",
		"NO_PROXY=localhost,127.0.0.1,::1", "NODE_USE_ENV_PROXY=1", "LBB_URL=http://127.0.0.1:", "LBB_GRAPH=g"} {
		if !strings.Contains(out, v) {
			t.Errorf("env lacks %s:\n%s", v, out)
		}
	}
}

func TestAddressRefusedWithoutPermit(t *testing.T) {
	r := newRig(t, store.Egress{Mode: store.EgressPublic}, false)
	out, _, _ := r.sh(fmt.Sprintf("curl -sS http://allowed.test:%d/; curl -sS --noproxy '' -x $HTTP_PROXY http://127.0.0.1:%d/", r.port, r.port))
	for _, want := range []string{"allowed.test resolves to 127.0.0.1, a loopback address", "127.0.0.1 is a loopback address"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q lacks %q", out, want)
		}
	}
}

func TestQuotaCuts(t *testing.T) {
	const quota = 200 << 10
	r := newRig(t, store.Egress{Mode: store.EgressPublic, QuotaBytes: quota}, true)
	out, errOut, ex := r.sh(fmt.Sprintf("curl -sS -o /dev/null -w '%%{size_download}' http://allowed.test:%d/big/%d", r.port, 4<<20))
	if ex.ExitCode == 0 {
		t.Errorf("a download past the quota succeeded: %q %q", out, errOut)
	}
	u := r.sb.Usage()
	if !u.QuotaExceeded || u.BytesIn+u.BytesOut != quota {
		t.Errorf("usage %+v, want the quota of %d reached exactly", u, quota)
	}
	out, _, _ = r.sh(fmt.Sprintf("curl -sS http://allowed.test:%d/", r.port))
	if !strings.Contains(out, "egress quota of 204800 bytes is used up") {
		t.Errorf("after the quota: %q", out)
	}
}

func TestAPIForward(t *testing.T) {
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		seen = append(seen, req.Method+" "+req.URL.RequestURI()+" "+req.Header.Get("Authorization")+" "+req.Header.Get("Cookie")+" "+string(body))
		if req.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer api.Close()
	r := newRig(t, store.Egress{Mode: store.EgressNone}, false)
	out, errOut, _ := r.sh(`curl -sS -H 'Authorization: Bearer stolen' -H 'Cookie: c=1' "$LBB_URL/v1/x?graph=$LBB_GRAPH"; echo; ` +
		`curl -sS -d '{"a":1}' "$LBB_URL/v1/y"; echo; curl -sSN "$LBB_URL/stream"`)
	if strings.Count(out, "this sandbox has no API grant") != 3 {
		t.Errorf("without a grant: %q %q", out, errOut)
	}
	r.sb.SetGrant(&Grant{URL: api.URL, Token: "lbb_sk_secret", Graph: "g"})
	out, errOut, _ = r.sh(`curl -sS -H 'Authorization: Bearer stolen' -H 'Cookie: c=1' "$LBB_URL/v1/x?graph=$LBB_GRAPH"; echo; ` +
		`curl -sS -d '{"a":1}' "$LBB_URL/v1/y"; echo; curl -sSN "$LBB_URL/stream"`)
	want := []string{"GET /v1/x?graph=g Bearer lbb_sk_secret  ", `POST /v1/y Bearer lbb_sk_secret  {"a":1}`, "GET /stream Bearer lbb_sk_secret  "}
	if fmt.Sprint(seen) != fmt.Sprint(want) || !strings.Contains(out, "data: 2") {
		t.Errorf("the API saw %q, want %q; the sandbox got %q %q", seen, want, out, errOut)
	}
	// Egress off: no proxy listens, and the sandbox's own requests never leave.
	out, _, _ = r.sh("env | grep -ci proxy; curl -sS http://allowed.test:1/ 2>&1 | head -c 300")
	if !strings.HasPrefix(out, "0\n") || !bytes.Contains([]byte(out), []byte("resolve")) {
		t.Errorf("with egress off: %q", out)
	}
}
