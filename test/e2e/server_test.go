//go:build linux

// Package e2e tests lbb from the outside: a real `lbb serve` process with the real ns driver
// and the real base image, over real HTTP, and the lbb CLI against it. It needs root and a
// built image (`make images`); it skips, saying so, without them. `make test` sets LBB_BIN;
// without it the tests build bin/lbb and bin/lbb-agent themselves.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

var (
	lbbBin    string
	imagesDir string
	skipWhy   string
)

func TestMain(m *testing.M) {
	imagesDir = images.DefaultDir("")
	if os.Geteuid() != 0 {
		skipWhy = "the ns driver needs root (euid 0)"
	} else if _, err := images.Current(imagesDir); err != nil {
		skipWhy = fmt.Sprintf("no base image in %s: run `make images` (%v)", imagesDir, err)
	} else if lbbBin = os.Getenv("LBB_BIN"); lbbBin == "" {
		// lbb finds lbb-agent next to itself.
		for _, pkg := range []string{"github.com/littlebigbrain/lbb/cmd/lbb-agent", "github.com/littlebigbrain/lbb/cmd/lbb"} {
			if lbbBin, err = testkit.Build(pkg); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	testkit.Main(m, nil)
}

func requireEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short skips the end-to-end tests (they need root and the base image)")
	}
	if skipWhy != "" {
		testkit.SkipPrivileged(t, "%s", skipWhy)
	}
}

// server is a running `lbb serve`.
type server struct {
	t       *testing.T
	dataDir string
	args    []string
	cmd     *exec.Cmd
	url     string
	key     string
	stderr  *syncBuffer
	exited  chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newDataDir makes a data directory the sandboxes' own user ids can traverse to.
func newDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lbb-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startServer starts lbb serve on a free port with its own data directory.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	requireEnv(t)
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), args: args}
	s.start()
	t.Cleanup(func() { s.stop() })
	return s
}

var servingLine = regexp.MustCompile(`lbb: serving on (http://\S+)`)

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", s.dataDir, "--images-dir", imagesDir}, s.args...)
	s.cmd = exec.Command(lbbBin, args...)
	s.stderr = &syncBuffer{}
	pr, pw := io.Pipe()
	s.cmd.Stderr = io.MultiWriter(s.stderr, pw)
	s.cmd.Stdout = s.stderr
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.exited = make(chan error, 1)
	go func() { err := s.cmd.Wait(); pw.Close(); s.exited <- err }()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case s.url = <-found:
	case <-time.After(2 * time.Minute):
		s.cmd.Process.Kill()
		s.t.Fatalf("lbb serve did not start:\n%s", s.stderr)
	}
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(b))
}

// stop ends the server with SIGTERM and waits for it.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(2 * time.Minute):
		s.cmd.Process.Kill()
		<-s.exited
	}
	if s.t.Failed() {
		s.t.Logf("lbb serve log:\n%s", lastLines(s.stderr.String(), 40))
	}
}

// kill9 ends the server as a crash would.
func (s *server) kill9() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("not a JSON object (%d): %s", r.status, r.body)
	}
	return m
}

func (r reply) errCode(t *testing.T) string {
	t.Helper()
	e, _ := r.obj(t)["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// call sends one request with the admin key (key "-" sends none).
func (s *server) call(method, path, key string, hdr map[string]string, body string) reply {
	s.t.Helper()
	return s.callCtx(context.Background(), method, path, key, hdr, body)
}

func (s *server) callCtx(ctx context.Context, method, path, key string, hdr map[string]string, body string) reply {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	switch key {
	case "":
		req.Header.Set("Authorization", "Bearer "+s.key)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

// run posts a one-call run with an idempotency key and answers the decoded body.
func (s *server) run(key, body string) (reply, map[string]any) {
	s.t.Helper()
	r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": key}, body)
	if r.status != 200 && r.status != 202 {
		s.t.Fatalf("run %s: %d %s", key, r.status, r.body)
	}
	return r, r.obj(s.t)
}

// cli runs the lbb CLI against the server.
func (s *server) cli(args ...string) (string, string, error) {
	s.t.Helper()
	cmd := exec.Command(lbbBin, args...)
	cmd.Env = append(os.Environ(), "LBB_URL="+s.url, "LBB_API_KEY="+s.key, "LBB_GRAPH=main")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
