package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// previewServer is a Python server for the sandbox: pages, a page that sets and reads a
// cookie, the request's headers, and a WebSocket echo at /ws (the handshake and frames by
// hand: the image has no WebSocket library).
const previewServer = `
import base64, hashlib, http.server, json, socketserver, struct, sys

PAGE = """<!doctype html><title>lbb preview</title><body><p id=hello></p><p id=ws>waiting</p><p id=cookie></p>
<script>
document.getElementById('hello').textContent = 'hello from ' + 'the sandbox';
document.getElementById('cookie').textContent = 'cookies=[' + document.cookie + ']';
document.cookie = 'mine=' + location.hostname.split('.')[0].slice(-6) + '; path=/';
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
ws.onopen = () => ws.send('ping-' + (6*7));
ws.onmessage = (e) => { document.getElementById('ws').textContent = 'echo:' + e.data; };
ws.onerror = () => { document.getElementById('ws').textContent = 'ws error'; };
</script>"""

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def send(self, body, ctype='text/html'):
        b = body.encode()
        self.send_response(200)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == '/headers':
            return self.send(json.dumps(dict(self.headers)), 'application/json')
        if self.path == '/setcookie':
            b = b'set'
            self.send_response(200)
            self.send_header('Set-Cookie', 'shared=1; Domain=preview.localhost; Path=/')
            self.send_header('Content-Length', str(len(b)))
            self.end_headers()
            self.wfile.write(b)
            return
        if self.path == '/ws':
            key = self.headers['Sec-WebSocket-Key']
            acc = base64.b64encode(hashlib.sha1((key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
            self.send_response(101)
            self.send_header('Upgrade', 'websocket')
            self.send_header('Connection', 'Upgrade')
            self.send_header('Sec-WebSocket-Accept', acc)
            self.end_headers()
            self.wfile.flush()
            r = self.rfile
            while True:
                h = r.read(2)
                if len(h) < 2: return
                op, n = h[0] & 15, h[1] & 127
                if n == 126: n = struct.unpack('>H', r.read(2))[0]
                elif n == 127: n = struct.unpack('>Q', r.read(8))[0]
                mask = r.read(4)
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
                if op == 8: return
                if op == 1:
                    self.wfile.write(bytes([0x81, len(data)]) + data)
                    self.wfile.flush()
        return self.send(PAGE)

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
`

// TestPreview: a server inside a sandbox, reached through signed preview URLs on ns and
// gvisor: plain HTTP (no Authorization passed on), a tampered or expired URL (404), a port
// nothing listens on (502), and in headless Chromium the rendered page, a WebSocket round
// trip and two previews that do not share cookies.
func TestPreview(t *testing.T) {
	for _, rt := range []string{"ns", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "gvisor" {
				requireGvisor(t)
			}
			s := startServer(t, "--runtime", rt, "--pool=false", "--preview-addr", "127.0.0.1:0")
			c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
			if _, err := c.Files.Write(bg, sb.ID, "srv.py", strings.NewReader(previewServer)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"python3", "srv.py", "8000"}, WaitMs: -1}); err != nil {
				t.Fatal(err)
			}
			p, err := c.Sandboxes.PreviewURL(bg, sb.ID, 8000, lbb.PreviewParams{ExpiresInSeconds: 300})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(p.URL)
			if !strings.HasSuffix(u.Hostname(), ".preview.localhost") {
				t.Fatalf("preview URL %s", p.URL)
			}
			hc := previewClient(u.Port())
			get := func(raw string, hdr ...string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest("GET", raw, nil)
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			// The server takes a moment to listen: 502 until then.
			deadline := time.Now().Add(30 * time.Second)
			for {
				code, body := get(p.URL)
				if code == 200 && strings.Contains(body, "lbb preview") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the preview answers %d: %s", code, body)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if code, body := get(p.URL+"headers", "Authorization", "Bearer "+s.key); code != 200 || strings.Contains(body, s.key) ||
				strings.Contains(strings.ToLower(body), "authorization") {
				t.Errorf("headers the server saw: %d %s", code, body)
			}
			// A cookie of a preview stays its host's: no Domain shares it with other previews.
			if resp, err := hc.Get(p.URL + "setcookie"); err != nil {
				t.Fatal(err)
			} else {
				resp.Body.Close()
				if c := resp.Header.Get("Set-Cookie"); c != "shared=1; Path=/" {
					t.Errorf("Set-Cookie through the preview: %q", c)
				}
			}
			// Tampered: one character of the signature changed.
			host := u.Hostname()
			label := host[:strings.IndexByte(host, '.')]
			last := "a"
			if strings.HasSuffix(label, "a") {
				last = "b"
			}
			tampered := strings.Replace(p.URL, label, label[:len(label)-1]+last, 1)
			if code, _ := get(tampered); code != 404 {
				t.Errorf("a tampered URL answers %d, want 404", code)
			}
			// Another port than signed, with the same signature.
			if code, _ := get(strings.Replace(p.URL, "p8000-", "p8001-", 1)); code != 404 {
				t.Errorf("another port with the signature answers %d, want 404", code)
			}
			short, err := c.Sandboxes.PreviewURL(bg, sb.ID, 8000, lbb.PreviewParams{ExpiresInSeconds: 1})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2100 * time.Millisecond)
			if code, _ := get(short.URL); code != 404 {
				t.Errorf("an expired URL answers %d, want 404", code)
			}
			closed, err := c.Sandboxes.PreviewURL(bg, sb.ID, 9, lbb.PreviewParams{})
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := get(closed.URL); code != 502 {
				t.Errorf("a port nothing listens on answers %d, want 502", code)
			}
			// Another graph's key cannot make a URL of this sandbox, nor reach its port as the
			// owner's key does (p<port>-s<sandbox>, Authorization: Bearer), nor can no key.
			k, err := c.Keys.Create(bg, lbb.KeyParams{Name: "other", Graphs: []string{"other"}, Scopes: []string{"sandboxes:read", "sandboxes:write"}})
			if err != nil {
				t.Fatal(err)
			}
			o, _ := lbb.New(lbb.Options{BaseURL: s.url, APIKey: k.Secret, Graph: "other"})
			if _, err := o.Sandboxes.PreviewURL(bg, sb.ID, 8000, lbb.PreviewParams{}); lbb.StatusOf(err) != 404 {
				t.Errorf("another graph: %v, want 404", err)
			}
			owner := "http://p8000-s" + strings.TrimPrefix(sb.ID, "sbx_") + ".preview.localhost:" + u.Port() + "/"
			if code, body := get(owner, "Authorization", "Bearer "+s.key); code != 200 || !strings.Contains(body, "lbb preview") {
				t.Errorf("the owner's key: %d", code)
			}
			if code, _ := get(owner, "Authorization", "Bearer "+k.Secret); code != 404 {
				t.Errorf("another graph's key: %d, want 404", code)
			}
			if code, _ := get(owner); code != 404 {
				t.Errorf("no key: %d, want 404", code)
			}

			// The CLI's URL works the same.
			out, errOut, err := s.cli("sandbox", "url", sb.ID, "8000", "--expires", "10m")
			if err != nil {
				t.Fatalf("lbb sandbox url: %v: %s", err, errOut)
			}
			if code, body := get(strings.TrimSpace(out)); code != 200 || !strings.Contains(body, "lbb preview") {
				t.Errorf("the CLI's URL %q answers %d", out, code)
			}

			// A revoked preview answers 404; the others go on.
			l, err := c.Sandboxes.Previews(bg, sb.ID, lbb.ListParams{})
			if err != nil || len(l.Data) < 3 || l.Data[0].URL != "" {
				t.Fatalf("previews: %v %+v", err, l)
			}
			revoke, err := c.Sandboxes.PreviewURL(bg, sb.ID, 8000, lbb.PreviewParams{})
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := get(revoke.URL); code != 200 {
				t.Fatalf("a fresh preview answers %d", code)
			}
			if err := c.Sandboxes.DeletePreview(bg, sb.ID, revoke.ID); err != nil {
				t.Fatal(err)
			}
			if code, _ := get(revoke.URL); code != 404 {
				t.Errorf("a revoked preview answers %d, want 404", code)
			}

			browse(t, c, sb.ID, p.URL)

			// Previews end with the sandbox.
			if _, err := c.Sandboxes.Delete(bg, sb.ID); err != nil {
				t.Fatal(err)
			}
			if code, _ := get(p.URL); code != 404 {
				t.Errorf("the preview of a deleted sandbox answers %d, want 404", code)
			}
		})
	}
}

// previewClient reaches *.preview.localhost on the machine itself, as browsers and curl do.
func previewClient(port string) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, "127.0.0.1:"+port)
		},
	}}
}

// browse opens the preview in headless Chromium: the page renders, its WebSocket echoes, and
// a second preview of the same port (another URL, so another origin) does not see the
// first's cookie.
func browse(t *testing.T, c *lbb.Client, sandboxID, first string) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		testkit.SkipPrivileged(t, "chromium is not installed (scripts/deps.sh installs it): a preview is tested in a real browser")
	}
	// Chromium makes its singleton directory in TMPDIR and leaves it: here, the test's own.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.DisableGPU, chromedp.Env("TMPDIR="+t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	step := func(a chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, a); err != nil {
			t.Fatalf("chromium: %v", err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("chromium: %s: %v", sel, err)
		}
		return v
	}
	step(chromedp.Navigate(first))
	step(chromedp.WaitVisible("#hello"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('ws').textContent.startsWith('echo:') || document.getElementById('ws').textContent == 'ws error'`)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	hello, ws := text("#hello"), text("#ws")
	step(chromedp.Reload())
	step(chromedp.WaitVisible("#cookie"))
	cookies := text("#cookie")
	if hello != "hello from the sandbox" || ws != "echo:ping-42" || !strings.Contains(cookies, "mine=") {
		t.Errorf("the first preview: hello %q, ws %q, cookies %q", hello, ws, cookies)
	}
	second, err := c.Sandboxes.PreviewURL(bg, sandboxID, 8000, lbb.PreviewParams{ExpiresInSeconds: 200})
	if err != nil {
		t.Fatal(err)
	}
	if second.URL == first {
		t.Fatal("two previews share a URL")
	}
	step(chromedp.Navigate(second.URL))
	step(chromedp.WaitVisible("#cookie"))
	cookies2 := text("#cookie")
	if cookies2 != "cookies=[]" {
		t.Errorf("the second preview reads %q: it shares cookies with the first", cookies2)
	}
}
