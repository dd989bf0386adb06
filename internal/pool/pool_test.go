package pool

// Unit tests on the local driver: the real guest agent and harnesses as plain subprocesses,
// no isolation and no root. e2e_test.go runs the ns driver on the real image.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

var agentBin string

// TestMain builds the static agent (or takes $LBB_AGENT) and lets this binary be the ns
// sandbox init, as cmd/lbb is in production.
func TestMain(m *testing.M) {
	ns.MaybeInit()
	testkit.Main(m, &agentBin)
}

const testImage = "/image-of-the-local-driver" // the local driver runs the host's tree

var testLimits = runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func requirePython(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the local driver runs the host's python3, and there is none")
	}
}

type env struct {
	dir string // the local driver's state directory
	d   *local.Driver
	p   *Pool
	reg *prometheus.Registry
}

// newPool makes a pool of python slots on the local driver; edit changes the options.
func newPool(t *testing.T, edit func(*Options)) *env {
	t.Helper()
	dir := t.TempDir()
	d := local.New(local.Options{AgentPath: agentBin, StateDir: dir, Logger: testLogger(t)})
	reg := prometheus.NewRegistry()
	o := Options{
		Driver: d, Registerer: reg, Log: testLogger(t),
		Keys: []Key{{Name: "py", Image: testImage, Language: agent.LangPython, Imports: []string{}, Limits: testLimits}},
		Min:  2, Tick: time.Hour, // no adaptive changes unless a test ticks
	}
	p := newTestPool(t, o, edit, func() {
		if left, _ := d.List(context.Background()); len(left) > 0 {
			t.Errorf("sandboxes left after Close and Release: %v", left)
		}
	})
	return &env{dir: dir, d: d, p: p, reg: reg}
}

// newTestPool makes a pool of o as edit changes it, closed when the test ends; then left
// checks what the driver still holds.
func newTestPool(t testing.TB, o Options, edit func(*Options), left func()) *Pool {
	t.Helper()
	if edit != nil {
		edit(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		left()
	})
	return p
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) fill(t *testing.T) {
	t.Helper()
	e.p.Start()
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func spec() runtime.Spec {
	return runtime.Spec{ID: ids.New(ids.Sandbox), Image: testImage, Limits: testLimits}
}

const isWarmPy = "import sys\ndef run(input, config):\n    return {'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\\0'), 'sum': sum(input)}"

// runWarm runs isWarmPy in the lease and says whether it ran in a pre-started interpreter.
func runWarm(t *testing.T, l *Lease) bool {
	t.Helper()
	p, err := l.Agent.Run(ctxT(t), agent.RunRequest{Language: agent.LangPython, Code: isWarmPy, Input: json.RawMessage("[1,2,3]")})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	ex, err := p.Wait(nil, &stderr)
	var r struct {
		Warm bool `json:"warm"`
		Sum  int  `json:"sum"`
	}
	if err != nil || !ex.OK || json.Unmarshal(ex.Result, &r) != nil || r.Sum != 6 {
		t.Fatalf("run: %+v %v\n%s", ex, err, stderr.String())
	}
	return r.Warm
}

// counter reads a metric's value from the registry (labels as name=value pairs).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func TestClaimWarm(t *testing.T) {
	requirePython(t)
	e := newPool(t, nil)
	e.fill(t)
	sp := spec()
	l, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID()
	if id == sp.ID || !ids.Valid(ids.Sandbox, id) {
		t.Errorf("lease sandbox %q: want a slot id of its own (a valid sandbox id), not the record's %q", id, sp.ID)
	}
	if !runWarm(t, l) {
		t.Error("the claimed slot's run did not use its pre-started interpreter")
	}
	// The claim bound a fresh machine id where the agent can write it (the local driver's etc).
	if b, err := os.ReadFile(filepath.Join(e.dir, id, "etc", "machine-id")); err != nil || len(b) != 33 {
		t.Errorf("machine-id %q %v", b, err)
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "key", "py", "path", "warm"); got != 1 {
		t.Errorf("warm claims %v, want 1", got)
	}
	if got := counter(t, e.reg, "lbb_pool_claim_seconds", "path", "warm"); got != 1 {
		t.Errorf("warm claim latency samples %v, want 1", got)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	held, _ := e.d.List(ctxT(t))
	for _, h := range held {
		if h == id {
			t.Errorf("the released slot %s is still held", id)
		}
	}
	select {
	case <-l.Sandbox.Done():
	case <-time.After(5 * time.Second):
		t.Error("the released slot's agent still runs")
	}
}

// TestOwns: the pool owns its slots, parked or being built, and no longer a claimed one (a
// host's Reap spares what the pool owns).
func TestOwns(t *testing.T) {
	requirePython(t)
	e := newPool(t, nil)
	e.fill(t)
	held, err := e.d.List(ctxT(t))
	if err != nil || len(held) != 2 {
		t.Fatalf("slots %v %v, want 2", held, err)
	}
	for _, id := range held {
		if !e.p.Owns(id) {
			t.Errorf("the parked slot %s is not owned", id)
		}
	}
	if e.p.Owns(ids.New(ids.Sandbox)) {
		t.Error("owns a sandbox it never made")
	}
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctxT(t))
	if e.p.Owns(l.Sandbox.ID()) {
		t.Errorf("the claimed slot %s is still owned", l.Sandbox.ID())
	}
}

func TestEmptyPoolGoesCold(t *testing.T) {
	requirePython(t)
	e := newPool(t, nil) // never started: empty
	sp := spec()
	t0 := time.Now()
	l, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cold claim on an empty pool: %v", time.Since(t0))
	if l.Sandbox.ID() != sp.ID {
		t.Errorf("a cold lease names %q, want the spec's id %q", l.Sandbox.ID(), sp.ID)
	}
	if runWarm(t, l) {
		t.Error("a cold sandbox had a pre-started interpreter")
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "key", "py", "path", "cold"); got != 1 {
		t.Errorf("cold claims %v, want 1", got)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestOtherSpecsGoCold(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 1 })
	e.fill(t)
	ctx := ctxT(t)
	other := testLimits
	other.MemoryMiB = 1024
	cases := map[string]Request{
		"limits":   {Spec: runtime.Spec{ID: ids.New(ids.Sandbox), Image: testImage, Limits: other}, Language: agent.LangPython},
		"image":    {Spec: runtime.Spec{ID: ids.New(ids.Sandbox), Image: "/another", Limits: testLimits}, Language: agent.LangPython},
		"language": {Spec: spec(), Language: "node"},
		"hostname": {Spec: runtime.Spec{ID: ids.New(ids.Sandbox), Image: testImage, Limits: testLimits, Hostname: "other"}, Language: agent.LangPython},
	}
	for name, c := range cases {
		l, err := e.p.Acquire(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l.Sandbox.ID() != c.Spec.ID {
			t.Errorf("%s: served from the pool (%s), want cold", name, l.Sandbox.ID())
		}
		l.Release(ctx)
	}
	if st := e.p.Stats(); st[0].Ready != 1 || st[0].Warm != 0 {
		t.Errorf("the pool was touched: %+v", st)
	}
	// An alias of the default language is served warm.
	l, err := e.p.Acquire(ctx, Request{Spec: spec(), Language: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	if !runWarm(t, l) {
		t.Error("python3 was not served warm")
	}
	l.Release(ctx)
}

func TestNeverHandedOutTwice(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 4 })
	e.fill(t)
	const n = 12
	var mu sync.Mutex
	seen := map[string]int{}
	var leases []*Lease
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[l.Sandbox.ID()]++
			leases = append(leases, l)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for id, c := range seen {
		if c > 1 {
			t.Errorf("sandbox %s handed out %d times", id, c)
		}
	}
	warm := counter(t, e.reg, "lbb_pool_claims_total", "path", "warm")
	cold := counter(t, e.reg, "lbb_pool_claims_total", "path", "cold")
	if len(seen) != n || warm != 4 || warm+cold != n {
		t.Errorf("%d distinct sandboxes, %v warm, %v cold; want %d, 4 warm", len(seen), warm, cold, n)
	}
	for _, l := range leases {
		if err := l.Release(ctxT(t)); err != nil {
			t.Error(err)
		}
	}
}

func TestCloseDestroysParked(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 3 })
	e.fill(t)
	held, _ := e.d.List(ctxT(t))
	if len(held) != 3 {
		t.Fatalf("driver holds %v, want 3 slots", held)
	}
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	held, _ = e.d.List(ctxT(t))
	if len(held) != 1 || held[0] != l.Sandbox.ID() {
		t.Errorf("after Close the driver holds %v, want only the claimed %s", held, l.Sandbox.ID())
	}
	// A lease outlives Close; claims after it are cold.
	if !runWarm(t, l) {
		t.Error("the lease claimed before Close lost its interpreter")
	}
	l.Release(ctxT(t))
	sp := spec()
	l2, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Sandbox.ID() != sp.ID {
		t.Error("a claim after Close was not cold")
	}
	l2.Release(ctxT(t))
}

func TestRefillAfterClaims(t *testing.T) {
	requirePython(t)
	e := newPool(t, nil)
	e.fill(t)
	first := map[string]bool{}
	for range 2 {
		l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
		if err != nil {
			t.Fatal(err)
		}
		first[l.Sandbox.ID()] = true
		l.Release(ctxT(t))
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
		if err != nil {
			t.Fatal(err)
		}
		if first[l.Sandbox.ID()] {
			t.Errorf("slot %s served twice", l.Sandbox.ID())
		}
		if !runWarm(t, l) {
			t.Error("a refilled slot was not warm")
		}
		l.Release(ctxT(t))
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "path", "warm"); got != 4 {
		t.Errorf("warm claims %v, want 4", got)
	}
}

func TestBusyPausesRefill(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 1; o.BusyLeases = 1 })
	e.fill(t)
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if st := e.p.Stats()[0]; st.Ready+st.Building != 0 {
		t.Errorf("refill started while the pool was busy: %+v", st)
	}
	l.Release(ctxT(t))
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseDefersRefill: while a one-call lease is held, a key with at least half its target
// ready builds nothing (the run in flight has the CPU: at idle its refill slowed the run's
// commits 2-3×); a key below half its target is refilled meanwhile, below BusyLeases.
func TestLeaseDefersRefill(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 4; o.BusyLeases = 100 })
	e.fill(t)
	acquire := func() *Lease {
		l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l1, l2 := acquire(), acquire()
	time.Sleep(300 * time.Millisecond)
	if st := e.p.Stats()[0]; st.Ready != 2 || st.Building != 0 {
		t.Errorf("with half the target ready and leases held: %+v, want 2 ready and none building", st)
	}
	l3 := acquire() // one ready of four: below half
	deadline := time.Now().Add(10 * time.Second)
	for st := e.p.Stats()[0]; st.Building == 0 && st.Ready < 2; st = e.p.Stats()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("a key below half its target was not refilled while leases were held: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, l := range []*Lease{l1, l2, l3} {
		l.Release(ctxT(t))
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestQuietAfterHandover: for claimQuiet after a Handover no slot is built for a key that
// still has a ready one (the new sandbox's first command has the CPU); a key left with none
// is refilled without waiting.
func TestQuietAfterHandover(t *testing.T) {
	requirePython(t)
	e := newPool(t, nil)
	e.fill(t)
	claim := func() *Lease {
		l, err := e.p.Handover(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
		if err != nil || l == nil {
			t.Fatalf("handover: %v %v", l, err)
		}
		return l
	}
	l1 := claim()
	if st := e.p.Stats()[0]; st.Ready != 1 || st.Building != 0 {
		t.Fatalf("just after a claim that left a ready slot: %+v, want 1 ready and none building", st)
	}
	l1.Release(ctxT(t))
	l2 := claim()
	defer l2.Release(ctxT(t))
	deadline := time.Now().Add(10 * time.Second)
	for e.p.Stats()[0].Building == 0 && e.p.Stats()[0].Ready == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a key with no ready slot was not refilled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestEndedSlotIsReplaced(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Min = 1 })
	e.fill(t)
	e.p.mu.Lock()
	s := e.p.keys[0].ready[0]
	e.p.mu.Unlock()
	syscall.Kill(s.sb.(interface{ InitPID() int }).InitPID(), syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, e.reg, "lbb_pool_slots_discarded_total", "reason", "ended") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the ended slot was not discarded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	if l.Sandbox.ID() == s.id || !runWarm(t, l) {
		t.Errorf("claimed %s (the ended slot was %s), or it was not warm", l.Sandbox.ID(), s.id)
	}
	l.Release(ctxT(t))
}

func TestBareSlots(t *testing.T) {
	e := newPool(t, func(o *Options) {
		o.Min = 1
		o.Keys = []Key{{Image: testImage, Limits: testLimits}}
	})
	e.fill(t)
	if name := e.p.Stats()[0].Name; name != "bare/512m-1c" {
		t.Errorf("default key name %q", name)
	}
	// A claim of any language takes a bare slot of its image and limits.
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Agent.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"true"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := p.Wait(nil, nil); err != nil || ex.ExitCode != 0 {
		t.Fatal(ex, err)
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "path", "warm"); got != 1 {
		t.Errorf("warm claims %v, want 1", got)
	}
	l.Release(ctxT(t))
}

func TestBuildErrorsBackOff(t *testing.T) {
	d := local.New(local.Options{AgentPath: "/nonexistent/lbb-agent", StateDir: t.TempDir()})
	reg := prometheus.NewRegistry()
	p, err := New(Options{Driver: d, Registerer: reg, Keys: []Key{{Name: "k", Image: testImage, Language: "python", Limits: testLimits}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	time.Sleep(500 * time.Millisecond)
	p.Close()
	if got := counter(t, reg, "lbb_pool_refill_errors_total", "key", "k"); got < 1 || got > 2 {
		t.Errorf("refill errors %v in 0.5 s: want 1 or 2 (backing off)", got)
	}
	if left, _ := d.List(context.Background()); len(left) > 0 {
		t.Errorf("failed builds left %v", left)
	}
}

func TestAdaptiveTarget(t *testing.T) {
	e := newPool(t, func(o *Options) { o.Min = 2; o.Max = 8; o.HalfLife = 2 * time.Second })
	ks := e.p.keys[0]
	ks.buildTime = 500 * time.Millisecond
	now := time.Now()
	e.p.lastTick = now
	tickWith := func(claims int) {
		e.p.mu.Lock()
		ks.claims = claims
		e.p.mu.Unlock()
		now = now.Add(time.Second)
		e.p.tick(now)
	}
	if ks.target != 2 {
		t.Fatalf("initial target %d, want Min 2", ks.target)
	}
	// 3 claims a second, a slot built in 0.5 s: 3 are needed to cover two build times.
	for range 20 {
		tickWith(3)
	}
	if ks.target != 3 || ks.rate < 2.9 || ks.rate > 3.1 {
		t.Errorf("at 3 claims/s: target %d rate %.2f, want 3 and about 3", ks.target, ks.rate)
	}
	for range 20 {
		tickWith(50)
	}
	if ks.target != 8 {
		t.Errorf("at 50 claims/s: target %d, want Max 8", ks.target)
	}
	if got := counter(t, e.reg, "lbb_pool_target", "key", "py"); got != 8 {
		t.Errorf("target gauge %v", got)
	}
	// Demand gone: back to Min, and surplus slots are given back one per tick.
	e.p.mu.Lock()
	for i := range 5 {
		ks.ready = append(ks.ready, &slot{id: fmt.Sprintf("sbx_fake%d", i), ks: ks})
	}
	e.p.mu.Unlock()
	for range 20 {
		tickWith(0)
	}
	if ks.target != 2 || len(ks.ready) != 2 {
		t.Errorf("without demand: target %d, %d ready; want 2 and 2", ks.target, len(ks.ready))
	}
	if got := counter(t, e.reg, "lbb_pool_slots_discarded_total", "reason", "surplus"); got != 3 {
		t.Errorf("surplus discarded %v, want 3", got)
	}
}

// TestHandover: a slot handed over for good is the caller's, under the slot's id, to stop,
// start and destroy through the driver; the pool neither counts it as a lease nor destroys
// it at Close. With no slot ready Handover answers nil at once.
func TestHandover(t *testing.T) {
	e := newPool(t, func(o *Options) {
		o.Min = 1
		o.Keys = append(o.Keys, Key{Name: "bare", Image: testImage, Limits: testLimits})
	})
	ctx := ctxT(t)
	if l, err := e.p.Handover(ctx, Request{Spec: spec(), Language: ""}); l != nil || err != nil {
		t.Fatalf("handover from an empty pool: %v %v", l, err)
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "key", "bare", "path", "cold"); got != 1 {
		t.Errorf("cold claims of bare %v, want 1", got)
	}
	e.fill(t)
	ready, _ := e.d.List(ctx)
	sp := spec()
	l, err := e.p.Handover(ctx, Request{Spec: sp, Language: ""})
	if err != nil || l == nil {
		t.Fatalf("handover: %v %v", l, err)
	}
	id := l.Sandbox.ID()
	if id == sp.ID || !slices.Contains(ready, id) {
		t.Fatalf("handed over %s; the parked slots were %v", id, ready)
	}
	st := e.p.Stats()
	if st[1].Warm != 1 || st[0].Warm != 0 {
		t.Errorf("warm claims %+v", st)
	}
	e.p.mu.Lock()
	leases := e.p.leases
	e.p.mu.Unlock()
	if leases != 0 {
		t.Errorf("a handed-over sandbox counts as %d leases", leases)
	}
	exec := func(c *agent.Client, argv ...string) string {
		t.Helper()
		p, err := c.Exec(ctx, agent.ExecRequest{Argv: argv}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if ex, err := p.Wait(&out, nil); err != nil || ex.ExitCode != 0 {
			t.Fatalf("%q: %+v %v", argv, ex, err)
		}
		return out.String()
	}
	exec(l.Agent, "sh", "-c", "echo kept > f")
	// Stop and start through the driver, as a long-lived sandbox is.
	l.Agent.Close()
	if err := e.d.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	sb, err := e.d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if out := exec(c, "cat", "f"); out != "kept\n" {
		t.Errorf("after stop and start: %q", out)
	}
	c.Close()
	// Close destroys the parked slots, not the one handed over.
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := e.d.List(ctx); !slices.Equal(left, []string{id}) {
		t.Errorf("after Close the driver holds %v, want only %s", left, id)
	}
	if err := e.d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// weighing is the local driver with runtime.Prioritizer: it records each sandbox's weight.
type weighing struct {
	*local.Driver
	mu      sync.Mutex
	weights map[string]int
}

func (w *weighing) SetCPUWeight(_ context.Context, id string, weight int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.weights[id] = weight
	return nil
}

func (w *weighing) weight(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.weights[id]
}

// Slots are built at the background CPU weight and claimed at the default one.
func TestSlotsBuildInBackground(t *testing.T) {
	requirePython(t)
	var w *weighing
	e := newPool(t, func(o *Options) {
		w = &weighing{Driver: o.Driver.(*local.Driver), weights: map[string]int{}}
		o.Driver = w
	})
	e.fill(t)
	w.mu.Lock()
	var parked []string
	for id, wt := range w.weights {
		if wt != runtime.BackgroundCPUWeight {
			t.Errorf("slot %s parked at weight %d, want %d", id, wt, runtime.BackgroundCPUWeight)
		}
		parked = append(parked, id)
	}
	w.mu.Unlock()
	if len(parked) < 2 {
		t.Fatalf("weights set for %v, want both ready slots", parked)
	}
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctxT(t))
	if got := w.weight(l.Sandbox.ID()); got != runtime.DefaultCPUWeight {
		t.Fatalf("claimed slot at weight %d, want %d", got, runtime.DefaultCPUWeight)
	}
}

// TestEnsureOnDemand: a key Ensure adds (a template layer's) keeps no slot until claims
// come; its first claim is cold, and once a tick has seen the demand a slot is built and the
// next claim of the same layer is warm. Claims of another layer or of none never take it; an
// idle key asks for no slot; Drop destroys what it parked.
func TestEnsureOnDemand(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) { o.Max = 3 })
	k := Key{Name: "layer-x", Image: testImage, Layer: "/layers/x/layer", Language: agent.LangPython, Flavour: FlavourLean,
		Imports: []string{}, Limits: testLimits, Max: 5}
	if added, err := e.p.Ensure(k); !added || err != nil {
		t.Fatalf("Ensure: %v %v", added, err)
	}
	if added, err := e.p.Ensure(k); added || err != nil {
		t.Fatalf("Ensure again: %v %v", added, err)
	}
	e.fill(t) // the default key's slots; none of the layer's
	ks := e.p.keys[len(e.p.keys)-1]
	if ks.target != 0 || len(ks.ready) != 0 || ks.key.Max != 3 {
		t.Fatalf("an on-demand key without demand: target %d, %d ready, max %d", ks.target, len(ks.ready), ks.key.Max)
	}
	layered := func() Request {
		s := spec()
		s.Layer = k.Layer
		return Request{Spec: s, Language: agent.LangPython, Flavour: FlavourLean}
	}
	claim := func(r Request) bool {
		l, err := e.p.Acquire(ctxT(t), r)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		return runWarm(t, l)
	}
	if claim(layered()) {
		t.Fatal("the first claim of a layer was warm")
	}
	e.p.tick(time.Now().Add(time.Second))
	if ks.target < 1 {
		t.Fatalf("after a claim: target %d", ks.target)
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	other := layered()
	other.Spec.Layer = "/layers/y/layer"
	if claim(other) {
		t.Error("a claim of another layer took a slot")
	}
	if !claim(layered()) {
		t.Error("a claim of the layer after demand was cold")
	}
	if got := counter(t, e.reg, "lbb_pool_claims_total", "key", "layer-x", "path", "warm"); got != 1 {
		t.Errorf("warm claims of the layer's key: %v", got)
	}
	if err := e.p.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.p.mu.Lock()
	ks.rate, ks.claims = idleRate/2, 0 // demand long gone
	e.p.mu.Unlock()
	e.p.tick(time.Now().Add(2 * time.Second))
	if ks.target != 0 {
		t.Errorf("an idle layer's target %d", ks.target)
	}
	// At the bound, a new key takes the place of the least demanded one holding no slot.
	for i := range maxOnDemand {
		if added, err := e.p.Ensure(Key{Name: fmt.Sprintf("layer-%d", i), Image: testImage, Layer: fmt.Sprintf("/layers/%d/layer", i), Limits: testLimits}); !added || err != nil {
			t.Fatalf("Ensure %d: %v %v", i, added, err)
		}
	}
	e.p.mu.Lock()
	n := len(e.p.keys)
	e.p.mu.Unlock()
	if n != 1+maxOnDemand {
		t.Errorf("%d keys, want the default one and %d", n, maxOnDemand)
	}
	if err := e.p.Drop(ctxT(t), func(k Key) bool { return k.Layer != "" }); err != nil {
		t.Fatal(err)
	}
	e.p.mu.Lock()
	n = len(e.p.keys)
	e.p.mu.Unlock()
	if n != 1 {
		t.Errorf("%d keys after Drop, want the default one", n)
	}
}

// forking is the local driver with a runtime.InterpreterForker that fails with err.
type forking struct {
	*local.Driver
	err   error
	calls atomic.Int32
}

func (f *forking) ForkInterpreter(context.Context, string, runtime.ForkRequest) error {
	f.calls.Add(1)
	return f.err
}

// A zygote that fails leaves the slot's interpreter to the agent (counted as a fallback); one
// that cannot serve the key's sandboxes is asked once, then no more.
func TestZygoteFallback(t *testing.T) {
	requirePython(t)
	for _, tc := range []struct {
		name, outcome string
		err           error
		maxCalls      int32
	}{
		{"fails", "fallback", errors.New("boom"), 100},
		{"unsupported", "unsupported", errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, "no zygote"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *forking
			e := newPool(t, func(o *Options) {
				f = &forking{Driver: o.Driver.(*local.Driver), err: tc.err}
				o.Driver, o.Zygote = f, true
				o.Keys[0].Imports = nil // python's default imports: the zygote's
			})
			e.fill(t)
			l, err := e.p.Acquire(ctxT(t), Request{Spec: runtime.Spec{ID: "sbx_zygote_fallback", Image: testImage, Limits: testLimits}, Language: agent.LangPython})
			if err != nil {
				t.Fatal(err)
			}
			if !runWarm(t, l) {
				t.Error("the run did not go to a pre-started interpreter")
			}
			l.Release(ctxT(t))
			if n := f.calls.Load(); n < 1 || n > tc.maxCalls {
				t.Errorf("%d forks asked, want 1..%d", n, tc.maxCalls)
			}
			if n := zygoteCount(e.p, "warm", tc.outcome); n < 1 {
				t.Errorf("lbb_pool_zygote_total{outcome=%q} = %v", tc.outcome, n)
			}
		})
	}
}

// zygoteCounts reads lbb_pool_zygote_total, both paths.
func zygoteCounts(p *Pool) (forked, fallback float64) {
	return zygoteCount(p, "", "forked"), zygoteCount(p, "", "fallback")
}

// zygoteCount reads lbb_pool_zygote_total{path, outcome}; path "" sums both.
func zygoteCount(p *Pool, path, outcome string) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.m.zygote)
	mfs, _ := reg.Gather()
	n := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == outcome && (path == "" || labels["path"] == path) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// freezeCounter is the local driver with a Freezer that counts its calls (and parks nothing).
type freezeCounter struct {
	*local.Driver
	freezes, thaws atomic.Int32
}

func (f *freezeCounter) Freeze(ctx context.Context, id string) error { f.freezes.Add(1); return nil }
func (f *freezeCounter) Thaw(ctx context.Context, id string) error   { f.thaws.Add(1); return nil }

// TestNoFreezeOn: the slots of a runtime in NoFreezeOn park running, so that their claim pays
// no thaw (gvisor's is a runsc process); the others are frozen and thawed as before.
func TestNoFreezeOn(t *testing.T) {
	requirePython(t)
	for _, running := range []bool{true, false} {
		t.Run(fmt.Sprintf("running=%v", running), func(t *testing.T) {
			var f *freezeCounter
			e := newPool(t, func(o *Options) {
				f = &freezeCounter{Driver: o.Driver.(*local.Driver)}
				o.Driver, o.Min = f, 1
				o.Keys[0].Runtime = "gv"
				if running {
					o.NoFreezeOn = []string{"gv"}
				}
			})
			e.fill(t)
			sp := spec()
			sp.Runtime = "gv"
			l, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython})
			if err != nil {
				t.Fatal(err)
			}
			if !runWarm(t, l) {
				t.Error("the claimed slot's run did not use its pre-started interpreter")
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			want := int32(1)
			if running {
				want = 0
			}
			// A frozen slot is thawed at its claim; refill may have parked another since.
			if fr, th := f.freezes.Load(), f.thaws.Load(); th != want || (running && fr != 0) || (!running && fr < 1) {
				t.Errorf("freezes %d, thaws %d; want thaws %d and freezes only where slots are frozen", fr, th, want)
			}
		})
	}
}
