//go:build linux

package mcp

// The end-to-end tests: a real `lbb serve` (the ns driver, the base image) and real MCP
// clients over both transports: the Go SDK's client, and the TypeScript SDK's
// (@modelcontextprotocol/sdk, run by node from testdata/npm-client). They need root and a
// built image (`make images`) and skip, saying why, without them; `make test` sets LBB_BIN,
// without it they build bin/lbb and bin/lbb-agent into a temporary directory.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// live is the one lbb serve the end-to-end tests share.
var live struct {
	once   sync.Once
	skip   string
	err    error
	bin    string
	url    string
	key    string
	level3 bool
	// level3Why is what the server answered to a create, when it made no sandbox.
	level3Why string
	cmd       *exec.Cmd
	exited    chan struct{}
	cleanup   []func()
	log       bytes.Buffer
	logMu     sync.Mutex
}

func TestMain(m *testing.M) {
	code := m.Run()
	if live.cmd != nil {
		live.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-live.exited:
		case <-time.After(time.Minute):
			live.cmd.Process.Kill()
			<-live.exited
		}
	}
	for i := len(live.cleanup) - 1; i >= 0; i-- {
		live.cleanup[i]()
	}
	os.Exit(code)
}

type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	live.logMu.Lock()
	defer live.logMu.Unlock()
	return live.log.Write(p)
}

func serverLog() string {
	live.logMu.Lock()
	defer live.logMu.Unlock()
	lines := strings.Split(live.log.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// requireServer starts lbb serve the first time a test needs it, or skips saying why not.
func requireServer(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short skips the end-to-end tests (they need root and the base image)")
	}
	live.once.Do(startLive)
	if live.skip != "" {
		testkit.SkipPrivileged(t, "%s", live.skip)
	}
	if live.err != nil {
		t.Fatal(live.err)
	}
}

var servingLine = regexp.MustCompile(`lbb: serving on (http://\S+)`)

func startLive() {
	if os.Geteuid() != 0 {
		live.skip = "lbb serve's ns driver needs root (euid 0)"
		return
	}
	imagesDir := images.DefaultDir("")
	if _, err := images.Current(imagesDir); err != nil {
		live.skip = fmt.Sprintf("no base image in %s: run `make images` (%v)", imagesDir, err)
		return
	}
	live.bin = os.Getenv("LBB_BIN")
	if live.bin == "" {
		dir, err := os.MkdirTemp("", "lbb-mcp-bin-")
		if err != nil {
			live.err = err
			return
		}
		live.cleanup = append(live.cleanup, func() { os.RemoveAll(dir) })
		for _, b := range []struct{ out, pkg string }{{"lbb", "./cmd/lbb"}, {"lbb-agent", "./cmd/lbb-agent"}} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
			cmd.Dir = "../.."
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				live.err = fmt.Errorf("building %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		live.bin = filepath.Join(dir, "lbb")
	}
	dir, err := os.MkdirTemp("", "lbb-mcp-e2e-")
	if err != nil {
		live.err = err
		return
	}
	live.cleanup = append(live.cleanup, func() { os.RemoveAll(dir) })
	// The sandboxes' own user ids traverse to their state under the data directory.
	os.Chmod(dir, 0o711)
	data := filepath.Join(dir, "data")
	live.cmd = exec.Command(live.bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", data, "--images-dir", imagesDir)
	pr, pw := io.Pipe()
	live.cmd.Stderr = io.MultiWriter(logWriter{}, pw)
	live.cmd.Stdout = logWriter{}
	if err := live.cmd.Start(); err != nil {
		live.err, live.cmd = err, nil
		return
	}
	live.exited = make(chan struct{})
	go func() { live.cmd.Wait(); pw.Close(); close(live.exited) }()
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
	case live.url = <-found:
	case <-live.exited:
		live.err = fmt.Errorf("lbb serve ended:\n%s", serverLog())
		return
	case <-time.After(3 * time.Minute):
		live.err = fmt.Errorf("lbb serve did not start:\n%s", serverLog())
		return
	}
	b, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		live.err = err
		return
	}
	live.key = strings.TrimSpace(string(b))
	// Level 3 (long-lived sandboxes) is there when the server makes one.
	c, err := lbb.New(lbb.Options{BaseURL: live.url, APIKey: live.key, Graph: "main"})
	if err != nil {
		live.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{ExpiresInSeconds: 60}); err == nil {
		live.level3 = true
		c.Sandboxes.Delete(ctx, sb.ID)
	} else {
		live.level3Why = err.Error()
	}
}

func requireLevel3(t *testing.T) {
	t.Helper()
	if !live.level3 {
		testkit.SkipPrivileged(t, "this lbb serve makes no long-lived sandboxes (Level 3): %s", live.level3Why)
	}
}

func apiClient(t *testing.T) *lbb.Client {
	c, err := lbb.New(lbb.Options{BaseURL: live.url, APIKey: live.key, Graph: "main"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mcpURL is where MCP over HTTP is served: lbb serve's own /mcp when it has one, else this
// package's handler, in front of lbb serve, on a test server.
func mcpURL(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest("POST", live.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+live.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Logf("MCP over HTTP: lbb serve's own %s/mcp", live.url)
			return live.url + "/mcp"
		}
	}
	srv := httptest.NewServer(NewHTTPHandler(live.url, HTTPOptions{}))
	t.Cleanup(srv.Close)
	t.Logf("MCP over HTTP: NewHTTPHandler on %s (lbb serve has no /mcp yet)", srv.URL)
	return srv.URL
}

func connectStdio(t *testing.T, p *person, protocol string) *gomcp.ClientSession {
	t.Helper()
	cmd := exec.Command(live.bin, "mcp")
	cmd.Env = append(os.Environ(), "LBB_URL="+live.url, "LBB_API_KEY="+live.key, "LBB_GRAPH=main")
	cmd.Stderr = os.Stderr
	cs, err := newClient(p).Connect(context.Background(), &gomcp.CommandTransport{Command: cmd},
		&gomcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	t.Logf("stdio (lbb mcp): protocol %s", cs.InitializeResult().ProtocolVersion)
	return cs
}

func connectHTTP(t *testing.T, p *person, protocol string) *gomcp.ClientSession {
	t.Helper()
	tr := &gomcp.StreamableClientTransport{Endpoint: mcpURL(t) + "?graph=main",
		HTTPClient: &http.Client{Transport: bearerTransport{key: live.key}}}
	cs, err := newClient(p).Connect(context.Background(), tr, &gomcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	t.Logf("streamable HTTP: protocol %s", cs.InitializeResult().ProtocolVersion)
	return cs
}

// scenario is what every Go client does against the real server.
func scenario(t *testing.T, connect func(*testing.T, *person, string) *gomcp.ClientSession) {
	for _, proto := range protocols {
		t.Run("protocol="+cmp(proto, "newest"), func(t *testing.T) {
			p := &person{}
			cs := connect(t, p, proto)
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			if strings.Join(names, ",") != "lbb_sandboxes_delete,lbb_sandboxes_manage,lbb_sandboxes_read" {
				t.Fatalf("tools: %v", names)
			}

			out, isErr := call(t, cs, toolManage, map[string]any{"action": "run",
				"code": "def run(input, config):\n    return sum(input)", "input": []int{1, 2, 3}})
			if isErr || !strings.Contains(out, "result (JSON): "+untrustedIntro+"\n<untrusted-output>\n6\n</untrusted-output>") {
				t.Fatalf("run:\n%s", out)
			}
			cmdID := regexp.MustCompile(`Run (cmd_\S+)`).FindStringSubmatch(out)
			if cmdID == nil {
				t.Fatalf("no command id in:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "get_command", "command_id": cmdID[1]}); isErr ||
				!strings.Contains(out, "succeeded") || !strings.Contains(out, "<untrusted-output>\n6\n</untrusted-output>") {
				t.Errorf("get_command:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "get_usage", "group_by": "day"}); isErr ||
				!strings.HasPrefix(out, "Usage of graph main: ") || !strings.Contains(out, "vcpu_ms") {
				t.Errorf("get_usage:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "list_sandboxes", "limit": 5}); isErr || !strings.Contains(out, "sbx_") {
				t.Errorf("list_sandboxes:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "list_templates"}); isErr || !strings.Contains(out, "lbb/python") {
				t.Errorf("list_templates:\n%s", out)
			}

			// The same idempotency_key answers the first run again and never runs the code twice;
			// with other code it is refused.
			key := lbb.NewIdempotencyKey()
			args := map[string]any{"action": "run", "code": "import random\ndef run(input, config):\n    return random.random()", "idempotency_key": key}
			first, _ := call(t, cs, toolManage, args)
			again, isErr := call(t, cs, toolManage, args)
			firstCmd := regexp.MustCompile(`Run (cmd_\S+)`).FindStringSubmatch(first)
			if isErr || firstCmd == nil || !strings.Contains(again, "Run "+firstCmd[1]+" ") || !strings.Contains(again, "did not run again") ||
				strings.Split(first, "result (JSON)")[1] != strings.Split(again, "result (JSON)")[1] {
				t.Errorf("replay:\n%s\nagain:\n%s", first, again)
			}
			args["code"] = "def run(input, config):\n    return 1"
			if out, isErr := call(t, cs, toolManage, args); !isErr || !strings.Contains(out, "422") {
				t.Errorf("the key with other code: %v\n%s", isErr, out)
			}

			// A run that raises is ok=false, with its traceback wrapped.
			out, isErr = call(t, cs, toolManage, map[string]any{"action": "run", "code": "def run(input, config):\n    raise ValueError('boom')"})
			if isErr || !strings.Contains(out, "NOT ok") || !strings.Contains(out, "ValueError") {
				t.Errorf("raising run:\n%s", out)
			}

			requireLevel3(t)
			api := apiClient(t)
			create := func() string {
				out, isErr := call(t, cs, toolManage, map[string]any{"action": "create", "expires_in_seconds": 300})
				id := sandboxID.FindString(out)
				if isErr || id == "" {
					t.Fatalf("create:\n%s", out)
				}
				t.Cleanup(func() { api.Sandboxes.Delete(context.Background(), id) })
				return id
			}
			status := func(id string) string {
				sb, err := api.Sandboxes.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				return sb.Status
			}

			id := create()
			if out, isErr := call(t, cs, toolManage, map[string]any{"action": "write_file", "sandbox_id": id,
				"path": "data.csv", "content": "1,2\n3,4\n"}); isErr || !strings.Contains(out, "Wrote 8 bytes") {
				t.Errorf("write_file:\n%s", out)
			}
			if out, isErr := call(t, cs, toolManage, map[string]any{"action": "exec", "sandbox_id": id,
				"argv": []string{"wc", "-l", "data.csv"}}); isErr || !strings.Contains(out, "2 data.csv") || !strings.Contains(out, "exit code 0") {
				t.Errorf("exec:\n%s", out)
			}
			if out, isErr := call(t, cs, toolManage, map[string]any{"action": "run", "sandbox_id": id,
				"code": "def run(input, config):\n    return len(open(input['file']).read().splitlines())", "input": map[string]any{"file": "data.csv"}}); isErr ||
				!strings.Contains(out, "<untrusted-output>\n2\n</untrusted-output>") {
				t.Errorf("run in the sandbox:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "list_files", "sandbox_id": id}); isErr || !strings.Contains(out, "data.csv") {
				t.Errorf("list_files:\n%s", out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "read_file", "sandbox_id": id, "path": "data.csv"}); isErr ||
				!strings.Contains(out, "<untrusted-output>\n1,2\n3,4\n</untrusted-output>") {
				t.Errorf("read_file:\n%s", out)
			}
			if out, isErr := call(t, cs, toolManage, map[string]any{"action": "stop", "sandbox_id": id}); isErr || status(id) != "stopped" {
				t.Errorf("stop (%s):\n%s", status(id), out)
			}
			if out, isErr := call(t, cs, toolManage, map[string]any{"action": "resume", "sandbox_id": id}); isErr || status(id) != "running" {
				t.Errorf("resume (%s):\n%s", status(id), out)
			}
			if out, isErr := call(t, cs, toolRead, map[string]any{"action": "read_file", "sandbox_id": id, "path": "data.csv"}); isErr || !strings.Contains(out, "3,4") {
				t.Errorf("read_file after resume:\n%s", out)
			}

			p.answer = "decline"
			out, isErr = call(t, cs, toolDelete, map[string]any{"sandbox_id": id})
			if isErr || !strings.Contains(out, "declined") || status(id) != "running" {
				t.Errorf("declined (%s):\n%s", status(id), out)
			}
			p.answer = "accept"
			out, isErr = call(t, cs, toolDelete, map[string]any{"sandbox_id": id})
			if isErr || status(id) != "destroyed" {
				t.Errorf("confirmed (%s):\n%s", status(id), out)
			}
			if q := p.questions(); len(q) != 2 || !strings.HasPrefix(q[0], "Destroy sandbox "+id+"?") {
				t.Errorf("questions: %q", q)
			}
		})
	}
}

func TestE2EGoClientStdio(t *testing.T) {
	requireServer(t)
	scenario(t, connectStdio)
}

func TestE2EGoClientHTTP(t *testing.T) {
	requireServer(t)
	scenario(t, connectHTTP)
}

func TestE2EDeleteRefusedWithoutElicitation(t *testing.T) {
	requireServer(t)
	requireLevel3(t)
	api := apiClient(t)
	sb, err := api.Sandboxes.Create(context.Background(), lbb.CreateParams{ExpiresInSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Sandboxes.Delete(context.Background(), sb.ID)
	for name, connect := range map[string]func(*testing.T, *person, string) *gomcp.ClientSession{"stdio": connectStdio, "http": connectHTTP} {
		cs := connect(t, nil, "")
		out, isErr := call(t, cs, toolDelete, map[string]any{"sandbox_id": sb.ID})
		if !isErr || !strings.Contains(out, "cannot ask") {
			t.Errorf("%s: %v\n%s", name, isErr, out)
		}
	}
	if got, err := api.Sandboxes.Get(context.Background(), sb.ID); err != nil || got.Status != "running" {
		t.Errorf("after refusals: %v %+v", err, got)
	}
}

// npmClient installs the TypeScript SDK (npm ci, from the lockfile) or skips saying why.
func npmClient(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata/npm-client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the TypeScript SDK's client cannot run")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: cannot install @modelcontextprotocol/sdk")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm ci in %s failed, so the TypeScript SDK's client cannot run: %v\n%s", dir, err, out)
	}
	return dir
}

func TestE2ENpmClient(t *testing.T) {
	requireServer(t)
	dir := npmClient(t)
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			target := live.bin
			if mode == "http" {
				target = mcpURL(t) + "?graph=main"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "client.mjs", mode, target)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "LBB_URL="+live.url, "LBB_API_KEY="+live.key, "LBB_GRAPH=main")
			if !live.level3 {
				cmd.Env = append(cmd.Env, "LBB_LEVEL3=0")
			}
			gvisor := false
			if _, err := os.Stat(runscPath); err == nil && live.level3 {
				gvisor = true
				cmd.Env = append(cmd.Env, "LBB_GVISOR=1")
			} else {
				t.Logf("the TypeScript client does not try snapshots: runsc is not at %s (%v) or there is no Level 3", runscPath, err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node client.mjs %s: %v\nstdout: %s\nstderr: %s\nserver: %s", mode, err, out, stderr.String(), serverLog())
			}
			var got struct {
				Tools                          []string
				AcceptedStatus, DeclinedStatus string
				Asked                          []string
				Failures                       []string
				CodeImage                      bool
				Snapshots                      *struct {
					PausedStatus, ResumedStatus string
					Asked                       []string
				}
			}
			if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if len(got.Failures) > 0 || len(got.Tools) != 3 {
				t.Errorf("%+v", got)
			}
			if !live.level3 {
				t.Logf("TypeScript SDK client over %s: tools %v, run ok; no deletes: this lbb serve has no Level 3 routes", mode, got.Tools)
				return
			}
			if got.AcceptedStatus != "destroyed" || got.DeclinedStatus != "running" || len(got.Asked) != 2 || !got.CodeImage {
				t.Errorf("%+v", got)
			}
			t.Logf("TypeScript SDK client over %s: tools %v, confirmed → %s, declined → %s, asked %q", mode, got.Tools, got.AcceptedStatus, got.DeclinedStatus, got.Asked)
			if gvisor {
				if s := got.Snapshots; s == nil || s.PausedStatus != "paused" || s.ResumedStatus != "running" || len(s.Asked) != 2 {
					t.Errorf("snapshots: %+v", s)
				} else {
					t.Logf("TypeScript SDK client over %s: gvisor snapshot, fork, pause → %s, resume → %s; snapshot delete asked %q", mode, s.PausedStatus, s.ResumedStatus, s.Asked)
				}
			}
		})
	}
}

// runscPath is where lbb serve finds runsc, the gvisor runtime.
const runscPath = "/usr/local/lib/lbb/runsc"

// The snapshot actions against the real server: on ns a clear refusal and a pause that waits
// for no command; on gvisor create → write_file → snapshot → fork (which reads the file as it
// was at the snapshot) → pause → resume, and the deletion of a snapshot that the person
// declines and one they confirm. The flow runs over stdio (lbb mcp, the newest protocol); the
// deletions over streamable HTTP with protocol 2025-11-25 (elicitation/create).
func TestE2ESnapshots(t *testing.T) {
	requireServer(t)
	requireLevel3(t)
	api := apiClient(t)
	p := &person{}
	cs := connectStdio(t, p, "")
	manage := func(args map[string]any) (string, bool) {
		t.Helper()
		out, isErr := call(t, cs, toolManage, args)
		t.Logf("%s %v → error %v:\n%s", toolManage, args, isErr, out)
		return out, isErr
	}
	get := func(id string) *lbb.Sandbox {
		t.Helper()
		sb, err := api.Sandboxes.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	create := func(isolation string) string {
		t.Helper()
		out, isErr := manage(map[string]any{"action": "create", "isolation": isolation, "expires_in_seconds": 600})
		id := sandboxID.FindString(out)
		if isErr || id == "" {
			t.Fatalf("create isolation=%s:\n%s\nserver: %s", isolation, out, serverLog())
		}
		t.Cleanup(func() { api.Sandboxes.Delete(context.Background(), id) })
		if got := get(id).Isolation; got != isolation {
			t.Fatalf("created on %q, asked for %q", got, isolation)
		}
		return id
	}

	t.Run("ns", func(t *testing.T) {
		id := create("ns")
		for _, action := range []string{"snapshot", "fork"} {
			out, isErr := manage(map[string]any{"action": action, "sandbox_id": id})
			if !isErr || !strings.Contains(out, "409 not_supported") || !strings.Contains(out, `memory snapshots need isolation "gvisor"`) ||
				!strings.Contains(out, "action=create isolation=gvisor") {
				t.Errorf("%s on ns: %v\n%s", action, isErr, out)
			}
		}
		if l, err := api.Sandboxes.Snapshots(context.Background(), id, lbb.ListParams{}); err != nil || len(l.Snapshots) != 0 {
			t.Errorf("snapshots of the ns sandbox: %v %+v", err, l)
		}
		// Pause with a command running freezes it with its sandbox; resume thaws both.
		out, isErr := manage(map[string]any{"action": "exec", "sandbox_id": id, "argv": []string{"sleep", "3"}, "wait_ms": -1})
		cmd := regexp.MustCompile(`Command (cmd_\S+)`).FindStringSubmatch(out)
		if isErr || cmd == nil {
			t.Fatalf("exec sleep:\n%s", out)
		}
		if out, isErr := manage(map[string]any{"action": "pause", "sandbox_id": id}); isErr || get(id).Status != "paused" {
			t.Errorf("pause with a command running: %v\n%s", isErr, out)
		}
		if out, isErr := manage(map[string]any{"action": "resume", "sandbox_id": id}); isErr || get(id).Status != "running" {
			t.Errorf("resume with a command running: %v\n%s", isErr, out)
		}
		if out, isErr := call(t, cs, toolRead, map[string]any{"action": "get_command", "command_id": cmd[1], "wait_ms": 30000}); isErr || !strings.Contains(out, "succeeded") {
			t.Fatalf("waiting for sleep:\n%s", out)
		}
		if out, isErr := manage(map[string]any{"action": "pause", "sandbox_id": id}); isErr || get(id).Status != "paused" || !strings.Contains(out, "paused ") {
			t.Errorf("pause (%s):\n%s", get(id).Status, out)
		}
		if out, isErr := manage(map[string]any{"action": "resume", "sandbox_id": id}); isErr || get(id).Status != "running" {
			t.Errorf("resume (%s):\n%s", get(id).Status, out)
		}
	})

	t.Run("gvisor", func(t *testing.T) {
		if _, err := os.Stat(runscPath); err != nil {
			testkit.SkipPrivileged(t, "gvisor is not installed (%v): lbb serve offers isolation gvisor only with runsc at %s", err, runscPath)
		}
		id := create("gvisor")
		if out, isErr := manage(map[string]any{"action": "write_file", "sandbox_id": id, "path": "notes.txt", "content": "before the snapshot\n"}); isErr {
			t.Fatalf("write_file:\n%s", out)
		}
		out, isErr := manage(map[string]any{"action": "snapshot", "sandbox_id": id, "metadata": map[string]string{"step": "notes"}})
		snap := snapshotID.FindString(out)
		if isErr || snap == "" || !strings.Contains(out, "processes, memory and disk, isolation gvisor") || get(id).Status != "running" {
			t.Fatalf("snapshot:\n%s\nserver: %s", out, serverLog())
		}
		// The source changes after the snapshot; a fork from it sees the file as it was.
		if out, isErr := manage(map[string]any{"action": "write_file", "sandbox_id": id, "path": "notes.txt", "content": "after the snapshot\n"}); isErr {
			t.Fatalf("write_file after the snapshot:\n%s", out)
		}
		if out, isErr := call(t, cs, toolRead, map[string]any{"action": "list_snapshots", "sandbox_id": id}); isErr || !strings.Contains(out, snap+"  gvisor") {
			t.Errorf("list_snapshots:\n%s", out)
		}
		if out, isErr := call(t, cs, toolRead, map[string]any{"action": "get_snapshot", "snapshot_id": snap}); isErr ||
			!strings.HasPrefix(out, "Snapshot "+snap+" of sandbox "+id) || !strings.Contains(out, `{"step":"notes"}`) {
			t.Errorf("get_snapshot:\n%s", out)
		}

		out, isErr = manage(map[string]any{"action": "fork", "sandbox_id": id, "snapshot_id": snap, "expires_in_seconds": 300})
		fork := ""
		if m := regexp.MustCompile(`Forked sandbox (sbx_\S+)`).FindStringSubmatch(out); m != nil {
			fork = m[1]
		}
		if isErr || fork == "" {
			t.Fatalf("fork:\n%s\nserver: %s", out, serverLog())
		}
		t.Cleanup(func() { api.Sandboxes.Delete(context.Background(), fork) })
		if sb := get(fork); sb.Status != "running" || sb.Isolation != "gvisor" || sb.ForkedFrom == nil || sb.ForkedFrom.Snapshot != snap {
			t.Errorf("the fork: %+v", sb)
		}
		if out, isErr := manage(map[string]any{"action": "exec", "sandbox_id": fork, "argv": []string{"cat", "notes.txt"}}); isErr ||
			!strings.Contains(out, "<untrusted-output>\nbefore the snapshot\n</untrusted-output>") {
			t.Errorf("the file in the fork:\n%s", out)
		}

		if out, isErr := manage(map[string]any{"action": "pause", "sandbox_id": id}); isErr || get(id).Status != "paused" {
			t.Fatalf("pause (%s):\n%s\nserver: %s", get(id).Status, out, serverLog())
		}
		if out, isErr := manage(map[string]any{"action": "snapshot", "sandbox_id": id}); !isErr || !strings.Contains(out, "409 conflict") ||
			!strings.Contains(out, "resume a stopped or paused sandbox first") {
			t.Errorf("snapshot of a paused sandbox: %v\n%s", isErr, out)
		}
		if out, isErr := manage(map[string]any{"action": "resume", "sandbox_id": id}); isErr || get(id).Status != "running" {
			t.Fatalf("resume (%s):\n%s\nserver: %s", get(id).Status, out, serverLog())
		}
		if out, isErr := manage(map[string]any{"action": "exec", "sandbox_id": id, "argv": []string{"cat", "notes.txt"}}); isErr ||
			!strings.Contains(out, "<untrusted-output>\nafter the snapshot\n</untrusted-output>") {
			t.Errorf("the file after resume:\n%s", out)
		}

		// A fork without snapshot_id snapshots the running source first, and keeps that snapshot.
		out, isErr = manage(map[string]any{"action": "fork", "sandbox_id": id, "expires_in_seconds": 120})
		fresh := sandboxID.FindAllString(out, -1)
		if isErr || len(fresh) == 0 || !strings.Contains(out, "taken now and kept with the source") {
			t.Fatalf("fork from a fresh snapshot:\n%s", out)
		}
		t.Cleanup(func() { api.Sandboxes.Delete(context.Background(), fresh[0]) })
		if from := get(fresh[0]).ForkedFrom; from == nil || from.Sandbox != id || from.Snapshot == snap {
			t.Errorf("forked from %+v", from)
		} else if _, err := api.GetSnapshot(context.Background(), from.Snapshot); err != nil {
			t.Errorf("the fresh snapshot %s is not kept: %v", from.Snapshot, err)
		}

		// Deleting the snapshot asks the person: declined keeps it, confirmed deletes it.
		hp := &person{answer: "decline"}
		hs := connectHTTP(t, hp, "2025-11-25")
		out, isErr = call(t, hs, toolDelete, map[string]any{"snapshot_id": snap})
		if _, err := api.GetSnapshot(context.Background(), snap); isErr || err != nil || !strings.Contains(out, "declined") {
			t.Errorf("declined (%v):\n%s", err, out)
		}
		hp.answer = "accept"
		out, isErr = call(t, hs, toolDelete, map[string]any{"snapshot_id": snap})
		if _, err := api.GetSnapshot(context.Background(), snap); isErr || !lbb.IsNotFound(err) || !strings.Contains(out, "is deleted") {
			t.Errorf("confirmed (%v):\n%s", err, out)
		}
		if q := hp.questions(); len(q) != 2 || !strings.HasPrefix(q[0], "Delete snapshot "+snap+" of sandbox "+id) {
			t.Errorf("questions: %q", q)
		}
		// The fork does not need its snapshot any more.
		if out, isErr := manage(map[string]any{"action": "exec", "sandbox_id": fork, "argv": []string{"cat", "notes.txt"}}); isErr || get(fork).Status != "running" {
			t.Errorf("the fork after its snapshot went:\n%s", out)
		}
		// A client that cannot ask deletes nothing.
		out, isErr = manage(map[string]any{"action": "snapshot", "sandbox_id": id})
		snap2 := snapshotID.FindString(out)
		if isErr || snap2 == "" {
			t.Fatalf("second snapshot:\n%s", out)
		}
		mute := connectHTTP(t, nil, "")
		if out, isErr := call(t, mute, toolDelete, map[string]any{"snapshot_id": snap2}); !isErr || !strings.Contains(out, "cannot ask") {
			t.Errorf("without elicitation: %v\n%s", isErr, out)
		}
		if _, err := api.GetSnapshot(context.Background(), snap2); err != nil {
			t.Errorf("the snapshot after a refused delete: %v", err)
		}
	})
}
