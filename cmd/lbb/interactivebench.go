//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// interactiveFigures measures a terminal's keystroke echo (a key typed into cat on the
// sandbox's pty until the terminal echoes it back) and a request through a preview of a
// Python http.server in the sandbox, beside the same request to the same server on the host.
func interactiveFigures(ctx context.Context, c *lbb.Client, sandboxID string, n int) ([]benchFigure, error) {
	t, err := c.Sandboxes.OpenTerminal(ctx, sandboxID, lbb.TerminalParams{Argv: []string{"cat"}})
	if err != nil {
		return nil, err
	}
	defer t.Close()
	buf := make([]byte, 4096)
	var keys []time.Duration
	for i := range n + 1 {
		k := []byte{'a' + byte(i%26)}
		t0 := time.Now()
		if _, err := t.Write(k); err != nil {
			return nil, err
		}
		for got := false; !got; {
			m, err := t.Read(buf)
			if err != nil {
				return nil, err
			}
			got = bytes.Contains(buf[:m], k)
		}
		if i > 0 { // the first waits for cat to start
			keys = append(keys, time.Since(t0))
		}
	}
	figs := []benchFigure{quantiles("terminal keystroke echo (WebSocket, pty)", keys)}

	if _, err := c.Sandboxes.Exec(ctx, sandboxID, lbb.ExecParams{Argv: []string{"sh", "-c",
		"mkdir -p www && echo hello > www/index.html && cd www && (python3 -m http.server 8000 >/dev/null 2>&1 &)"}}); err != nil {
		return nil, err
	}
	p, err := c.Sandboxes.PreviewURL(ctx, sandboxID, 8000, lbb.PreviewParams{ExpiresInSeconds: 600})
	if err != nil {
		return figs, fmt.Errorf("preview: %w (start the server with --preview-addr)", err)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return nil, err
	}
	// *.localhost is this machine; the client dials the preview listener for any name.
	previewAddr := net.JoinHostPort("127.0.0.1", u.Port())
	preview := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, previewAddr)
	}}}
	rounds := func(hc *http.Client, target string) ([]time.Duration, error) {
		var ds []time.Duration
		deadline := time.Now().Add(30 * time.Second)
		for len(ds) < n {
			t0 := time.Now()
			resp, err := hc.Get(target)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("%s: %s", target, resp.Status)
				}
			}
			if err != nil {
				if time.Now().After(deadline) {
					return nil, err
				}
				time.Sleep(100 * time.Millisecond) // the server is starting
				continue
			}
			ds = append(ds, time.Since(t0))
		}
		return ds, nil
	}
	pd, err := rounds(preview, p.URL)
	if err != nil {
		return figs, err
	}
	figs = append(figs, quantiles("preview request (GET / of python http.server in the sandbox)", pd))

	dir, err := os.MkdirTemp("", "lbb-bench-www-")
	if err != nil {
		return figs, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("hello\n"), 0o644); err != nil {
		return figs, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return figs, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command("python3", "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1")
	srv.Dir = dir
	if err := srv.Start(); err != nil {
		return figs, fmt.Errorf("python3 on the host: %w", err)
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	hd, err := rounds(&http.Client{Timeout: 30 * time.Second}, fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return figs, err
	}
	return append(figs, quantiles("the same request to python http.server on the host", hd)), nil
}
