package runtimetest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// The hostile cases of the routes out (internal/egress): the guest agent's proxies on the
// sandbox's loopback, whose connections reach the host only as streams of the sandbox's own
// channel, decided by the guard.

// openEgress serves b's egress with policy p through a guard (loopback permitted when
// permit), until the test ends; it answers the guard's view of the sandbox.
func (b *box) openEgress(p store.Egress, permit bool) *egress.Sandbox {
	b.t.Helper()
	var o egress.Options
	if permit {
		o.Permit = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	g := egress.NewGuard(o)
	sb, err := g.NewSandbox(b.id, p, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	sess, err := g.Open(context.Background(), b.c, sb, egress.Listen(sb, false, nil))
	if err != nil {
		b.t.Fatalf("opening the egress: %v", err)
	}
	b.t.Cleanup(sess.Close)
	return sb
}

// egressOff: a sandbox whose egress is none serves no proxy and names none; with its API
// on alone, still none.
func (e *env) egressOff(t *testing.T) {
	b := e.boot(t, runtime.Limits{})
	probe := AttemptPy + `
import os
print("env", sorted(k for k in os.environ if "proxy" in k.lower()))
for port in (3128, 1080, 7700):
    print(port, attempt("127.0.0.1", port))
`
	r := b.py(probe)
	for _, want := range []string{"env []", "3128 ECONNREFUSED", "1080 ECONNREFUSED", "7700 ECONNREFUSED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("egress off: %q lacks %q (%v)", r.stdout, want, r)
		}
	}
	sb := b.openEgress(store.Egress{Mode: store.EgressNone}, true)
	r = b.py(probe)
	if !strings.Contains(r.stdout, "3128 ECONNREFUSED") || !strings.Contains(r.stdout, "1080 ECONNREFUSED") {
		t.Errorf("egress none with a session: %v", r)
	}
	if u := sb.Usage(); u.Connections+u.Refused != 0 {
		t.Errorf("something reached the guard: %+v", u)
	}
}

// egressOwnTraffic: two sandboxes, each with its proxies: what one sends goes out as its own
// (its guard's counters), never through the other's, whose proxy it cannot reach.
func (e *env) egressOwnTraffic(t *testing.T) {
	port := HostSecret(t)
	a, b := e.boot(t, runtime.Limits{}), e.boot(t, runtime.Limits{})
	sa := a.openEgress(store.Egress{Mode: store.EgressPublic}, true)
	sbb := b.openEgress(store.Egress{Mode: store.EgressPublic}, true)
	r := b.sh(fmt.Sprintf("curl -sS -m 10 --noproxy '' -x $HTTP_PROXY telnet://127.0.0.1:%d/ -p 2>&1 | head -c 100; echo", port))
	if !strings.Contains(r.stdout, "host secret") {
		t.Errorf("through its own proxy: %v", r)
	}
	if ua, ub := sa.Usage(), sbb.Usage(); ua.Connections != 0 || ub.Connections != 1 {
		t.Errorf("a's guard counted %+v, b's %+v: want b's connection on b alone", ua, ub)
	}
	// a's proxy is on a's loopback: from b, 127.0.0.1:3128 is b's own, and nothing else of a
	// is reachable.
	r = b.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk 'NR>1 && $4==\"0A\" {print $2}' | sort -u")
	if n := len(strings.Fields(r.stdout)); n != 2 {
		t.Errorf("b listens on %q: want its own two proxies alone", r.stdout)
	}
	// The streams the host opens likewise (streams.go), in the same two sandboxes.
	t.Run("streams stay in their sandbox", func(t *testing.T) { streamsApart(a.in(t), b.in(t)) })
}

// egressNoHostListener: with the egress open, the sandbox still has lo alone and no route:
// every address of the host is out of reach directly, and the guard refuses the host's
// non-public addresses through the proxy (no --egress-permit here).
func (e *env) egressNoHostListener(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host service\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	var hosts []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && egress.Nonpublic(p.Addr()) != "" && !p.Addr().IsLinkLocalUnicast() {
			hosts = append(hosts, p.Addr().String())
		}
	}
	hosts = append(hosts, "169.254.169.254", "0.0.0.0")
	b := e.boot(t, runtime.Limits{})
	b.openEgress(store.Egress{Mode: store.EgressPublic}, false)
	if out := b.ok("ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces with the egress open: %q", out)
	}
	var script strings.Builder
	script.WriteString(`import errno, socket, subprocess
def attempt(host, port):
    try:
        socket.create_connection((host, port), timeout=3)
        return "connected"
    except OSError as e:
        return "refused " + errno.errorcode.get(e.errno, str(e))
`)
	for _, h := range hosts {
		fmt.Fprintf(&script, "print(%q, attempt(%q, %d))\n", h, h, port)
		fmt.Fprintf(&script, `print("proxy", subprocess.run(["curl", "-sS", "-m", "10", "--noproxy", "", "-x", "http://127.0.0.1:3128", "-p", "telnet://%s"], capture_output=True, text=True).stdout.strip())`+"\n",
			net.JoinHostPort(h, fmt.Sprint(port)))
	}
	r := b.py(script.String())
	if strings.Contains(r.stdout, "host service") || strings.Contains(r.stdout, "connected") {
		t.Errorf("the host was reached: %v", r)
	}
	if n := strings.Count(r.stdout, "proxy lbb egress:"); n != 0 {
		t.Logf("%d refusals of the guard's shown by curl", n)
	}
	for _, h := range hosts {
		if !strings.Contains(r.stdout, h+" refused ") {
			t.Errorf("%s directly: %v", h, r)
		}
	}
}

// egressAbuse: garbage, half-open handshakes and a flood of connections to the proxies
// leave the agent answering and the host untouched.
func (e *env) egressAbuse(t *testing.T) {
	b := e.boot(t, runtime.Limits{})
	sb := b.openEgress(store.Egress{Mode: store.EgressAllowlist, Allow: []string{"example.invalid"}}, false)
	r := b.py(`
import socket
def send(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(data)
    got = b""
    try:
        while len(got) < 200:
            b = s.recv(200)
            if not b: break
            got += b
    except OSError as e:
        got += str(e).encode()
    return got
print("garbage", send(3128, b"\x00\xff" * 5000 + b"\r\n\r\n")[:12])
print("socks-auth", send(1080, b"\x05\x01\x02"))
print("socks-bind", send(1080, b"\x05\x01\x00" + b"\x05\x02\x00\x03\x0bexample.org\x00\x50"))
print("socks-name", send(1080, b"\x05\x01\x00" + b"\x05\x01\x00\x03\x04a b!\x00\x50")[:4])
held = []
for i in range(2000):
    try:
        held.append(socket.create_connection(("127.0.0.1", 3128), timeout=5))
    except OSError as e:
        break
for s in held:
    try: s.sendall(b"CONNECT 10.0.0.1:80 HTTP/1.1\r\nHost: x\r\n\r\n")
    except OSError: pass
print("held", len(held) > 600)
`)
	for _, want := range []string{"garbage b'HTTP/1.1 400", `socks-auth b'\x05\xff'`, `socks-bind b'\x05\x00\x05\x07`, `socks-name b'\x05\x00\x05\x02`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("%q lacks %q (%v; the guard saw %+v)", r.stdout, want, r, sb.Usage())
		}
	}
	if err := b.ping(); err != nil {
		t.Fatalf("the agent after the abuse: %v", err)
	}
	if u := sb.Usage(); u.Connections != 0 || u.BytesIn+u.BytesOut != 0 {
		t.Errorf("the abuse got out: %+v", u)
	}
}
