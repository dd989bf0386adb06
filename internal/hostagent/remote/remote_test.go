package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// fake is a hostagent.Host in memory: it records the arguments of each call and answers
// the fixtures below, or fail when set.
type fake struct {
	mu   sync.Mutex
	name string
	args []any
	fail error

	// open is the content OpenFile answers ("content" when nil).
	open func() io.ReadCloser
	// entered makes Wait and Run wait for their context to end, then report it on canceled.
	entered, canceled chan struct{}
	// deaf makes Wait, with entered, answer only once deaf closes (a Host's call that does
	// not heed its context), still reporting the context's end on canceled.
	deaf chan struct{}
	// dialed gets the host's end of each connection DialPort answers, with quiet set (a port
	// that sends nothing).
	quiet  bool
	dialed chan net.Conn
	// stall makes WriteStdin read nothing until its context ends.
	stall bool
	// echo makes DialPort answer a connection that sends back what it gets.
	echo bool
	// flood makes DialPort answer a connection that sends without end and reads nothing (a
	// port's server that floods its visitors and never reads them); flooded counts what it
	// sent.
	flood   bool
	flooded atomic.Int64
	// stdout makes ReadHeld answer a stdout of that many bytes.
	stdout int64
	events []hostagent.Event
}

func (f *fake) rec(name string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name, f.args = name, args
	return f.fail
}

func (f *fake) last() (string, []any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.name, f.args
}

var (
	t0        = time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	usage     = store.Usage{VCPUMs: 12.5, GiBMs: 3.25}
	workspace = hostagent.Workspace{SHA256: strings.Repeat("ab", 32), Bytes: 4096, DiskBytes: 1 << 30, ArchivedAt: time.Unix(1700000000, 0).UTC()}
	limits    = runtime.Limits{MemoryMiB: 512, CPUs: 1.5, Pids: 64, DiskMiB: 100}
	entry     = hostagent.FileEntry{Path: "a/b.txt", Name: "b.txt", Type: "file", Size: 7, Mode: "0644", MTime: "2026-12-01T11:00:00Z"}
	zero      = 0
	end       = hostagent.CommandEnd{Status: "succeeded", OK: true, Result: json.RawMessage(`{"x":1}`), ExitCode: &zero,
		Stdout: store.Output{Head: "hi\n", Bytes: 3}, Stderr: store.Output{Tail: "e", Bytes: 1 << 20}, StdinBytes: 4,
		Started: t0, Ended: t0.Add(1500 * time.Millisecond)}
	info = hostagent.Info{Default: "ns", Offered: []string{"ns", "gvisor"}, Unavailable: map[string]string{"microvm": "no /dev/kvm"},
		Image: hostagent.Image{ID: "img1", Versions: map[string]string{"python": "3.13"}, Missing: []string{"node"}}}
	runReq = hostagent.RunRequest{SandboxID: "sbx_1", CommandID: "cmd_1", Limits: limits, Runtime: "gvisor", Language: "python",
		Code: "def run(i, c): return i", Input: json.RawMessage(`[1,2]`), Config: json.RawMessage(`{"k":"v"}`),
		Env: map[string]string{"TOKEN": "s3cret"}, Timeout: 90 * time.Second, HeadBytes: 10, TailBytes: 20,
		Files:  []hostagent.File{{Path: "data.csv", SHA256: "ab12"}},
		Egress: &hostagent.Egress{Policy: store.Egress{Mode: "allowlist", Allow: []string{"*.pkgs.example.org"}, QuotaBytes: 1 << 20}}}
	runResult = hostagent.RunResult{CommandEnd: end, SandboxStarted: t0, EndReason: "completed", Usage: usage}
	killed    = hostagent.RunResult{CommandEnd: hostagent.CommandEnd{Status: "killed", Error: "the server stopped"}, EndReason: "server_shutdown"}
	ending    = hostagent.Ending{At: t0, Usage: usage, Error: "umount: busy"}
	createReq = hostagent.CreateRequest{ID: "sbx_2", Limits: limits, Runtime: "ns", Warm: true,
		Files: []hostagent.File{{Path: "x", SHA256: "cd"}}, Env: map[string]string{"A": "b"},
		Egress: &hostagent.Egress{Policy: store.Egress{Mode: "public"}, API: true, Graph: "main"},
		Git:    &store.GitClone{URL: "https://example.org/r.git", Branch: "main", Depth: 1}}
	resumeReq = hostagent.ResumeRequest{ID: "sbx_2", Limits: limits, Runtime: "ns", Env: map[string]string{"A": "c"},
		Egress: &hostagent.Egress{Policy: store.Egress{Mode: "public"}, Used: &store.EgressUsage{BytesIn: 5, QuotaExceeded: true,
			Destinations: []store.EgressDestination{{Host: "a.test", Port: 443, Connections: 1}}}}}
	forkReq = hostagent.ForkRequest{ID: "sbx_3", Source: "sbx_2", SnapshotID: "snp_1", Limits: limits, Env: map[string]string{"B": "d"}}
	sandbox = hostagent.Sandbox{ID: "sbx_pool_1", Runtime: "ns", StartedAt: t0}
	heldReq = hostagent.HeldRead{CommandID: "cmd_2", Stdout: 12, Stderr: 3, Max: 1 << 16}
	held    = hostagent.HeldOutput{Pieces: []hostagent.OutputPiece{{Stream: "stdout", Offset: 12, Data: []byte("line\n")},
		{Stream: "stderr", Offset: 3, Data: []byte{0xff, 0, 'x'}}}}
	paused   = hostagent.Paused{Mode: "checkpoint", Usage: usage}
	snapshot = hostagent.SnapshotInfo{ID: "snp_1", Bytes: 1 << 30, Sandbox: sandbox}
	execReq  = hostagent.ExecRequest{SandboxID: "sbx_2", CommandID: "cmd_2", Argv: []string{"sh", "-c", "cat"},
		Env: map[string]string{"X": "y"}, Cwd: "/workspace/sub", Timeout: 3 * time.Minute, Stdin: []byte{0, 1, 2, 255},
		StdinOpen: true, HeadBytes: 5, TailBytes: 6}
	execRun = hostagent.ExecRequest{SandboxID: "sbx_2", CommandID: "cmd_3",
		Run: &hostagent.RunCall{Language: "node", Code: "x", Input: json.RawMessage(`1`)}, Timeout: time.Second}
	stdinRes = hostagent.StdinResult{Bytes: 5, Total: 9, Closed: true}
)

func (f *fake) Info(ctx context.Context) (hostagent.Info, error) { return info, f.rec("Info") }
func (f *fake) Claim(ctx context.Context, req hostagent.RunRequest) error {
	return f.rec("Claim", req)
}
func (f *fake) Unclaim(ctx context.Context, id string) error { return f.rec("Unclaim", id) }
func (f *fake) Run(ctx context.Context, req hostagent.RunRequest) (hostagent.RunResult, error) {
	if f.entered != nil {
		close(f.entered)
		<-ctx.Done()
		close(f.canceled)
		return killed, nil
	}
	return runResult, f.rec("Run", req)
}
func (f *fake) Release(ctx context.Context, id string) (hostagent.Ending, error) {
	return ending, f.rec("Release", id)
}
func (f *fake) Create(ctx context.Context, req hostagent.CreateRequest) (hostagent.Sandbox, error) {
	return sandbox, f.rec("Create", req)
}
func (f *fake) Resume(ctx context.Context, req hostagent.ResumeRequest) (hostagent.Sandbox, error) {
	return sandbox, f.rec("Resume", req)
}
func (f *fake) Stop(ctx context.Context, id string) (store.Usage, error) {
	return usage, f.rec("Stop", id)
}

func (f *fake) ArchiveWorkspace(ctx context.Context, id string) (hostagent.Workspace, error) {
	return workspace, f.rec("ArchiveWorkspace", id)
}
func (f *fake) Destroy(ctx context.Context, id string) (store.Usage, error) {
	return usage, f.rec("Destroy", id)
}
func (f *fake) Pause(ctx context.Context, id string) (hostagent.Paused, error) {
	return paused, f.rec("Pause", id)
}
func (f *fake) Snapshot(ctx context.Context, id, snapshotID string) (hostagent.SnapshotInfo, error) {
	return snapshot, f.rec("Snapshot", id, snapshotID)
}
func (f *fake) DeleteSnapshot(ctx context.Context, id string) error {
	return f.rec("DeleteSnapshot", id)
}
func (f *fake) Fork(ctx context.Context, req hostagent.ForkRequest) (hostagent.Sandbox, error) {
	return sandbox, f.rec("Fork", req)
}
func (f *fake) Usage(ctx context.Context, id string) (store.Usage, error) {
	return usage, f.rec("Usage", id)
}
func (f *fake) SetExpiry(ctx context.Context, id string, at time.Time) error {
	return f.rec("SetExpiry", id, at)
}
func (f *fake) SetGrant(ctx context.Context, id string, g *egress.Grant) error {
	return f.rec("SetGrant", id, g)
}
func (f *fake) Exec(ctx context.Context, req hostagent.ExecRequest) error { return f.rec("Exec", req) }
func (f *fake) Wait(ctx context.Context, id string) (hostagent.CommandEnd, error) {
	if f.deaf != nil {
		close(f.entered)
		context.AfterFunc(ctx, func() { close(f.canceled) })
		<-f.deaf
		return end, nil
	}
	if f.entered != nil {
		close(f.entered)
		<-ctx.Done()
		close(f.canceled)
		return end, ctx.Err()
	}
	return end, f.rec("Wait", id)
}
func (f *fake) Signal(ctx context.Context, id, signal string) error {
	return f.rec("Signal", id, signal)
}
func (f *fake) Resize(ctx context.Context, id string, size hostagent.PtySize) error {
	return f.rec("Resize", id, size)
}
func (f *fake) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if f.echo {
		a, b := net.Pipe()
		go func() {
			io.Copy(b, b)
			b.Close()
		}()
		return a, nil
	}
	if f.quiet {
		a, b := net.Pipe()
		f.dialed <- b
		return a, nil
	}
	if f.flood {
		return &floodConn{sent: &f.flooded, closed: make(chan struct{})}, nil
	}
	return nil, f.rec("DialPort", id, port)
}

// floodConn is a connection whose far end sends without end and never reads.
type floodConn struct {
	net.Conn
	sent   *atomic.Int64
	closed chan struct{}
	once   sync.Once
}

var (
	floodChunk  = make([]byte, 32<<10)
	floodChunk8 = make([]byte, 8<<20)
)

func (c *floodConn) Read(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	n := copy(p, floodChunk)
	c.sent.Add(int64(n))
	return n, nil
}

func (c *floodConn) Write(p []byte) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}

func (c *floodConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// TestDialPort: a connection to a port through the remote host agent carries bytes both ways
// while it lasts, after the call that opened it answered.
func TestDialPort(t *testing.T) {
	c, _ := serve(t, &fake{echo: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := c.DialPort(ctx, "sbx_1", 8000)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, msg := range []string{"hello", "again"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo: %q %v", buf, err)
		}
	}
}
func (f *fake) WriteStdin(ctx context.Context, id string, r io.Reader, closeIt bool) (hostagent.StdinResult, error) {
	if f.stall {
		<-ctx.Done()
		return hostagent.StdinResult{}, ctx.Err()
	}
	sum, n, err := digest(r)
	if err != nil {
		return hostagent.StdinResult{}, err
	}
	return stdinRes, f.rec("WriteStdin", id, sum, n, closeIt)
}

// ReadOutput answers from "0123456789" of which bytes before 4 were not kept.
func (f *fake) ReadOutput(ctx context.Context, id, stream string, off int64, most int) (int64, []byte, error) {
	if err := f.rec("ReadOutput", id, stream, off, most); err != nil {
		return 0, nil, err
	}
	const kept, from = "456789", 4
	start := max(off, from)
	if start >= from+int64(len(kept)) {
		return start, nil, io.EOF
	}
	data := []byte(kept[start-from:])
	if most > 0 && len(data) > most {
		data = data[:most]
	}
	return start, data, nil
}

// ReadHeld answers held, pieces of bytes that are not all text; with stdout set, up to
// req.Max bytes of a stdout of that many bytes.
func (f *fake) ReadHeld(ctx context.Context, req hostagent.HeldRead) (hostagent.HeldOutput, error) {
	if f.stdout > 0 {
		if req.Stdout >= f.stdout {
			return hostagent.HeldOutput{Ended: true}, nil
		}
		n := min(int64(req.Max), f.stdout-req.Stdout)
		return hostagent.HeldOutput{Pieces: []hostagent.OutputPiece{{Stream: "stdout", Offset: req.Stdout, Data: floodChunk8[:n]}}}, nil
	}
	return held, f.rec("ReadHeld", req)
}
func (f *fake) WriteFile(ctx context.Context, sandboxID, path string, r io.Reader) (hostagent.FileEntry, error) {
	sum, n, err := digest(r)
	if err != nil {
		return hostagent.FileEntry{}, err
	}
	e := entry
	e.Size = n
	return e, f.rec("WriteFile", sandboxID, path, sum)
}
func (f *fake) OpenFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, io.ReadCloser, error) {
	if err := f.rec("OpenFile", sandboxID, path); err != nil {
		return hostagent.FileEntry{}, nil, err
	}
	if f.open != nil {
		return entry, f.open(), nil
	}
	return entry, io.NopCloser(strings.NewReader("content")), nil
}
func (f *fake) StatFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return entry, f.rec("StatFile", sandboxID, path)
}
func (f *fake) ListFiles(ctx context.Context, sandboxID, path string, recursive bool) ([]hostagent.FileEntry, error) {
	return []hostagent.FileEntry{entry, entry}, f.rec("ListFiles", sandboxID, path, recursive)
}
func (f *fake) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return f.rec("RemoveFile", sandboxID, path, recursive)
}
func (f *fake) MakeDir(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return entry, f.rec("MakeDir", sandboxID, path)
}
func (f *fake) Sandboxes(ctx context.Context) ([]string, error) {
	return []string{"sbx_1", "sbx_2"}, f.rec("Sandboxes")
}
func (f *fake) Reap(ctx context.Context, keep []string) ([]string, error) {
	return []string{"sbx_9"}, f.rec("Reap", keep)
}

// Events sends f.events, then keeps the channel open until ctx ends and reports that on
// canceled.
func (f *fake) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	if err := f.rec("Events"); err != nil {
		return nil, err
	}
	ch := make(chan hostagent.Event)
	go func() {
		defer close(ch)
		for _, ev := range f.events {
			select {
			case ch <- ev:
			case <-ctx.Done():
			}
		}
		<-ctx.Done()
		close(f.canceled)
	}()
	return ch, nil
}

// digest reads r once, keeping only its sha256 and length.
func digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func sumOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

const token = "t0ken"

// serve starts a loopback server for f and a client of it; protos collects the protocol of
// every request the server saw.
func serve(t *testing.T, f *fake) (*Client, *protocols) {
	t.Helper()
	url, protos := start(t, f, token)
	c, err := NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, protos
}

// start serves f on loopback as lbb host does.
func start(t *testing.T, f *fake, serverToken string) (string, *protocols) {
	t.Helper()
	protos := &protocols{}
	h := NewServer(f, serverToken, slog.New(slog.DiscardHandler))
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.add(r.Proto)
		h.ServeHTTP(w, r)
	}), slog.New(slog.DiscardHandler))
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL, protos
}

type protocols struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (p *protocols) add(proto string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	p.seen[proto] = true
}

func (p *protocols) only(t *testing.T, want string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 1 || !p.seen[want] {
		t.Errorf("the server saw %v, want only %s", p.seen, want)
	}
}

var grant = &egress.Grant{URL: "http://127.0.0.1:7700", Token: "lbb_sk_x", Graph: "main"}

// calls are every method of Host with the arguments the fake should record and the result
// the client should answer.
var calls = []struct {
	name string
	call func(context.Context, hostagent.Host) (any, error)
	args []any
	want any
}{
	{"Info", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Info(ctx) }, nil, info},
	{"Claim", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.Claim(ctx, runReq) }, []any{runReq}, nil},
	{"Unclaim", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.Unclaim(ctx, "sbx_1") }, []any{"sbx_1"}, nil},
	{"Run", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Run(ctx, runReq) }, []any{runReq}, runResult},
	{"Release", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Release(ctx, "sbx_1") }, []any{"sbx_1"}, ending},
	{"Create", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Create(ctx, createReq) }, []any{createReq}, sandbox},
	{"Resume", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Resume(ctx, resumeReq) }, []any{resumeReq}, sandbox},
	{"Stop", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Stop(ctx, "sbx_2") }, []any{"sbx_2"}, usage},
	{"ArchiveWorkspace", func(ctx context.Context, h hostagent.Host) (any, error) { return h.ArchiveWorkspace(ctx, "sbx_2") }, []any{"sbx_2"}, workspace},
	{"Destroy", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Destroy(ctx, "sbx_2") }, []any{"sbx_2"}, usage},
	{"Pause", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Pause(ctx, "sbx_2") }, []any{"sbx_2"}, paused},
	{"Snapshot", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Snapshot(ctx, "sbx_2", "snp_1") },
		[]any{"sbx_2", "snp_1"}, snapshot},
	{"DeleteSnapshot", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.DeleteSnapshot(ctx, "snp_1") },
		[]any{"snp_1"}, nil},
	{"Fork", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Fork(ctx, forkReq) }, []any{forkReq}, sandbox},
	{"Usage", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Usage(ctx, "sbx_2") }, []any{"sbx_2"}, usage},
	{"SetExpiry", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.SetExpiry(ctx, "sbx_2", t0) },
		[]any{"sbx_2", t0}, nil},
	{"SetGrant", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.SetGrant(ctx, "sbx_2", grant) },
		[]any{"sbx_2", grant}, nil},
	{"Exec", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.Exec(ctx, execReq) }, []any{execReq}, nil},
	{"Exec", func(ctx context.Context, h hostagent.Host) (any, error) { return nil, h.Exec(ctx, execRun) }, []any{execRun}, nil},
	{"Wait", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Wait(ctx, "cmd_2") }, []any{"cmd_2"}, end},
	{"Signal", func(ctx context.Context, h hostagent.Host) (any, error) {
		return nil, h.Signal(ctx, "cmd_2", "SIGTERM")
	},
		[]any{"cmd_2", "SIGTERM"}, nil},
	{"Resize", func(ctx context.Context, h hostagent.Host) (any, error) {
		return nil, h.Resize(ctx, "cmd_2", hostagent.PtySize{Cols: 80, Rows: 24})
	},
		[]any{"cmd_2", hostagent.PtySize{Cols: 80, Rows: 24}}, nil},
	{"WriteStdin", func(ctx context.Context, h hostagent.Host) (any, error) {
		return h.WriteStdin(ctx, "cmd_2", strings.NewReader("hello"), true)
	}, []any{"cmd_2", sumOf("hello"), int64(5), true}, stdinRes},
	{"ReadOutput", func(ctx context.Context, h hostagent.Host) (any, error) {
		start, data, err := h.ReadOutput(ctx, "cmd_2", "stderr", 5, 3)
		return fmt.Sprintf("%d %s", start, data), err
	}, []any{"cmd_2", "stderr", int64(5), 3}, "5 567"},
	{"ReadHeld", func(ctx context.Context, h hostagent.Host) (any, error) { return h.ReadHeld(ctx, heldReq) }, []any{heldReq}, held},
	{"WriteFile", func(ctx context.Context, h hostagent.Host) (any, error) {
		return h.WriteFile(ctx, "sbx_2", "dir/ü ?&.txt", strings.NewReader("content"))
	}, []any{"sbx_2", "dir/ü ?&.txt", sumOf("content")}, entry},
	{"OpenFile", func(ctx context.Context, h hostagent.Host) (any, error) {
		fe, rc, err := h.OpenFile(ctx, "sbx_2", "a/b.txt")
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return fmt.Sprintf("%+v %s", fe, b), err
	}, []any{"sbx_2", "a/b.txt"}, fmt.Sprintf("%+v content", entry)},
	{"StatFile", func(ctx context.Context, h hostagent.Host) (any, error) { return h.StatFile(ctx, "sbx_2", "a") },
		[]any{"sbx_2", "a"}, entry},
	{"ListFiles", func(ctx context.Context, h hostagent.Host) (any, error) { return h.ListFiles(ctx, "sbx_2", "a", true) },
		[]any{"sbx_2", "a", true}, []hostagent.FileEntry{entry, entry}},
	{"RemoveFile", func(ctx context.Context, h hostagent.Host) (any, error) {
		return nil, h.RemoveFile(ctx, "sbx_2", "a", true)
	},
		[]any{"sbx_2", "a", true}, nil},
	{"MakeDir", func(ctx context.Context, h hostagent.Host) (any, error) { return h.MakeDir(ctx, "sbx_2", "d") },
		[]any{"sbx_2", "d"}, entry},
	{"Sandboxes", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Sandboxes(ctx) }, nil,
		[]string{"sbx_1", "sbx_2"}},
	{"Reap", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Reap(ctx, []string{"sbx_1"}) },
		[]any{[]string{"sbx_1"}}, []string{"sbx_9"}},
}

// TestRoundTrip calls every method through the client and checks that the fake got the
// same arguments and the client the same result, over HTTP/2.
func TestRoundTrip(t *testing.T) {
	f := &fake{}
	c, protos := serve(t, f)
	ctx := t.Context()
	for _, tc := range calls {
		got, err := tc.call(ctx, c)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s answered\n%#v\nwant\n%#v", tc.name, got, tc.want)
		}
		name, args := f.last()
		if name != tc.name || !reflect.DeepEqual(args, tc.args) {
			t.Errorf("%s: the host got %s%#v, want %#v", tc.name, name, args, tc.args)
		}
	}
	protos.only(t, "HTTP/2.0")
}

// TestErrors: every method's failure comes back with its class and code.
func TestErrors(t *testing.T) {
	for _, fail := range []error{
		errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning, "a command runs"),
		fmt.Errorf("sandbox sbx_2: %w", errdefs.NotFound("no such sandbox")),
		errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeTooManySandboxes, "10 running"),
		errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeIsolationUnavailable, "no gvisor"),
		errors.New("plain"),
		fmt.Errorf("waiting: %w", context.Canceled),
	} {
		c, _ := serve(t, &fake{fail: fail})
		for _, tc := range calls {
			_, err := tc.call(t.Context(), c)
			if errdefs.ClassOf(err) != errdefs.ClassOf(fail) || errdefs.CodeOf(err) != errdefs.CodeOf(fail) ||
				err.Error() != fail.Error() || errors.Is(err, context.Canceled) != errors.Is(fail, context.Canceled) {
				t.Errorf("%s: %v (%v, %s), want %v (%v, %s)", tc.name, err, errdefs.ClassOf(err), errdefs.CodeOf(err),
					fail, errdefs.ClassOf(fail), errdefs.CodeOf(fail))
			}
		}
		if _, err := c.Events(t.Context()); errdefs.ClassOf(err) != errdefs.ClassOf(fail) || errdefs.CodeOf(err) != errdefs.CodeOf(fail) {
			t.Errorf("Events: %v, want %v", err, fail)
		}
	}
}

// TestReadOutput: start > off says what was not kept; the end of the stream is io.EOF.
func TestReadOutput(t *testing.T) {
	c, _ := serve(t, &fake{})
	for _, tc := range []struct {
		off   int64
		max   int
		start int64
		data  string
		err   error
	}{
		{0, 0, 4, "456789", nil},
		{2, 2, 4, "45", nil},
		{7, 0, 7, "789", nil},
		{10, 0, 10, "", io.EOF},
		{12, 5, 12, "", io.EOF},
	} {
		start, data, err := c.ReadOutput(t.Context(), "cmd_1", "stdout", tc.off, tc.max)
		if start != tc.start || string(data) != tc.data || err != tc.err {
			t.Errorf("ReadOutput(off %d, max %d) = %d %q %v, want %d %q %v", tc.off, tc.max, start, data, err, tc.start, tc.data, tc.err)
		}
	}
}

// TestEvents: events arrive in order; the caller's ctx ends the server's call and closes
// the channel.
func TestEvents(t *testing.T) {
	evs := []hostagent.Event{
		{Kind: hostagent.EventDied, Sandbox: "sbx_1", Error: "oom", Usage: usage, At: t0},
		{Kind: hostagent.EventExpired, Sandbox: "sbx_2", At: t0.Add(time.Minute)},
	}
	f := &fake{events: evs, canceled: make(chan struct{})}
	c, _ := serve(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range evs {
		select {
		case got := <-ch:
			if !reflect.DeepEqual(got, want) {
				t.Errorf("event %+v, want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
	}
	cancel()
	await(t, f.canceled, "the server's Events went on after the client's context ended")
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("an event after the end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel stayed open")
	}
}

// await fails the test unless ch closes within 10 s.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// TestCancel: ending a call's context ends the server's call, and the call answers what
// the Host answered then: its result, or its context's error.
func TestCancel(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(context.Context, hostagent.Host) (any, error)
		want any
		err  error
	}{
		{"Wait", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Wait(ctx, "cmd_1") }, nil, context.Canceled},
		{"Run", func(ctx context.Context, h hostagent.Host) (any, error) { return h.Run(ctx, runReq) }, killed, nil},
	} {
		f := &fake{entered: make(chan struct{}), canceled: make(chan struct{})}
		c, _ := serve(t, f)
		ctx, cancel := context.WithCancel(t.Context())
		type answer struct {
			v   any
			err error
		}
		done := make(chan answer, 1)
		go func() { v, err := tc.call(ctx, c); done <- answer{v, err} }()
		await(t, f.entered, tc.name+" did not reach the server")
		cancel()
		await(t, f.canceled, "the server's "+tc.name+" went on after the client's context ended")
		got := <-done
		if !errors.Is(got.err, tc.err) || tc.want != nil && !reflect.DeepEqual(got.v, tc.want) {
			t.Errorf("%s answered %+v, %v; want %+v, %v", tc.name, got.v, got.err, tc.want, tc.err)
		}
	}

	// A deadline is the caller's own error.
	f := &fake{entered: make(chan struct{}), canceled: make(chan struct{})}
	c, _ := serve(t, f)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx, "cmd_1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its deadline: %v", err)
	}

	// A Cancel that overtakes its call ends the call as it arrives.
	f = &fake{entered: make(chan struct{}), canceled: make(chan struct{})}
	c, _ = serve(t, f)
	c.cancel("early")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, c.base+"Wait", strings.NewReader(`{"id":"cmd_1"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(headerCall, "early")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	await(t, f.canceled, "a call cancelled before it came went on")
}

// TestToken: a wrong, missing or unset token is Unauthorized; an unreachable host is
// Unavailable.
func TestToken(t *testing.T) {
	for _, tc := range []struct{ serverToken, clientToken string }{{token, "wrong"}, {token, token + "x"}, {"", "any"}} {
		url, _ := start(t, &fake{}, tc.serverToken)
		c, err := NewClient(url, tc.clientToken)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Info(t.Context()); errdefs.ClassOf(err) != errdefs.ClassUnauthorized {
			t.Errorf("server token %q, client token %q: %v, want Unauthorized", tc.serverToken, tc.clientToken, err)
		}
		c.Close()
	}
	if _, err := NewClient("http://127.0.0.1:1", ""); err == nil {
		t.Error("a client without a token")
	}
	for _, u := range []string{"127.0.0.1:7702", "unix:///x", "http://"} {
		if _, err := NewClient(u, token); err == nil {
			t.Errorf("NewClient(%q) took it", u)
		}
	}
	c, err := NewClient("http://127.0.0.1:1", token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(t.Context()); errdefs.ClassOf(err) != errdefs.ClassUnavailable {
		t.Errorf("an unreachable host: %v, want Unavailable", err)
	}
}

// TestTLS: an https URL speaks HTTP/2 over TLS.
func TestTLS(t *testing.T) {
	protos := &protocols{}
	h := NewServer(&fake{}, token, slog.New(slog.DiscardHandler))
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.add(r.Proto)
		h.ServeHTTP(w, r)
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	c, err := newClient(ts.URL, token, ts.Client().Transport.(*http.Transport).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Info(t.Context()); err != nil || !reflect.DeepEqual(got, info) {
		t.Fatalf("Info over TLS: %+v %v", got, err)
	}
	protos.only(t, "HTTP/2.0")
}

// pattern is size bytes made as they are read: it cannot be read twice, and never is whole
// in memory.
type pattern struct {
	size, off int64
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.size-p.off))
	for i := range n {
		b[i] = byte((p.off + int64(i)) * 7 >> 3)
	}
	p.off += int64(n)
	return n, nil
}

// peakHeap samples the heap until stop is called, and answers how far it rose.
func peakHeap() (stop func() uint64) {
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var ms goruntime.MemStats
			goruntime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// TestLargeFiles streams 200 MiB each way and checks that neither end held it whole.
func TestLargeFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: streams 400 MiB")
	}
	const size = 200 << 20
	const most = 64 << 20
	want, _, _ := digest(&pattern{size: size})
	f := &fake{open: func() io.ReadCloser { return io.NopCloser(&pattern{size: size}) }}
	c, _ := serve(t, f)

	stop := peakHeap()
	fe, err := c.WriteFile(t.Context(), "sbx_1", "big", &pattern{size: size})
	peak := stop()
	if err != nil {
		t.Fatal(err)
	}
	if _, args := f.last(); fe.Size != size || args[2] != want {
		t.Errorf("WriteFile: %d bytes, sha256 %v; want %d, %s", fe.Size, args[2], size, want)
	}
	t.Logf("WriteFile: the heap rose by %d MiB at most", peak>>20)
	if peak > most {
		t.Errorf("WriteFile: the heap rose by %d MiB", peak>>20)
	}

	stop = peakHeap()
	_, rc, err := c.OpenFile(t.Context(), "sbx_1", "big")
	if err != nil {
		t.Fatal(err)
	}
	sum, n, err := digest(rc)
	rc.Close()
	peak = stop()
	if err != nil || n != size || sum != want {
		t.Errorf("OpenFile: %d bytes, sha256 %s, %v; want %d, %s", n, sum, err, size, want)
	}
	t.Logf("OpenFile: the heap rose by %d MiB at most", peak>>20)
	if peak > most {
		t.Errorf("OpenFile: the heap rose by %d MiB", peak>>20)
	}
}

// TestStalledStream: a command that reads no stdin holds up no other call's upload on the
// same connection.
func TestStalledStream(t *testing.T) {
	c, _ := serve(t, &fake{stall: true})
	var stalled sync.WaitGroup
	defer stalled.Wait()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 4 {
		stalled.Go(func() { c.WriteStdin(ctx, "cmd_1", &pattern{size: 8 << 20}, false) })
	}
	time.Sleep(500 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := c.WriteFile(ctx, "sbx_1", "f", &pattern{size: 8 << 20}); err != nil {
			t.Error(err)
		}
	}()
	await(t, done, "a stalled stdin held up a file upload")
}

// failAfter reads n bytes of a pattern, then fails with err.
type failAfter struct {
	p   pattern
	err error
}

func (r *failAfter) Read(b []byte) (int, error) {
	n, err := r.p.Read(b)
	if err == io.EOF {
		return n, r.err
	}
	return n, err
}

func (r *failAfter) Close() error { return nil }

// TestStreamFailures: a file that fails while the host streams it ends with the host's
// error; a body that fails while the client sends it answers the body's error.
func TestStreamFailures(t *testing.T) {
	broke := errdefs.New(errdefs.ClassUnavailable, "", "the guest agent broke off")
	f := &fake{open: func() io.ReadCloser { return &failAfter{pattern{size: 3 << 20}, broke} }}
	c, _ := serve(t, f)
	_, rc, err := c.OpenFile(t.Context(), "sbx_1", "f")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if n != 3<<20 || errdefs.ClassOf(err) != errdefs.ClassUnavailable || err.Error() != broke.Error() {
		t.Errorf("OpenFile read %d bytes, then %v; want %d, then %v", n, err, 3<<20, broke)
	}

	tooBig := errdefs.New(errdefs.ClassPayloadTooLarge, "", "over the limit")
	_, err = c.WriteFile(t.Context(), "sbx_1", "f", &failAfter{pattern{size: 3 << 20}, tooBig})
	if !errors.Is(err, tooBig) {
		t.Errorf("WriteFile of a failing body: %v, want %v", err, tooBig)
	}
}

func TestDialPortRefused(t *testing.T) {
	c, _ := serve(t, &fake{fail: errdefs.Unavailable("nothing listens")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.DialPort(ctx, "sbx_1", 8000); errdefs.ClassOf(err) != errdefs.ClassUnavailable {
		t.Fatalf("DialPort: %v, want unavailable", err)
	}
}

// TestUnreadStreams: port connections left unread on both ends (a port's server that floods
// its visitors and never reads them, behind visitors that stopped reading) hold no more than
// their windows, and the link's other calls of every sandbox (a command, a file up and down,
// a ping) go on beside them. With Go's default windows 256 such streams took a whole
// connection window and stalled the host's link (maxStreams).
func TestUnreadStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: opens 300 streams")
	}
	const streams = 300
	f := &fake{flood: true, open: func() io.ReadCloser { return io.NopCloser(&pattern{size: 2 << 20}) }}
	c, _ := serve(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	heap := peakHeap()
	var uploaded atomic.Int64
	var writers sync.WaitGroup
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
		writers.Wait()
	}()
	for i := range streams {
		conn, err := c.DialPort(ctx, "sbx_1", 8000)
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		conns = append(conns, conn)
		writers.Go(func() {
			chunk := make([]byte, 32<<10)
			for uploaded.Load() < streams*(2<<20) {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
				uploaded.Add(int64(len(chunk)))
			}
		})
	}
	// Until the windows are full: nothing moves for half a second.
	last := int64(-1)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n := uploaded.Load() + f.flooded.Load()
		if n == last {
			break
		}
		last = n
	}
	peak := heap()
	t.Logf("%d unread streams: %d KiB up and %d KiB down a stream; the heap (both ends) rose by %d MiB at most",
		streams, uploaded.Load()/streams>>10, f.flooded.Load()/streams>>10, peak>>20)
	// A stream's windows on both ends, the client's frame buffer of its body and the
	// copies' buffers (Go's defaults grew it past 1 GiB).
	if most := uint64(streams) * 6 * streamWindow; peak > most {
		t.Errorf("%d unread streams grew the heap by %d MiB, want at most %d", streams, peak>>20, most>>20)
	}
	// A stream's windows, the client's frame buffer of its body and the copies' buffers.
	if most := int64(streams) * (4*streamWindow + 256<<10); uploaded.Load()+f.flooded.Load() > most {
		t.Errorf("%d unread streams took %d MiB, want at most %d", streams, (uploaded.Load()+f.flooded.Load())>>20, most>>20)
	}

	bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
	defer bcancel()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Exec(bctx, execReq); err != nil {
			t.Errorf("a command beside the unread streams: %v", err)
		} else if got, err := c.Wait(bctx, execReq.CommandID); err != nil || !reflect.DeepEqual(got, end) {
			t.Errorf("a command's Wait beside the unread streams: %+v %v", got, err)
		}
		want, _, _ := digest(&pattern{size: 2 << 20})
		if fe, err := c.WriteFile(bctx, "sbx_2", "f", &pattern{size: 2 << 20}); err != nil || fe.Size != 2<<20 {
			t.Errorf("a file upload beside the unread streams: %+v %v", fe, err)
		}
		if _, rc, err := c.OpenFile(bctx, "sbx_2", "f"); err != nil {
			t.Errorf("a file download beside the unread streams: %v", err)
		} else {
			sum, n, err := digest(rc)
			rc.Close()
			if err != nil || n != 2<<20 || sum != want {
				t.Errorf("a file download beside the unread streams: %d bytes, %v", n, err)
			}
		}
		if _, err := c.Info(bctx); err != nil {
			t.Errorf("a ping (Info) beside the unread streams: %v", err)
		}
	}()
	<-done
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the calls beside the unread streams took %v", took)
	}
	t.Logf("a command, a 2 MiB file up and down and a ping beside %d unread streams took %v", streams, time.Since(start))
}

// TestLinkThroughput measures one stream through the link (LBB_MEASURE_LINK=1): 1 GiB of
// stdout read as the API's SSE reads it (ReadHeld, 256 KiB a call) and a 1 GiB file down and up.
func TestLinkThroughput(t *testing.T) {
	if os.Getenv("LBB_MEASURE_LINK") == "" {
		t.Skip("LBB_MEASURE_LINK=1 measures the link's throughput")
	}
	const size = 1 << 30
	f := &fake{stdout: size, open: func() io.ReadCloser { return io.NopCloser(&pattern{size: size}) }}
	c, _ := serve(t, f)
	start := time.Now()
	var off int64
	for {
		h, err := c.ReadHeld(t.Context(), hostagent.HeldRead{CommandID: "cmd_1", Stdout: off, Max: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if h.Ended {
			break
		}
		off += int64(len(h.Pieces[0].Data))
	}
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f MiB/s", float64(size>>20)/d.Seconds()) }
	t.Logf("window %d KiB: stdout (ReadHeld) %s", streamWindow>>10, rate(time.Since(start)))
	start = time.Now()
	_, rc, err := c.OpenFile(t.Context(), "sbx_1", "big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != size {
		t.Fatal(n, err)
	}
	t.Logf("window %d KiB: file down %s", streamWindow>>10, rate(time.Since(start)))
	start = time.Now()
	if _, err := c.WriteFile(t.Context(), "sbx_1", "big", &pattern{size: size}); err != nil {
		t.Fatal(err)
	}
	t.Logf("window %d KiB: file up %s", streamWindow>>10, rate(time.Since(start)))
}

// TestCancelPrompt: a call ends within seconds of its context whatever the host does: a Host
// that does not heed the context gets the stream reset after cancelGrace, a Cancel that
// cannot reach the server (a stalled link) resets it after cancelAnswer; either way the
// server's call sees its context end.
func TestCancelPrompt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		deaf  bool
		stall bool
		most  time.Duration
	}{
		{"a deaf host", true, false, cancelAnswer + cancelGrace + 2*time.Second},
		{"a stalled Cancel", false, true, cancelAnswer + 2*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{entered: make(chan struct{}), canceled: make(chan struct{})}
			if tc.deaf {
				f.deaf = make(chan struct{})
				defer close(f.deaf)
			}
			h := NewServer(f, token, slog.New(slog.DiscardHandler))
			stalled := make(chan struct{})
			defer close(stalled)
			ts := httptest.NewUnstartedServer(nil)
			ts.Config = NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.stall && r.URL.Path == "/v1/Cancel" {
					select {
					case <-stalled:
					case <-r.Context().Done():
					}
					return
				}
				h.ServeHTTP(w, r)
			}), slog.New(slog.DiscardHandler))
			ts.Start()
			defer ts.Close()
			c, err := NewClient(ts.URL, token)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { _, err := c.Wait(ctx, "cmd_1"); done <- err }()
			await(t, f.entered, "Wait did not reach the server")
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Wait answered %v, want context.Canceled", err)
				}
				t.Logf("Wait ended %v after its context", time.Since(start))
			case <-time.After(tc.most):
				t.Fatalf("Wait went on for %v after its context ended", tc.most)
			}
			await(t, f.canceled, "the server's Wait went on after the client's call ended")
		})
	}
}

// TestDialPortClose: closing a port connection ends the host's connection to the port, also
// when the port sends nothing and the client had closed its writing side.
func TestDialPortClose(t *testing.T) {
	f := &fake{quiet: true, dialed: make(chan net.Conn, 1)}
	c, _ := serve(t, f)
	conn, err := c.DialPort(t.Context(), "sbx_1", 8000)
	if err != nil {
		t.Fatal(err)
	}
	port := <-f.dialed
	conn.(interface{ CloseWrite() error }).CloseWrite()
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	read := make(chan error, 1)
	go func() { _, err := port.Read(make([]byte, 1)); read <- err }()
	select {
	case err := <-read:
		if err == nil {
			t.Error("the port read a byte")
		}
	case <-time.After(5 * time.Second):
		port.Close()
		t.Fatal("the host kept the port's connection after the client closed it")
	}
}

// selfSigned makes a certificate for names (DNS names or IP addresses), signed by itself.
func selfSigned(t *testing.T, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lbb host"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

// TestTLSVerify: over TLS the client checks the host's certificate: one its roots sign, for
// the host's name, or the call fails Unavailable and sends no token; a URL in clear text
// off loopback is refused.
func TestTLSVerify(t *testing.T) {
	serveCert := func(cert tls.Certificate) string {
		ts := httptest.NewUnstartedServer(nil)
		ts.Config = NewHTTPServer(NewServer(&fake{}, token, slog.New(slog.DiscardHandler)), slog.New(slog.DiscardHandler))
		ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
		ts.StartTLS()
		t.Cleanup(ts.Close)
		return ts.URL
	}
	good, pool := selfSigned(t, "127.0.0.1")
	url := serveCert(good)
	c, err := newClient(url, token, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Info(t.Context()); err != nil || !reflect.DeepEqual(got, info) {
		t.Errorf("Info over TLS with the host's CA: %+v %v", got, err)
	}
	// The system's roots do not know a self-signed certificate.
	c2, err := NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Info(t.Context()); errdefs.ClassOf(err) != errdefs.ClassUnavailable || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Info over TLS with an unknown certificate: %v, want Unavailable for the certificate", err)
	}
	// A certificate the client trusts, for another name.
	other, otherPool := selfSigned(t, "host-b.example.org")
	c3, err := newClient(serveCert(other), token, &tls.Config{RootCAs: otherPool})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := c3.Info(t.Context()); errdefs.ClassOf(err) != errdefs.ClassUnavailable || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Info over TLS with a certificate for another name: %v, want Unavailable for the certificate", err)
	}
	for _, u := range []string{"http://10.0.0.11:7702", "http://host-a.example.org:7702", "http://[::]:7702"} {
		if _, err := NewClient(u, token); err == nil {
			t.Errorf("NewClient(%q) took a URL in clear text off loopback", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7702", "http://localhost:7702", "http://[::1]:7702", "https://10.0.0.11:7702"} {
		if _, err := NewClient(u, token); err != nil {
			t.Errorf("NewClient(%q): %v", u, err)
		}
	}
}

// TestUnreadStreamsHostHeap: the host's own heap beside 200 port connections a control plane
// in another process leaves unread both ways: each holds about its window of what the
// control plane sent, and the copies' buffers.
func TestUnreadStreamsHostHeap(t *testing.T) {
	if url := os.Getenv("LBB_TEST_UNREAD_CLIENT"); url != "" {
		unreadClient(t, url)
		return
	}
	if testing.Short() {
		t.Skip("-short: opens 200 streams from a second process")
	}
	const streams = 200
	f := &fake{flood: true}
	url, _ := start(t, f, token)
	heap := peakHeap()
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnreadStreamsHostHeap$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LBB_TEST_UNREAD_CLIENT="+url, fmt.Sprintf("LBB_TEST_UNREAD_STREAMS=%d", streams))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the client process: %v\n%s", err, out.String())
		}
	}()
	// Until the windows are full: nothing moves for half a second.
	last := int64(-1)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if n := f.flooded.Load(); n == last && n > 0 {
			break
		} else {
			last = n
		}
	}
	time.Sleep(500 * time.Millisecond)
	peak := heap()
	t.Logf("%d unread streams: the host's heap rose by %d MiB at most (%d KiB a stream)", streams, peak>>20, peak/streams>>10)
	if most := uint64(streams) * (streamWindow + 256<<10); peak > most {
		t.Errorf("%d unread streams grew the host's heap by %d MiB, want at most %d", streams, peak>>20, most>>20)
	}
}

// unreadClient opens LBB_TEST_UNREAD_STREAMS port connections to the host at url, sends on
// each until it blocks, reads none, and holds them until its stdin closes.
func unreadClient(t *testing.T, url string) {
	var streams int
	fmt.Sscan(os.Getenv("LBB_TEST_UNREAD_STREAMS"), &streams)
	c, err := NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	var writers sync.WaitGroup
	var conns []net.Conn
	for i := range streams {
		conn, err := c.DialPort(t.Context(), "sbx_1", 8000)
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		conns = append(conns, conn)
		writers.Go(func() {
			chunk := make([]byte, 32<<10)
			for {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
		})
	}
	io.Copy(io.Discard, os.Stdin)
	for _, conn := range conns {
		conn.Close()
	}
	writers.Wait()
}
