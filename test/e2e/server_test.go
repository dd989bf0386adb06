//go:build linux

// Package e2e tests lbb from the outside: a real `lbb serve` process with the real ns driver
// and the real base image, over real HTTP, and the lbb CLI against it. It needs root and a
// built image (`make images`); it skips, saying so, without them. `make test` sets LBB_BIN;
// without it the tests build bin/lbb and bin/lbb-agent themselves.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
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

// server is a running `lbb serve` (proc), and with LBB_E2E_REMOTE_HOST=1 the `lbb host` it
// runs its sandboxes on.
type server struct {
	t       *testing.T
	dataDir string
	args    []string
	*proc
	host               *proc
	hostURL, hostToken string
	url                string
	key                string
	// stderr is the output of both processes.
	stderr *testkit.Buffer
	// fleet is the two `lbb host` processes of LBB_E2E_FLEET=1 (fleet_suite_test.go).
	fleet *testFleet
}

// remoteHost runs every server's sandboxes in a host agent of its own process (lbb host),
// which lbb serve reaches over HTTP/2 on loopback.
var remoteHost = os.Getenv("LBB_E2E_REMOTE_HOST") == "1"

// proc is one lbb process.
type proc struct {
	cmd    *exec.Cmd
	exited chan error
	// stdio is the pipe the process writes its stdout and stderr to; drained is closed once
	// every writer of it is gone (the process, and whatever inherited it).
	stdio   *os.File
	stdioID string // "pipe:[inode]", as /proc/<pid>/fd shows it
	drained chan struct{}
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

// postgresStore runs every server on a PostgreSQL database of its own (--store), in one
// server the tests share.
var postgresStore = os.Getenv("LBB_E2E_STORE") == "postgres"

// pg is the PostgreSQL server of the tests that need one, started by the first of them.
var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// postgresSchema answers the --store URL of a new, empty schema.
func postgresSchema(t *testing.T) string {
	t.Helper()
	pg.once.Do(func() {
		if pg.srv, pg.err = pgtest.New(); pg.err == nil {
			testkit.AtExit(func() {
				if err := pg.srv.Stop(); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			})
		}
	})
	if errors.Is(pg.err, pgtest.ErrMissing) {
		testkit.SkipPrivileged(t, "%v", pg.err)
	} else if pg.err != nil {
		t.Fatal(pg.err)
	}
	dsn, err := pg.srv.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return pgtest.URL(dsn)
}

// startServer starts lbb serve on a free port with its own data directory.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	requireEnv(t)
	if (postgresStore || fleetMode) && !slices.Contains(args, "--store") {
		args = append(args, "--store", postgresSchema(t))
	}
	s := &server{t: t, dataDir: filepath.Join(newDataDir(t), "data"), args: args}
	t.Cleanup(func() { s.stop() }) // also a host agent whose server did not start
	s.start()
	return s
}

var (
	servingLine = regexp.MustCompile(`lbb: serving on (http://\S+)`)
	hostLine    = regexp.MustCompile(`lbb: host agent on (http://\S+)`)
)

func (s *server) start() {
	s.t.Helper()
	s.stderr = &testkit.Buffer{}
	common := []string{"--data-dir", s.dataDir, "--images-dir", imagesDir}
	args := append(append([]string{"serve", "--addr", "127.0.0.1:0"}, common...), s.args...)
	if remoteHost {
		token := rand.Text()
		s.hostToken = token
		s.host, s.hostURL = launch(s.t, append(append([]string{"host", "--listen", "127.0.0.1:0", "--token", token}, common...), s.args...),
			s.stderr, hostLine)
		args = append(args, "--host-agent", s.hostURL, "--host-agent-token", token)
	} else if fleetMode {
		args = append(args, s.startFleet(common)...)
	}
	s.proc, s.url = launch(s.t, args, s.stderr, servingLine)
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.key = strings.TrimSpace(string(b))
}

// launch starts lbb with args, its output going to log, and answers once a line of its
// stderr matches ready, with the line's first group.
func launch(t *testing.T, args []string, log *testkit.Buffer, ready *regexp.Regexp) (*proc, string) {
	t.Helper()
	p := &proc{cmd: exec.Command(lbbBin, args...), exited: make(chan error, 1), drained: make(chan struct{})}
	watch := testkit.WatchLines(ready)
	// A pipe of the test's own rather than one exec makes: after the process exits, the test
	// can name whoever still holds it (stop).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	p.stdio, p.stdioID = r, fmt.Sprintf("pipe:[%d]", st.Ino)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	go func() {
		io.Copy(io.MultiWriter(log, watch), r)
		close(p.drained)
	}()
	go func() { p.exited <- p.cmd.Wait() }()
	select {
	case u := <-watch.Found():
		return p, u
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		t.Fatalf("lbb %s did not start:\n%s", args[0], log)
	}
	return nil, ""
}

// stop ends the server with SIGTERM and waits for it, then its host agent. A process either
// started that outlives it holding its output fails the test, named.
func (s *server) stop() {
	for _, p := range append([]*proc{s.proc, s.host}, s.fleet.procs()...) {
		if held := p.end(syscall.SIGTERM); len(held) > 0 {
			s.t.Errorf("%s exited, but processes it started still hold its output: %s", p.cmd.Args[1], strings.Join(held, "; "))
		}
	}
	if s.t.Failed() {
		s.t.Logf("lbb serve log:\n%s", lastLines(s.stderr.String(), 40))
	}
}

// kill9 ends the server and its host agent as a crash would.
func (s *server) kill9() {
	s.proc.end(syscall.SIGKILL)
	s.host.end(syscall.SIGKILL)
	for _, p := range s.fleet.procs() {
		p.end(syscall.SIGKILL)
	}
}

// end signals the process and waits for it (killing it after 2 minutes), then up to 5 s for
// its output to end, and answers the processes that still hold it then.
func (p *proc) end(sig syscall.Signal) (held []string) {
	if p == nil || p.cmd.ProcessState != nil {
		return nil
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		<-p.exited
	}
	select {
	case <-p.drained:
	case <-time.After(5 * time.Second):
		held = holders(p.stdioID)
		p.stdio.Close() // the copy ends; the holders keep a pipe nobody reads
	}
	return held
}

// holders lists the processes (pid and command line) that have open the file that
// /proc/<pid>/fd shows as link.
func holders(link string) []string {
	var out []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	seen := map[string]bool{}
	for _, fd := range fds {
		pid := strings.Split(fd, "/")[2]
		if l, err := os.Readlink(fd); err != nil || l != link || seen[pid] || pid == fmt.Sprint(os.Getpid()) {
			continue
		}
		seen[pid] = true
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		out = append(out, pid+" "+strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " "))
	}
	return out
}

// metrics is the server's /metrics, and its host agent's (the warm pool's) when remote.
func (s *server) metrics(t *testing.T) string {
	t.Helper()
	r := s.call("GET", "/metrics", "", nil, "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	if s.hostURL == "" {
		return string(r.body)
	}
	req, err := http.NewRequest("GET", s.hostURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.hostToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the host agent's /metrics: %d %v", resp.StatusCode, err)
	}
	return string(r.body) + "\n" + string(b)
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
