// Package runtimetest is the conformance suite every runtime driver passes, and the hostile
// suite: programs run inside sandboxes that try to escape, exhaust or leak, each of which
// must be contained. A driver's test wires it:
//
//	func TestRuntime(t *testing.T) {
//		runtimetest.Run(t, func(t *testing.T) runtime.Driver { return ns.New(cfg) }, runtimetest.Options{})
//	}
//
// The suites need a built base image (`make images`) and whatever the driver requires (for
// ns: root); they skip, saying why, when either is missing (fail, under the CI switch: see
// internal/testkit), and in -short mode.
package runtimetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// Options tune the suites for a driver.
type Options struct {
	// Image is the root file system sandboxes are made from; empty finds the built base
	// image (FindImage).
	Image string
	// Leftovers lists what a destroyed sandbox left on the host: processes, mounts, cgroups,
	// devices, directories. Nil checks only what the contract shows (List, the init process).
	Leftovers func(id string) []string
	// HostFiles (glob patterns, expanded when the hostile suite starts) must be
	// byte-identical after it: the driver's binaries that a sandbox could try to overwrite
	// (the agent, the init). The test binary, which a driver may re-execute, is always checked.
	HostFiles []string
	// StateDirsOf are the host directories that hold sandbox id's state, its disk and, while
	// it is started, its mount points (its run directory, where the driver keeps it apart):
	// no other host user may read anything in them. Nil skips the checks that need it.
	StateDirsOf func(id string) []string
	// HostIDs answers who started sandbox id is on the host, as its host processes show it
	// (driverkit.HostIDs). Nil skips the checks that need it.
	HostIDs func(id string) (driverkit.HostIDs, error)
	// SharedIDs says every sandbox maps the shared host id range here (the host cannot make
	// the idmapped mounts a range of each sandbox's own needs).
	SharedIDs bool
	// Known names hostile tests ("memory bomb") that the driver is known to fail, with the
	// issue-tracked reason: they skip, saying it. For a driver still being built only; ns
	// has none.
	Known map[string]string
	// Kernel is the release (uname -r) of the kernel the driver's sandboxes run on when it is
	// not the host's (microvm's guest kernel): the hostile suite checks that a sandbox sees
	// that kernel and nothing of the host's. Empty skips that case.
	Kernel string
	// Share runs the cases that need only a started sandbox with the default limits, and
	// leave it running, in one sandbox booted once: for a driver whose boot costs seconds
	// (microvm under TCG). Cases that change limits, stop, kill or destroy boot their own.
	Share bool
	// Slow names cases (as for Known) too slow for this host, with what they need: they skip
	// saying so. Only for what a host without acceleration cannot do in reasonable time.
	Slow map[string]string
}

// Run runs the conformance and hostile suites against the drivers newDriver makes.
func Run(t *testing.T, newDriver func(t *testing.T) runtime.Driver, opts Options) {
	if testing.Short() {
		t.Skip("the runtime suites start real sandboxes; skipped in -short mode")
	}
	if opts.Image == "" {
		opts.Image = FindImage(t)
	}
	d := newDriver(t)
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(t, "the runtime suites cannot run: %v", err)
	}
	e := &env{d: d, opts: opts, newDriver: newDriver, root: t}
	t.Run("conformance", e.conformance)
	t.Run("hostile", e.hostile)
}

// FindImage answers the rootfs of the built base image ($LBB_IMAGES_DIR, else
// /var/lib/lbb/images), or skips the test when none is built (testkit.SkipPrivileged).
func FindImage(t testing.TB) string {
	t.Helper()
	dir := images.DefaultDir("")
	if m, err := images.Current(dir); err == nil {
		return m.Rootfs
	}
	list, err := images.List(dir)
	if err != nil || len(list) == 0 {
		testkit.SkipPrivileged(t, "no base image in %s (run `make images`): %v", dir, err)
	}
	return list[0].Rootfs
}

// StateDir is a fresh state directory for a driver whose ancestors the sandbox's ids can
// search (t.TempDir makes them 0700).
func StateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	// A driver of this state directory keeps its run directories here (DefaultRunDir),
	// removed when empty by its Close; a test may not close every driver it makes.
	if run := driverkit.DefaultRunDir(dir); run != "" {
		t.Cleanup(func() { os.Remove(run) })
	}
	return dir
}

// Logger is a driver's logger in tests: debug lines on stderr under -v, else nothing.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// CloseLeavesNothing closes c when the test ends (a pool, say, that holds sandboxes of d),
// then fails the test for each sandbox d still lists, with what of it is on the host
// (leftovers), and destroys it.
func CloseLeavesNothing(t testing.TB, c io.Closer, d runtime.Driver, leftovers func(id string) []string) {
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		ctx := context.Background()
		left, err := d.List(ctx)
		if err != nil {
			t.Errorf("list: %v", err)
		}
		for _, id := range left {
			t.Errorf("sandbox %s left after Close: %v", id, leftovers(id))
			d.Destroy(ctx, id)
		}
	})
}

// Cold is what the steps of a cold start took.
type Cold struct {
	Create, Start time.Duration
	// FirstExec is connecting to the agent and running /bin/true.
	FirstExec time.Duration
}

// Total is create to the end of the first exec.
func (c Cold) Total() time.Duration { return c.Create + c.Start + c.FirstExec }

// BootCold creates sandbox spec on d, starts it and runs /bin/true in it, timing each step.
// The sandbox stays: the caller destroys it.
func BootCold(ctx context.Context, d runtime.Driver, spec runtime.Spec) (Cold, error) {
	var c Cold
	t0 := time.Now()
	if err := d.Create(ctx, spec); err != nil {
		return c, err
	}
	t1 := time.Now()
	sb, err := d.Start(ctx, spec.ID)
	if err != nil {
		return c, err
	}
	t2 := time.Now()
	cl, err := agent.NewClient(sb.Conn())
	if err != nil {
		return c, err
	}
	defer cl.Close()
	p, err := cl.Exec(ctx, agent.ExecRequest{ID: "true", Argv: []string{"/bin/true"}}, nil)
	if err != nil {
		return c, err
	}
	if ex, err := p.Wait(nil, nil); err != nil || ex.ExitCode != 0 {
		return c, fmt.Errorf("/bin/true: %+v %v", ex, err)
	}
	c.Create, c.Start, c.FirstExec = t1.Sub(t0), t2.Sub(t1), time.Since(t2)
	return c, nil
}

// RunSh creates and starts a sandbox of spec on d, runs sh -c cmd in it (failing t unless it
// exits 0), destroys it and answers cmd's stdout.
func RunSh(t *testing.T, d runtime.Driver, spec runtime.Spec, cmd string) string {
	t.Helper()
	id := spec.ID
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Destroy(context.Background(), id); err != nil {
			t.Error(err)
		}
	}()
	sb, err := d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.Exec(ctx, agent.ExecRequest{ID: "c", Argv: []string{"/bin/sh", "-c", cmd}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	ex, err := p.Wait(&out, &stderr)
	if err != nil || ex.ExitCode != 0 {
		t.Fatalf("%s: %+v %v: %s", cmd, ex, err, stderr.String())
	}
	return out.String()
}

type env struct {
	d         runtime.Driver
	opts      Options
	newDriver func(t *testing.T) runtime.Driver
	root      *testing.T // Run's: the shared sandbox lives as long as it

	shareMu sync.Mutex
	share   *box
}

// shared answers a started sandbox with the default limits for t: with Options.Share the one
// booted for every such case (booted by the first), else a fresh one. t must leave it running.
func (e *env) shared(t *testing.T) *box {
	t.Helper()
	if !e.opts.Share {
		return e.boot(t, runtime.Limits{})
	}
	e.shareMu.Lock()
	defer e.shareMu.Unlock()
	if e.share == nil || isDone(e.share.sb) {
		if e.share != nil {
			t.Log("the shared sandbox had ended; booting another")
		}
		// It lives as long as Run's test, which destroys it.
		e.share = e.startFor(t, e.root, e.createFor(t, e.root, runtime.Limits{}), timeout(e.root, time.Hour))
	}
	b := *e.share
	b.t = t
	return &b
}

func isDone(sb runtime.Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

var seq atomic.Int64

func newID(prefix string) string {
	return fmt.Sprintf("sbx_%s%d_%d", prefix, os.Getpid(), seq.Add(1))
}

// box is a started sandbox with a client, destroyed (and checked for leftovers) when the
// test ends.
type box struct {
	t   *testing.T
	e   *env
	id  string
	sb  runtime.Sandbox
	c   *agent.Client
	ctx context.Context
	pid int // the init's host pid, when the driver tells
}

// timeout is a context for the calls of a test, which ends after d or with the test.
func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) create(t *testing.T, lim runtime.Limits) string {
	t.Helper()
	return e.createFor(t, t, lim)
}

// createFor creates a sandbox, failing t, and destroys it when owner ends.
func (e *env) createFor(t, owner *testing.T, lim runtime.Limits) string {
	t.Helper()
	id := newID("")
	if err := e.d.Create(timeout(t, time.Minute), runtime.Spec{ID: id, Image: e.opts.Image, Limits: lim}); err != nil {
		t.Fatalf("create: %v", err)
	}
	owner.Cleanup(func() { e.destroyAndCheck(owner, id, 0) })
	return id
}

func (e *env) boot(t *testing.T, lim runtime.Limits) *box {
	t.Helper()
	id := e.create(t, lim)
	return e.start(t, id)
}

func (e *env) start(t *testing.T, id string) *box {
	t.Helper()
	return e.startFor(t, t, id, timeout(t, 5*time.Minute))
}

// startFor starts sandbox id, failing t, and destroys it when owner ends; ctx bounds its
// calls.
func (e *env) startFor(t, owner *testing.T, id string, ctx context.Context) *box {
	t.Helper()
	sb, err := e.d.Start(ctx, id)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	b := &box{t: t, e: e, id: id, sb: sb, c: c, ctx: ctx}
	if p, ok := sb.(runtime.InitPIDer); ok {
		b.pid = p.InitPID()
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := c.Ping(pctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	// Registered after create's: runs first, so the init's pid is checked at destroy.
	owner.Cleanup(func() {
		c.Close()
		e.destroyAndCheck(owner, id, b.pid)
	})
	return b
}

// destroyAndCheck destroys id and fails t if anything of it is left.
func (e *env) destroyAndCheck(t *testing.T, id string, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.d.Destroy(ctx, id); err != nil {
		t.Errorf("destroy %s: %v", id, err)
		return
	}
	for _, l := range e.leftovers(ctx, id, pid) {
		t.Errorf("after destroy of %s: %s", id, l)
	}
}

func (e *env) leftovers(ctx context.Context, id string, pid int) []string {
	var out []string
	ids, err := e.d.List(ctx)
	if err != nil {
		out = append(out, "list: "+err.Error())
	}
	for _, x := range ids {
		if x == id {
			out = append(out, "still listed")
		}
	}
	if pid > 0 && syscall.Kill(pid, 0) == nil {
		out = append(out, fmt.Sprintf("init process %d still exists", pid))
	}
	if e.opts.Leftovers != nil {
		out = append(out, e.opts.Leftovers(id)...)
	}
	return out
}

// result is what one process did.
type result struct {
	stdout, stderr string
	exit           agent.Exit
}

func (r result) String() string {
	return fmt.Sprintf("exit %+v\nstdout: %q\nstderr: %q", r.exit, trim(r.stdout), trim(r.stderr))
}

func trim(s string) string {
	if len(s) > 2000 {
		return s[:1000] + "…" + s[len(s)-1000:]
	}
	return s
}

var cmdSeq atomic.Int64

// exec runs req to its end; stdin nil means none.
func (b *box) exec(req agent.ExecRequest, stdin io.Reader) result {
	b.t.Helper()
	if req.ID == "" {
		req.ID = fmt.Sprintf("cmd_%d", cmdSeq.Add(1))
	}
	p, err := b.c.Exec(b.ctx, req, stdin)
	if err != nil {
		b.t.Fatalf("exec %q: %v", req.Argv, err)
	}
	var out, errb bytes.Buffer
	ex, err := p.Wait(&limitedBuffer{b: &out, n: 1 << 20}, &limitedBuffer{b: &errb, n: 1 << 20})
	if err != nil {
		b.t.Fatalf("wait %q: %v", req.Argv, err)
	}
	return result{out.String(), errb.String(), ex}
}

func (b *box) sh(script string) result {
	b.t.Helper()
	return b.exec(agent.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, nil)
}

func (b *box) py(code string) result {
	b.t.Helper()
	return b.exec(agent.ExecRequest{Argv: []string{"python3", "-c", code}}, nil)
}

// ok runs script and fails the test unless it exits 0; it answers stdout.
func (b *box) ok(script string) string {
	b.t.Helper()
	r := b.sh(script)
	if r.exit.ExitCode != 0 || r.exit.StartError != "" {
		b.t.Fatalf("%q failed: %v", script, r)
	}
	return r.stdout
}

func (b *box) ping() error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return b.c.Ping(ctx)
}

func (b *box) readFile(path string) (string, error) {
	r, err := b.c.ReadFile(b.ctx, path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return string(data), err
}

// limitedBuffer keeps the first n bytes and counts the rest away.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// countingWriter counts what it is given and keeps nothing.
type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

func isCode(err error, code string) bool { return err != nil && agent.IsCode(err, code) }
