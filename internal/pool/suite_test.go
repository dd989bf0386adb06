//go:build linux

package pool

// The runtime suites (conformance and hostile) against pooled slots: an adapter driver
// whose Create records the suite's spec and whose Start takes a slot from a real, started
// pool on the ns driver (built, identity bound, frozen, thawed, handed over), so that every
// program of the suites runs in a sandbox the pool made. The suite's ids map to slot ids;
// Stop, Start, Destroy and List go to the slot, as a long-lived sandbox's do.
//
// A slot's channel already carries the pool's agent client, and a channel serves one
// HTTP/2 session; the suite brings its own client. So the ns driver is wrapped once more:
// its channel ends in a bridge that speaks HTTP/2 to the agent and serves each client that
// asks (the pool's, then the suite's) on a socketpair of its own, forwarding every stream.
// The agent sees one session for the sandbox's life; a client that closes its session no
// longer ends the agent's processes (the driver's Stop and Destroy still do).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// suiteLimits are the limits classes the suites create sandboxes with: the pool keeps a key
// for each.
var suiteLimits = []runtime.Limits{
	{},                        // most tests
	{Pids: 64},                // fork bomb
	{MemoryMiB: 128},          // memory bomb
	{DiskMiB: 64, TmpMiB: 16}, // disk fill
	{CPUs: 0.5},               // cpu quota
}

// TestSuiteBare runs the suites on bare slots, the ones long-lived sandboxes take: nothing
// is declared a known failure.
func TestSuiteBare(t *testing.T) {
	runSuites(t, "", nil)
}

// TestSuitePrestarted runs the suites on slots with a python interpreter pre-started (the
// slots one-call python runs take): the suites' python runs go to it. Three hostile tests
// count the processes of a sandbox, which a waiting interpreter adds to by design; they pass
// on bare slots (TestSuiteBare).
func TestSuitePrestarted(t *testing.T) {
	const why = "a pre-started interpreter is a process of the sandbox by design; TestSuiteBare runs this test on bare slots"
	runSuites(t, agent.LangPython, map[string]string{
		"host invisible": why, "timeout kills the group": why, "timeout kills what left the group": why,
		"terminal jobs end with it": why, "terminal timeout held": why,
	})
}

// TestSuiteZygote runs the suites on slots whose python interpreter (numpy and pandas
// imported) was forked from the ns driver's zygote: the hostile suite's python programs run
// in interpreters forked into their sandboxes. The known failures are TestSuitePrestarted's.
func TestSuiteZygote(t *testing.T) {
	const why = "a pre-started interpreter is a process of the sandbox by design; TestSuiteBare runs this test on bare slots"
	runSuitesWith(t, suiteOptions{lang: agent.LangPython, zygote: true, known: map[string]string{
		"host invisible": why, "timeout kills the group": why, "timeout kills what left the group": why,
		"terminal jobs end with it": why, "terminal timeout held": why,
	}})
}

// TestSuiteZygoteLean is TestSuiteZygote on lean slots (the harness alone): their
// interpreters are forked from the image's lean zygote.
func TestSuiteZygoteLean(t *testing.T) {
	const why = "a pre-started interpreter is a process of the sandbox by design; TestSuiteBare runs this test on bare slots"
	runSuitesWith(t, suiteOptions{lang: agent.LangPython, zygote: true, lean: true, known: map[string]string{
		"host invisible": why, "timeout kills the group": why, "timeout kills what left the group": why,
		"terminal jobs end with it": why, "terminal timeout held": why,
	}})
}

type suiteOptions struct {
	lang string
	// zygote: the first key's slots take python with the default imports (lean: the
	// harness alone) from the zygote.
	zygote, lean bool
	known        map[string]string
}

func runSuites(t *testing.T, lang string, known map[string]string) {
	runSuitesWith(t, suiteOptions{lang: lang, known: known})
}

func runSuitesWith(t *testing.T, o suiteOptions) {
	lang, known := o.lang, o.known
	rootfs, state := nsState(t)
	cfg := ns.Config{StateDir: state, AgentPath: agentBin, CgroupParent: "lbb-pool-suite", Logger: testLogger(t)}
	var keys []Key
	for i, l := range suiteLimits {
		k := Key{Name: fmt.Sprintf("suite-%d", i), Image: rootfs, Limits: l, Min: 1, Max: 4}
		if i == 0 {
			k.Language, k.Imports, k.Min, k.Max = lang, []string{}, 3, 8
			if o.zygote && !o.lean {
				k.Imports = nil
			}
		}
		keys = append(keys, k)
	}
	// The pool's driver is the suites' first (a server's host and pool share one); a
	// driver made later stands for a restarted server's.
	d0 := &bridgedDriver{ns.New(cfg)}
	p, err := New(Options{Driver: d0, Keys: keys, BusyLeases: 1000, Log: testLogger(t), Zygote: o.zygote})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	st := &suiteState{p: p, lang: lang, specs: map[string]runtime.Spec{}, slots: map[string]string{}}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		destroyLeftovers(t, ns.New(cfg))
		d0.Close()
		if o.zygote {
			forked, fallback := zygoteCounts(p)
			t.Logf("zygote: %v interpreters forked, %v fallbacks", forked, fallback)
			if forked == 0 || fallback != 0 {
				t.Errorf("zygote: %v interpreters forked, %v fallbacks; want every slot's from the zygote", forked, fallback)
			}
		}
		if st.warm == 0 {
			t.Error("no sandbox came from the pool")
		}
		t.Logf("%d sandboxes handed over by the pool", st.warm)
	})
	first := true
	runtimetest.Run(t, func(t *testing.T) runtime.Driver {
		if first {
			first = false
			return &suiteDriver{st: st, d: d0}
		}
		return &suiteDriver{st: st, d: &bridgedDriver{ns.New(cfg)}}
	}, runtimetest.Options{
		Image:     rootfs,
		Leftovers: func(id string) []string { return ns.New(cfg).Leftovers(st.slotOf(id)) },
		HostFiles: []string{agentBin, filepath.Join(state, ".agent", "*")},
		StateDirsOf: func(id string) []string {
			return []string{filepath.Join(state, st.slotOf(id)), ns.New(cfg).RunDirOf(st.slotOf(id))}
		},
		HostIDs:   func(id string) (driverkit.HostIDs, error) { return ns.New(cfg).HostIDs(st.slotOf(id)) },
		SharedIDs: idmap.CheckOverlay(rootfs) != nil,
		Known:     known,
	})
	if lang != "" {
		t.Run("run goes to the pre-started interpreter", func(t *testing.T) {
			d := &suiteDriver{st: st, d: d0}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			id := fmt.Sprintf("sbx_suite_warm_%d", os.Getpid())
			if err := d.Create(ctx, runtime.Spec{ID: id, Image: rootfs}); err != nil {
				t.Fatal(err)
			}
			defer d.Destroy(ctx, id)
			sb, err := d.Start(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			c, err := agent.NewClient(sb.Conn())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			code := isWarmPy
			if o.zygote {
				code = isForkedPy
			}
			pr, err := c.Run(ctx, agent.RunRequest{Language: agent.LangPython, Code: code, Input: []byte("[1,2,3]")})
			if err != nil {
				t.Fatal(err)
			}
			ex, err := pr.Wait(nil, nil)
			var res struct {
				Warm bool `json:"warm"`
				Sum  int  `json:"sum"`
			}
			if err != nil || !ex.OK || json.Unmarshal(ex.Result, &res) != nil || !res.Warm || res.Sum != 6 {
				t.Errorf("run: %+v %v (want it in the pre-started interpreter)", ex, err)
			}
		})
	}
}

// isForkedPy is isWarmPy for an interpreter forked from the zygote: its command line is the
// zygote's.
const isForkedPy = "import sys\ndef run(input, config):\n    return {'warm': b'# lbb zygote' in open('/proc/self/cmdline', 'rb').read(), 'sum': sum(input)}"

// suiteState is what the adapters of one suite run share, as a server's records would:
// the specs created, and the slot each started sandbox is.
type suiteState struct {
	p    *Pool
	lang string

	mu    sync.Mutex
	specs map[string]runtime.Spec // created and not destroyed
	slots map[string]string       // suite id → slot id, once started (kept after destroy)
	warm  int
}

func (s *suiteState) slotOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot, ok := s.slots[id]; ok {
		return slot
	}
	return id
}

// suiteDriver is the adapter the suites drive: the pool's ns driver, or another over the
// same state directory (a restarted server's), and the same pool.
type suiteDriver struct {
	st *suiteState
	d  *bridgedDriver
}

func (s *suiteDriver) Name() string                        { return "pool(ns)" }
func (s *suiteDriver) Requirements() []runtime.Requirement { return s.d.Requirements() }

func (s *suiteDriver) Create(ctx context.Context, spec runtime.Spec) error {
	if err := driverkit.CheckID(spec.ID); err != nil {
		return err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if _, ok := s.st.specs[spec.ID]; ok {
		return errdefs.Conflict("sandbox %s already exists", spec.ID)
	}
	if _, ok := s.st.slots[spec.ID]; ok {
		return errdefs.Conflict("sandbox %s already existed", spec.ID)
	}
	s.st.specs[spec.ID] = spec
	return nil
}

// Start hands over a slot for a sandbox never started (waiting for one to be ready: a
// sandbox the pool did not make would test nothing), and starts the slot of one stopped.
func (s *suiteDriver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	s.st.mu.Lock()
	spec, created := s.st.specs[id]
	slot, started := s.st.slots[id]
	s.st.mu.Unlock()
	if !created {
		return nil, driverkit.NotFound(id)
	}
	if started {
		sb, err := s.d.Start(ctx, slot)
		if err != nil {
			return nil, err
		}
		return s.session(id, sb)
	}
	// A key the pool keeps builds a slot in seconds; a claim no key serves would wait forever
	// (a hang until the package's timeout, not a failure that says why).
	giveUp := time.After(2 * time.Minute)
	for {
		l, err := s.st.p.Handover(ctx, Request{Spec: spec, Language: s.st.lang})
		if err != nil {
			return nil, err
		}
		if l != nil {
			l.Agent.Close() // the pool's session; the suite opens its own
			s.st.mu.Lock()
			s.st.slots[id] = l.Sandbox.ID()
			s.st.warm++
			s.st.mu.Unlock()
			return s.session(id, l.Sandbox)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no slot became ready for %+v: %w", spec.Limits, ctx.Err())
		case <-giveUp:
			return nil, fmt.Errorf("no slot became ready for %+v (language %q) within 2 minutes: does a key serve it?", spec.Limits, s.st.lang)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// session answers sb as the suite's sandbox id, on a session of its own.
func (s *suiteDriver) session(id string, sb runtime.Sandbox) (runtime.Sandbox, error) {
	var b *bridgedSandbox
	switch x := sb.(type) {
	case *claimedSandbox:
		b = x.Sandbox.(*bridgedSandbox)
	case *bridgedSandbox:
		b = x
	}
	conn, err := b.br.session()
	if err != nil {
		return nil, err
	}
	return &suiteSandbox{Sandbox: sb, id: id, conn: conn}, nil
}

func (s *suiteDriver) Stop(ctx context.Context, id string) error {
	s.st.mu.Lock()
	_, created := s.st.specs[id]
	slot, started := s.st.slots[id]
	s.st.mu.Unlock()
	switch {
	case !created:
		return driverkit.NotFound(id)
	case !started:
		return nil
	}
	return s.d.Stop(ctx, slot)
}

func (s *suiteDriver) Destroy(ctx context.Context, id string) error {
	s.st.mu.Lock()
	slot, started := s.st.slots[id]
	s.st.mu.Unlock()
	if started {
		if err := s.d.Destroy(ctx, slot); err != nil {
			return err
		}
	}
	s.st.mu.Lock()
	delete(s.st.specs, id)
	s.st.mu.Unlock()
	return nil
}

// List names the suite's sandboxes the driver holds (a slot's state), and those created
// and not started; parked slots are the pool's.
func (s *suiteDriver) List(ctx context.Context) ([]string, error) {
	held, err := s.d.List(ctx)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, id := range held {
		have[id] = true
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	var out []string
	for id := range s.st.specs {
		if slot, ok := s.st.slots[id]; !ok || have[slot] {
			out = append(out, id)
		}
	}
	for id, slot := range s.st.slots {
		if _, ok := s.st.specs[id]; !ok && have[slot] {
			out = append(out, id) // destroyed, yet the driver holds it: a leftover
		}
	}
	return out, nil
}

func (s *suiteDriver) Freeze(ctx context.Context, id string) error {
	return s.d.Freeze(ctx, s.st.slotOf(id))
}

func (s *suiteDriver) Thaw(ctx context.Context, id string) error {
	return s.d.Thaw(ctx, s.st.slotOf(id))
}

// suiteSandbox is a slot as the suite sees it: its id, its own session.
type suiteSandbox struct {
	runtime.Sandbox
	id   string
	conn net.Conn
}

func (s *suiteSandbox) ID() string     { return s.id }
func (s *suiteSandbox) Conn() net.Conn { return s.conn }
func (s *suiteSandbox) InitPID() int {
	if p, ok := s.Sandbox.(initPIDer); ok {
		return p.InitPID()
	}
	return 0
}

// bridgedDriver is the ns driver with every channel ending in a bridge.
type bridgedDriver struct{ *ns.Driver }

func (d *bridgedDriver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	sb, err := d.Driver.Start(ctx, id)
	if err != nil {
		return nil, err
	}
	br, err := newBridge(sb.Conn())
	if err != nil {
		return nil, errors.Join(err, d.Driver.Stop(ctx, id))
	}
	go func() {
		<-sb.Done()
		br.close()
	}()
	first, err := br.session()
	if err != nil {
		return nil, errors.Join(err, d.Driver.Stop(ctx, id))
	}
	return &bridgedSandbox{Sandbox: sb, br: br, first: first}, nil
}

// bridgedSandbox's Conn is the first session on its bridge (the pool's client takes it).
type bridgedSandbox struct {
	runtime.Sandbox
	br    *bridge
	first net.Conn
}

func (s *bridgedSandbox) Conn() net.Conn { return s.first }
func (s *bridgedSandbox) InitPID() int   { return s.Sandbox.(initPIDer).InitPID() }

// bridge holds the one HTTP/2 session with an agent and serves any number of clients, each
// on a socketpair, forwarding their streams to it.
type bridge struct {
	cc *http.ClientConn

	mu       sync.Mutex
	sessions []net.Conn
	closed   bool
}

// bridgeWindow is each stream's flow-control window on both sides of a bridge, as the
// agent's client and server have theirs (agent.MaxStreams).
const bridgeWindow = 128 << 10

func newBridge(conn net.Conn) (*bridge, error) {
	hello := make([]byte, len(agent.Hello))
	if _, err := io.ReadFull(conn, hello); err != nil || string(hello) != agent.Hello {
		return nil, fmt.Errorf("bridge: the agent's hello: %q %v", hello, err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	var once sync.Once
	tr := &http.Transport{Protocols: &protos, DisableCompression: true,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: bridgeWindow, MaxReceiveBufferPerConnection: agent.MaxStreams * bridgeWindow},
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			var c net.Conn
			once.Do(func() { c = conn })
			if c == nil {
				return nil, errors.New("bridge: the channel is in use")
			}
			return c, nil
		}}
	cc, err := tr.NewClientConn(context.Background(), "http", "agent:80")
	if err != nil {
		return nil, err
	}
	return &bridge{cc: cc}, nil
}

func (b *bridge) close() {
	b.mu.Lock()
	b.closed = true
	ss := b.sessions
	b.sessions = nil
	b.mu.Unlock()
	for _, c := range ss {
		c.Close()
	}
	b.cc.Close()
}

// session answers a new client's end of a channel that behaves like the agent's.
func (b *bridge) session() (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mk := func(fd int) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), "session")
		defer f.Close()
		return net.FileConn(f)
	}
	client, err := mk(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	server, err := mk(fds[1])
	if err != nil {
		client.Close()
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		client.Close()
		server.Close()
		return nil, errors.New("bridge: the sandbox has ended")
	}
	b.sessions = append(b.sessions, server)
	b.mu.Unlock()
	go func() {
		if _, err := io.WriteString(server, agent.Hello); err != nil {
			server.Close()
			return
		}
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		srv := &http.Server{Handler: b, Protocols: &protos,
			// The agent's own server's streams and windows (guest.Server): as many streams
			// (not HTTP/2's default 250: "port streams many" opens more), and a connection
			// window of every stream's, so that unread streams stall no other.
			HTTP2: &http.HTTP2Config{MaxConcurrentStreams: agent.MaxStreams, MaxReadFrameSize: bridgeWindow,
				MaxReceiveBufferPerStream: bridgeWindow, MaxReceiveBufferPerConnection: agent.MaxStreams * bridgeWindow}}
		srv.Serve(&oneConn{c: server, done: make(chan struct{})})
	}()
	return client, nil
}

// ServeHTTP forwards one stream to the agent: the request body as it comes, the answer as
// it comes.
func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = "http", "agent", "agent", ""
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := b.cc.RoundTrip(out)
	if err != nil {
		http.Error(w, `{"code":"internal","message":"bridge: `+err.Error()+`"}`, http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	rc.Flush()
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// oneConn is a listener that hands out one connection, then waits until it closes.
type oneConn struct {
	c    net.Conn
	used bool
	done chan struct{}
	once sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.used {
		l.used = true
		return &notifyConn{Conn: l.c, l: l}, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

type notifyConn struct {
	net.Conn
	l *oneConn
}

func (c *notifyConn) Close() error {
	c.l.once.Do(func() { close(c.l.done) })
	return c.Conn.Close()
}
