// Package pool is lbb's warm pool: a Provider that hands out sandboxes it made before
// anyone asked. For each Key (an image, a run language and a limits class) it keeps a target
// number of ready slots: created and started through the runtime driver, the guest agent
// connected and answering, for python and node an interpreter pre-started with the harness
// and the common imports loaded (agent.PrestartRequest), then parked with the driver's
// runtime.Freezer when it has one (or left running, on a runtime in Options.NoFreezeOn).
//
// Each slot gets fresh entropy and a machine id of its own when it is built (bindIdentity). A
// claim pops a ready slot, thaws it, binds the spec's hostname when it asks for another one,
// and returns it as a Lease whose Release destroys it: a slot serves exactly one sandbox and
// is never reused, so no state crosses between claims. A spec the
// pool has no ready slot for (another image, language or limits, or an empty pool) goes to
// the cold provider at once, without waiting for a refill.
//
// Slots are driver sandboxes with ids of their own (ids.New(ids.Sandbox)), not the record id
// the caller passed in Request.Spec.ID: Lease.Sandbox.ID() names the driver's sandbox. Crash
// reaping stays correct without a mapping for one-call sandboxes, since the host reaps every
// driver sandbox that no stopped record claims: parked slots and claimed ones alike.
//
// Handover serves long-lived sandboxes: it hands a slot over for good, and the caller then
// addresses it by its slot id through the driver (stop, start, destroy), as any sandbox it
// created itself. The control plane claims first and names the sandbox's record after the
// slot (slot ids are sandbox ids), so that stop, resume and crash reaping find it by its
// record's id.
//
// Refill runs in the background, one or two slots at a time, and starts no new slot while a
// claim is in flight or while BusyLeases leases are held, nor, for a key that still has a
// ready slot, for claimQuiet after a Handover, nor, for a key with at least half its target
// ready, while any lease is held, so that it never competes with running work for CPU. Each
// key's target follows demand: an exponentially weighted average of its claims per second
// (warm and missed) times the time a slot takes to build, bounded by the key's Min and Max.
//
// Start the pool after the service has reaped what a crash left behind (control.Recover):
// reaping destroys every driver sandbox no record claims, parked slots included.
package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// Key is one kind of slot the pool keeps ready.
type Key struct {
	// Name labels the key in metrics and logs; default "<language>/<memory>m-<cpus>c".
	Name string
	// Image is the root filesystem directory (runtime.Spec.Image).
	Image string
	// Layer is the template layer slots stack over Image (runtime.Spec.Layer); a spec must
	// name the same to be served from this key.
	Layer string
	// Language is agent.LangPython or agent.LangNode for slots with a pre-started
	// interpreter; "" for a bare sandbox (agent up, nothing else started).
	Language string
	// Imports are what the interpreter loads before it waits; nil means the agent's default
	// (numpy and pandas for python, nothing for node).
	Imports []string
	// Flavour tells apart keys of one language that import different modules: a claim
	// takes a slot of its own flavour first (Request.Flavour), then one of another.
	Flavour string
	// Limits is the class a spec must have exactly to be served from this key.
	Limits runtime.Limits
	// Runtime is the driver slots are made on (runtime.Spec.Runtime); a spec must name the
	// same to be served from this key. "" is the driver's default.
	Runtime string
	// Min is the depth kept without demand, Max the most demand can ask for; zero takes
	// Options.Min and Options.Max.
	Min, Max int
	// Kernel, when set, is started in each slot of the key (with Language ""), for claims
	// that name it (Request.Kernel).
	Kernel *Kernel
}

// Options configure a Pool.
type Options struct {
	Driver runtime.Driver
	// Cold serves what the pool cannot; nil means a Cold on Driver.
	Cold Provider
	// Keys are the kinds of slots to keep ready. Without keys every claim is cold.
	Keys []Key
	// Min and Max are the default depth bounds of a key (default 2 and 8).
	Min, Max int
	// Refill is how many slots are built at once (default 1).
	Refill int
	// BusyLeases: no new slot is started while this many leases are held (default the
	// number of CPUs). Claims in flight always pause refill starts.
	BusyLeases int
	// Hostname is what slots are created with (runtime.Spec.Hostname; "" is the driver's
	// default). A claim whose spec asks for another is renamed on the host, when the driver
	// allows it, else served cold.
	Hostname string
	// NoFreeze keeps slots running instead of parking them with the driver's Freezer.
	NoFreeze bool
	// NoFreezeOn lists runtimes (Key.Runtime) whose slots are parked running rather than
	// frozen: where a thaw costs the claim more than an idle slot costs the host (gvisor: a
	// runsc process, 15–100 ms of the claim, against no measurable CPU for an idle Sentry
	// with its agent and a waiting interpreter). A Kernel's slots are frozen all the same: a
	// kernel polls while it waits (Jupyter's, ~7 ms of CPU a second on gvisor).
	NoFreezeOn []string
	// Tick is how often demand is measured and targets set (default 1 s); HalfLife is the
	// half-life of the demand average (default 30 s).
	Tick, HalfLife time.Duration
	// ClaimTimeout bounds thawing and renaming a claimed slot (default 5 s).
	ClaimTimeout time.Duration
	// BuildTimeout bounds building one slot (default 2 min).
	BuildTimeout time.Duration
	// Registerer, if set, registers the pool's metrics (see Collectors).
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// NewID names slots; default ids.New(ids.Sandbox).
	NewID func() string
	// Zygote forks the python interpreter of a slot (or of a cold claim) from the driver's
	// fork server of the slot's imports (numpy and pandas for a full slot, the harness alone
	// for a lean one) when the driver has one (runtime.InterpreterForker), instead of the
	// sandbox's agent starting and importing one; a failure falls back to the agent's start
	// (lbb_pool_zygote_total counts both).
	Zygote bool
}

// Pool is a warm pool. It is safe for concurrent use.
type Pool struct {
	o       Options
	log     *slog.Logger
	freezer runtime.Freezer
	// weigher builds slots at a low CPU weight when the driver can (runtime.Prioritizer)
	weigher runtime.Prioritizer
	m       *metrics
	// coldNoZygote: the runtimes (Spec.Runtime) whose cold sandboxes cannot have a forked
	// interpreter
	coldNoZygote sync.Map

	ctx    context.Context // cancelled by Close: ends builds
	cancel context.CancelFunc

	mu   sync.Mutex
	keys []*keyState
	// owned are the ids of the slots the pool holds, from their build's first step until a
	// claim takes them or they are destroyed: sandboxes no record names, which a host's Reap
	// must spare (Owns).
	owned    map[string]bool
	started  bool
	closed   bool
	building int
	claiming int // Acquire calls in flight
	// quietUntil: refill of a key that has a ready slot waits until then (claimQuiet after
	// the last Handover), so that the first command of a sandbox just created has the CPU.
	quietUntil time.Time
	leases     int // leases handed out and not released
	lastTick   time.Time

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup // the loop, builds and destroys
}

type keyState struct {
	key Key
	// dropped: removed by Drop; a build of it in flight destroys what it made
	dropped bool
	// onDemand: added by Ensure; demand fallen below idleRate asks for no slot
	onDemand bool
	ready    []*slot // oldest first
	building int
	target   int
	// demand: claims (warm or missed) since the last tick, and their average per second
	claims    int
	rate      float64
	buildTime time.Duration // average time to build a slot
	// noZygote: the driver said this key's sandboxes cannot have a forked interpreter
	noZygote atomic.Bool
	failures int
	retryAt  time.Time
	warm     uint64
	cold     uint64
}

type slotState int

const (
	parked slotState = iota
	claimed
	discarded
)

type slot struct {
	id     string
	ks     *keyState
	sb     runtime.Sandbox
	client *agent.Client
	frozen bool
	// background: built at runtime.BackgroundCPUWeight, restored at the claim
	background bool
	base       runtime.Stats // its accounting when parked
	builtAt    time.Time
	kernel     *Running  // the key's Kernel, running
	state      slotState // guarded by Pool.mu
}

// New validates o and returns a pool that serves every claim cold until Start.
func New(o Options) (*Pool, error) {
	if o.Driver == nil {
		return nil, errors.New("pool: no driver")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Cold == nil {
		o.Cold = &Cold{Driver: o.Driver, Log: o.Log}
	}
	if o.Min <= 0 {
		o.Min = 2
	}
	if o.Max <= 0 {
		o.Max = 8
	}
	if o.Max < o.Min {
		o.Max = o.Min
	}
	if o.Refill <= 0 {
		o.Refill = 1
	}
	if o.BusyLeases <= 0 {
		o.BusyLeases = goruntime.NumCPU()
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.HalfLife <= 0 {
		o.HalfLife = 30 * time.Second
	}
	if o.ClaimTimeout <= 0 {
		o.ClaimTimeout = 5 * time.Second
	}
	if o.BuildTimeout <= 0 {
		o.BuildTimeout = 2 * time.Minute
	}
	if o.NewID == nil {
		o.NewID = func() string { return ids.New(ids.Sandbox) }
	}
	p := &Pool{o: o, log: o.Log, wake: make(chan struct{}, 1), stop: make(chan struct{}), owned: map[string]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if f, ok := o.Driver.(runtime.Freezer); ok && !o.NoFreeze {
		p.freezer = f
	}
	p.weigher, _ = o.Driver.(runtime.Prioritizer)
	for _, k := range o.Keys {
		if err := p.addKey(k, false); err != nil {
			return nil, err
		}
	}
	p.m = newMetrics()
	for _, ks := range p.keys {
		p.m.target.WithLabelValues(ks.key.Name).Set(float64(ks.target))
		p.m.ready.WithLabelValues(ks.key.Name).Set(0)
	}
	if o.Registerer != nil {
		for _, c := range p.m.collectors() {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("pool: registering metrics: %w", err)
			}
		}
	}
	return p, nil
}

// addKey validates k, fills its defaults and adds it. A key onDemand keeps a zero Min and
// asks for no more than the pool's Max. The caller holds mu or owns p.
func (p *Pool) addKey(k Key, onDemand bool) error {
	o := p.o
	if k.Image == "" {
		return fmt.Errorf("pool: key %q has no image", k.Name)
	}
	lang := agent.Interpreter(k.Language)
	if k.Language != "" && lang == "" {
		return fmt.Errorf("pool: key %q: language %q has no interpreter to pre-start (use \"\" for a bare slot)", k.Name, k.Language)
	}
	k.Language = lang
	if k.Kernel != nil && (k.Language != "" || k.Kernel.Name == "" || len(k.Kernel.Argv) == 0) {
		return fmt.Errorf("pool: key %q: a kernel needs a name, a command and no language", k.Name)
	}
	if k.Name == "" {
		k.Name = defaultName(k)
	}
	if k.Min < 0 || (k.Min == 0 && !onDemand) {
		k.Min = o.Min
	}
	if k.Max <= 0 || (onDemand && k.Max > o.Max) {
		k.Max = o.Max
	}
	if k.Max < k.Min {
		k.Max = k.Min
	}
	for _, ks := range p.keys {
		if keyID(ks.key) == keyID(k) || ks.key.Name == k.Name {
			return fmt.Errorf("pool: key %q is given twice", k.Name)
		}
	}
	p.keys = append(p.keys, &keyState{key: k, target: k.Min})
	return nil
}

// keyID is what tells keys apart: two keys with one id would serve the same claims.
func keyID(k Key) string {
	id := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%+v", k.Image, k.Layer, k.Language, k.Flavour, k.Runtime, k.Limits)
	if k.Kernel != nil {
		id += "\x00kernel " + k.Kernel.Name
	}
	return id
}

// Ensure adds key k unless the pool has one that serves the same claims, for slots that
// demand alone asks for: a zero Min keeps none ready until claims come (the warm slots of a
// template's layer, which the host agent adds at its first run). The pool keeps slots only
// on the drivers its configured keys name: a key on another (microvm, when no key makes
// slots there) is not added. It reports whether it added k.
func (p *Pool) Ensure(k Key) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !slices.ContainsFunc(p.keys, func(ks *keyState) bool { return !ks.onDemand && ks.key.Runtime == k.Runtime }) {
		return false, nil
	}
	lang := agent.Interpreter(k.Language)
	probe := k
	probe.Language = lang
	for _, ks := range p.keys {
		if keyID(ks.key) == keyID(probe) {
			return false, nil
		}
	}
	if !p.makeRoomLocked() {
		return false, nil
	}
	if err := p.addKey(k, true); err != nil {
		return false, err
	}
	ks := p.keys[len(p.keys)-1]
	ks.onDemand = true
	p.m.target.WithLabelValues(ks.key.Name).Set(float64(ks.target))
	p.m.ready.WithLabelValues(ks.key.Name).Set(0)
	return true, nil
}

// maxOnDemand bounds the keys Ensure adds (their metrics' labels, the work of each tick).
const maxOnDemand = 64

// makeRoomLocked makes room for one more key Ensure adds: at the bound, the least demanded
// of those holding no slot goes; false when each holds one. The caller holds mu.
func (p *Pool) makeRoomLocked() bool {
	n, victim := 0, -1
	for i, ks := range p.keys {
		if !ks.onDemand {
			continue
		}
		n++
		if len(ks.ready) == 0 && ks.building == 0 && (victim < 0 || ks.rate < p.keys[victim].rate) {
			victim = i
		}
	}
	if n < maxOnDemand {
		return true
	}
	if victim < 0 {
		return false
	}
	ks := p.keys[victim]
	ks.dropped = true
	p.m.target.WithLabelValues(ks.key.Name).Set(0)
	p.keys = slices.Delete(p.keys, victim, victim+1)
	return true
}

// Drop removes the keys drop selects and destroys their parked slots before it returns
// (a slot being built is destroyed when its build ends): what they stand on (a template
// layer about to be collected) is theirs no more. Leases already handed out stay valid.
func (p *Pool) Drop(ctx context.Context, drop func(Key) bool) error {
	p.mu.Lock()
	var parkedSlots []*slot
	keep := p.keys[:0:0]
	for _, ks := range p.keys {
		if !drop(ks.key) {
			keep = append(keep, ks)
			continue
		}
		ks.dropped = true
		for _, s := range ks.ready {
			s.state = discarded
			parkedSlots = append(parkedSlots, s)
		}
		ks.ready = nil
		p.m.ready.WithLabelValues(ks.key.Name).Set(0)
		p.m.target.WithLabelValues(ks.key.Name).Set(0)
	}
	p.keys = keep
	p.mu.Unlock()
	var errs []error
	for _, s := range parkedSlots {
		errs = append(errs, p.destroy(ctx, s))
	}
	return errors.Join(errs...)
}

func defaultName(k Key) string {
	lang := k.Language
	if lang == "" {
		lang = "bare"
	}
	return fmt.Sprintf("%s/%dm-%gc", lang, k.Limits.MemoryMiB, k.Limits.CPUs)
}

// Start begins building slots. Call it once the service has reaped what a crash left behind.
func (p *Pool) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	p.lastTick = time.Now()
	p.wg.Add(1)
	go p.loop()
}

// Close stops refilling and destroys every parked slot; claims after it are cold. Leases
// already handed out stay valid: their Release destroys them.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	p.cancel()
	var parkedSlots []*slot
	for _, ks := range p.keys {
		for _, s := range ks.ready {
			s.state = discarded
			parkedSlots = append(parkedSlots, s)
		}
		ks.ready = nil
		p.m.ready.WithLabelValues(ks.key.Name).Set(0)
	}
	p.mu.Unlock()

	errs := make([]error, len(parkedSlots))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, s := range parkedSlots {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs[i] = p.destroy(ctx, s)
		}()
	}
	wg.Wait()
	p.wg.Wait() // builds in flight destroy what they made
	return errors.Join(errs...)
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Acquire hands out a ready slot for req, or a cold sandbox when the pool has none.
func (p *Pool) Acquire(ctx context.Context, req Request) (*Lease, error) {
	t0 := time.Now()
	defer p.claimStarted(false)() // refill waits while this claim, cold or warm, is in flight
	// A run that imports numpy or pandas takes a slot of its flavour or none, where a cold
	// sandbox's interpreter is forked with them imported: a lean or bare slot would import
	// them in the run (~650 ms of CPU on this machine), a cold sandbox with a forked
	// interpreter costs a fraction of that (~100 ms, the sandbox's start included).
	s, err := p.take(ctx, req, t0, p.coldForksFull(req))
	if err != nil {
		return nil, err
	}
	if s != nil {
		p.mu.Lock()
		p.leases++
		p.mu.Unlock()
		// StartedAt is the claim: the sandbox's life (and its metered usage) is the
		// claimant's from here.
		return NewLease(&claimedSandbox{Sandbox: s.sb, base: s.base}, s.client, time.Now(), func(ctx context.Context) error {
			defer p.released()
			return p.destroy(ctx, s)
		}), nil
	}
	lease, err := p.o.Cold.Acquire(ctx, req)
	if err == nil && p.coldForks(req) {
		// A python run in a cold sandbox: its interpreter forked with numpy and pandas
		// imported (or, for a lean run, the harness alone) costs a fraction of the CPU of
		// the run starting python and importing them.
		var imports []string
		if req.Flavour == FlavourLean {
			imports = []string{}
		}
		if _, unsupported := p.fork(ctx, "cold", lease.Sandbox.ID(), lease.Agent, imports); unsupported {
			p.coldNoZygote.Store(req.Spec.Runtime, true) // the runtime's answer: coldForks excluded the sandbox's own reasons
		}
	}
	p.m.claimSeconds.WithLabelValues("cold").Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.leases++
	p.mu.Unlock()
	return NewLease(lease.Sandbox, lease.Agent, lease.StartedAt, func(ctx context.Context) error {
		defer p.released()
		return lease.Release(ctx)
	}), nil
}

// coldForks says whether a cold sandbox for req gets its interpreter forked from a zygote:
// a python run on a runtime that has not answered that it cannot, in a sandbox whose root is
// the image alone (a zygote's root is the image: a template layer's or a writable root's
// files would differ, and the driver refuses those — which says nothing of the runtime's
// other sandboxes).
func (p *Pool) coldForks(req Request) bool {
	if agent.Interpreter(req.Language) != agent.LangPython || req.Spec.Layer != "" || req.Spec.WritableRoot {
		return false
	}
	if _, ok := p.o.Driver.(runtime.InterpreterForker); !ok || !p.o.Zygote {
		return false
	}
	_, no := p.coldNoZygote.Load(req.Spec.Runtime)
	return !no
}

// coldForksFull says whether a cold sandbox for req gets its interpreter forked with numpy
// and pandas imported (the full flavour's zygote).
func (p *Pool) coldForksFull(req Request) bool {
	return req.Flavour == FlavourFull && req.Kernel == "" && p.coldForks(req)
}

// claimStarted counts a claim in flight (refill starts no slot meanwhile); calling what it
// answers ends it, and with quiet starts the quiet period after it (claimQuiet).
func (p *Pool) claimStarted(quiet bool) func() {
	p.mu.Lock()
	p.claiming++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.claiming--
		if quiet {
			p.quietUntil = time.Now().Add(claimQuiet)
			time.AfterFunc(claimQuiet, p.kick)
		}
		p.mu.Unlock()
		p.kick()
	}
}

// take claims a ready slot for spec (thawed, renamed if asked), trying the next when one
// fails its claim; nil when none is ready, and the claim counts as cold. Either way the
// claim is counted in its key's demand and in the metrics (a warm claim's latency from t0;
// a cold one's is the caller's to observe). With ownFlavourOnly it takes only a slot of the
// python full flavour (a one-call run's claim that would rather go cold: Acquire).
func (p *Pool) take(ctx context.Context, req Request, t0 time.Time, ownFlavourOnly bool) (*slot, error) {
	spec := req.Spec
	p.mu.Lock()
	cands := p.match(spec, agent.Interpreter(req.Language), req.Flavour, req.Kernel)
	if len(cands) > 0 {
		cands[0].claims++ // demand, whether it is met warm or not
	}
	p.mu.Unlock()
	var first *keyState // the key whose demand and metrics the claim counts in
	if len(cands) > 0 {
		first = cands[0]
	}
	if ownFlavourOnly {
		cands = slices.DeleteFunc(slices.Clone(cands), func(ks *keyState) bool {
			return ks.key.Kernel != nil || agent.Interpreter(ks.key.Language) != agent.LangPython || ks.key.Flavour != FlavourFull
		})
	}
	for _, ks := range cands {
		for {
			s := p.pop(ks)
			if s == nil {
				break
			}
			if err := p.bind(ctx, s, spec); err != nil {
				p.log.Warn("pool: a ready slot failed its claim; trying another", "slot", s.id, "key", ks.key.Name, "err", err)
				p.m.discarded.WithLabelValues(ks.key.Name, "claim_failed").Inc()
				p.destroyAsync(s)
				if ctx.Err() != nil {
					return nil, fmt.Errorf("pool: claiming a slot: %w", ctx.Err())
				}
				continue
			}
			p.mu.Lock()
			first.warm++
			p.mu.Unlock()
			p.m.claims.WithLabelValues(first.key.Name, "warm").Inc()
			p.m.claimSeconds.WithLabelValues("warm").Observe(time.Since(t0).Seconds())
			return s, nil
		}
	}
	name := "none"
	if first != nil {
		name = first.key.Name
		p.mu.Lock()
		first.cold++
		p.mu.Unlock()
	}
	p.m.claims.WithLabelValues(name, "cold").Inc()
	return nil, nil
}

// match lists the keys that can serve spec, best first: the exact one (language and
// flavour), another flavour of the language (a wrong flavour costs the run the imports it
// lacks, or memory it does not use, never correctness), then a bare slot of the same image
// and limits (a started sandbox, whatever it runs). Acquire has take drop all but the full
// flavour's for a run that imports numpy or pandas when a cold sandbox would fork them
// (coldForksFull).
func (p *Pool) match(spec runtime.Spec, lang, flavour, kernel string) []*keyState {
	if _, canRename := p.o.Driver.(runtime.Renamer); spec.Hostname != "" && spec.Hostname != p.o.Hostname && !canRename {
		return nil
	}
	var own, exact, sibling, bare *keyState
	for _, ks := range p.keys {
		k := ks.key
		if k.Image != spec.Image || k.Layer != spec.Layer || k.Limits != spec.Limits || k.Runtime != spec.Runtime {
			continue
		}
		switch {
		case k.Kernel != nil:
			// Only for a claim that takes its kernel on.
			if kernel != "" && k.Kernel.Name == kernel {
				own = ks
			}
		case kernel != "" && k.Language != "":
			// A claim for a kernel takes a bare slot after its own.
		case k.Language == lang && k.Flavour == flavour:
			exact = ks
		case k.Language == lang && lang != "" && sibling == nil:
			sibling = ks
		case k.Language == "":
			bare = ks
		}
	}
	var out []*keyState
	for _, ks := range []*keyState{own, exact, sibling, bare} {
		if ks != nil && !slices.Contains(out, ks) {
			out = append(out, ks)
		}
	}
	return out
}

// pop takes the oldest parked slot of ks.
func (p *Pool) pop(ks *keyState) *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(ks.ready) == 0 {
		return nil
	}
	s := ks.ready[0]
	ks.ready = ks.ready[1:]
	s.state = claimed
	delete(p.owned, s.id)
	p.m.ready.WithLabelValues(ks.key.Name).Set(float64(len(ks.ready)))
	return s
}

// bind wakes a popped slot and gives it the claim's hostname, when it asks for another one
// (its entropy and machine id were bound when it was built: bindIdentity).
func (p *Pool) bind(ctx context.Context, s *slot, spec runtime.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, p.o.ClaimTimeout)
	defer cancel()
	if s.frozen {
		endThaw := timing.Start(ctx, "thaw")
		err := p.freezer.Thaw(ctx, s.id)
		endThaw()
		if err != nil {
			return fmt.Errorf("thawing: %w", err)
		}
		s.frozen = false
	}
	if s.background {
		if err := p.weigher.SetCPUWeight(ctx, s.id, runtime.DefaultCPUWeight); err != nil {
			return fmt.Errorf("restoring its CPU weight: %w", err)
		}
		s.background = false
	}
	select {
	case <-s.sb.Done():
		return errors.New("the slot's sandbox has ended")
	default:
	}
	if spec.Hostname != "" && spec.Hostname != p.o.Hostname {
		r, ok := p.o.Driver.(runtime.Renamer)
		if !ok {
			return errors.New("hostname: the driver cannot rename a sandbox")
		}
		if err := r.SetHostname(ctx, s.id, spec.Hostname); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	}
	return nil
}

// bindIdentity gives a slot fresh entropy, mixed into the kernel pool the sandbox reads (the
// pre-started interpreter reseeds from it when its run arrives), and a fresh machine id (the
// drivers make /etc/machine-id the sandbox's to write); an agent or driver that cannot write
// it answers not_supported, and the slot keeps the id it booted with, which is no failure.
//
// It runs when the slot is built, not at its claim: a slot is a sandbox of its own from its
// start (no state is copied from one slot to another after that), so entropy and an id bound
// then are as much the claimant's alone as ones bound at the claim, which saves the claim an
// agent round trip and a write to the sandbox's disk.
func bindIdentity(ctx context.Context, c *agent.Client) error {
	seed := make([]byte, 48)
	rand.Read(seed)
	id := agent.Identity{Seed: seed[:32], MachineID: hex.EncodeToString(seed[32:])}
	if err := c.SetIdentity(ctx, id); err != nil && !agent.IsCode(err, agent.CodeNotSupported) {
		return fmt.Errorf("binding identity: %w", err)
	}
	return nil
}

// Handover hands a ready slot for req over for good, thawed and with fresh identity: the
// caller owns the driver sandbox Lease.Sandbox.ID() names (an ids.Sandbox id the pool chose;
// req.Spec.ID is not used) and stops, starts and destroys it through the driver; the pool
// forgets it. Lease.Release destroys it, for a caller that cannot take it after all. A
// long-lived sandbox asks for language "" (a bare slot). When no slot is ready for req
// Handover answers nil, nil at once: the caller creates the sandbox itself, under an id of
// its own (the claim counts as cold).
func (p *Pool) Handover(ctx context.Context, req Request) (*Lease, error) {
	defer p.claimStarted(true)()
	s, err := p.take(ctx, req, time.Now(), false)
	if s == nil || err != nil {
		return nil, err
	}
	l := NewLease(&claimedSandbox{Sandbox: s.sb, base: s.base}, s.client, time.Now(), func(ctx context.Context) error {
		return p.destroy(ctx, s)
	})
	l.Kernel = s.kernel
	return l, nil
}

func (p *Pool) released() {
	p.mu.Lock()
	p.leases--
	p.mu.Unlock()
	p.kick()
}

// destroy ends a slot: its channel, its sandbox, everything the driver holds for it.
func (p *Pool) destroy(ctx context.Context, s *slot) error {
	var errs []error
	if s.frozen && p.freezer != nil {
		// Killing a frozen sandbox waits on its thaw; do it first.
		if err := p.freezer.Thaw(ctx, s.id); err != nil {
			errs = append(errs, err)
		}
	}
	if s.client != nil {
		s.client.Close()
	}
	if err := p.o.Driver.Destroy(ctx, s.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		errs = append(errs, fmt.Errorf("destroying slot %s: %w", s.id, err))
	}
	p.mu.Lock()
	delete(p.owned, s.id)
	p.mu.Unlock()
	return errors.Join(errs...)
}

// Owns reports whether id is a slot of the pool's (being built or parked): a sandbox of the
// pool's own, which no record names. A host agent serving several control planes reaps what
// their records do not name, while its pool runs: it must spare these.
func (p *Pool) Owns(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[id]
}

func (p *Pool) destroyAsync(s *slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.destroyAsyncLocked(s)
}

// destroyAsyncLocked destroys s in the background; Close waits for it, unless it is
// already waiting (then it is not tracked: Add must not race Wait).
func (p *Pool) destroyAsyncLocked(s *slot) {
	tracked := !p.closed
	if tracked {
		p.wg.Add(1)
	}
	go func() {
		if tracked {
			defer p.wg.Done()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.destroy(ctx, s); err != nil {
			p.log.Error("pool: destroying a slot", "slot", s.id, "err", err)
		}
	}()
}

func (p *Pool) loop() {
	defer p.wg.Done()
	t := time.NewTicker(p.o.Tick)
	defer t.Stop()
	for {
		p.schedule()
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case now := <-t.C:
			p.tick(now)
		}
	}
}

// busy says whether running work needs the CPU more than the pool does.
func (p *Pool) busy() bool { return p.claiming > 0 || p.leases >= p.o.BusyLeases }

// schedule starts builds for the keys furthest below their target, while the pool may.
func (p *Pool) schedule() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for !p.closed && p.building < p.o.Refill && !p.busy() {
		var best *keyState
		bestDeficit := 0.0
		for _, ks := range p.keys {
			have := len(ks.ready) + ks.building
			if have >= ks.target || now.Before(ks.retryAt) || (len(ks.ready) > 0 && now.Before(p.quietUntil)) ||
				(p.leases > 0 && 2*len(ks.ready) >= ks.target) {
				continue
			}
			// The emptiest key relative to its target first.
			d := float64(ks.target-have) / float64(ks.target)
			if best == nil || d > bestDeficit {
				best, bestDeficit = ks, d
			}
		}
		if best == nil {
			return
		}
		best.building++
		p.building++
		p.wg.Add(1)
		go p.build(best)
	}
}

// tick folds the claims since the last tick into each key's demand and sets its target:
// enough slots to cover the demand for two build times (refill is serial), within Min and
// Max. A key with more slots than its target gives back its oldest, one per tick.
func (p *Pool) tick(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dt := now.Sub(p.lastTick).Seconds()
	if dt <= 0 {
		return
	}
	p.lastTick = now
	alpha := 1 - math.Exp(-dt*math.Ln2/p.o.HalfLife.Seconds())
	for _, ks := range p.keys {
		ks.rate += alpha * (float64(ks.claims)/dt - ks.rate)
		ks.claims = 0
		bt := ks.buildTime
		if bt == 0 {
			bt = time.Second
		}
		need := int(math.Ceil(ks.rate * bt.Seconds() * 2))
		if ks.onDemand && ks.rate < idleRate {
			need = 0 // its template is not used any more: no slot waits for it
		}
		ks.target = min(max(need, ks.key.Min), ks.key.Max)
		p.m.target.WithLabelValues(ks.key.Name).Set(float64(ks.target))
		if len(ks.ready) > ks.target && !p.closed {
			s := ks.ready[0]
			ks.ready = ks.ready[1:]
			s.state = discarded
			p.m.ready.WithLabelValues(ks.key.Name).Set(float64(len(ks.ready)))
			p.m.discarded.WithLabelValues(ks.key.Name, "surplus").Inc()
			p.destroyAsyncLocked(s)
		}
	}
}

// claimQuiet is how long after a Handover no slot is built for a key that still has a ready
// one: a long-lived sandbox just created is about to run its first command, and building a
// slot (a sandbox's start: mounts, namespaces, the agent) takes the CPU that command needs. A
// key left with no ready slot is refilled at once. (A one-call run holds a lease until its
// sandbox is destroyed; meanwhile a key with at least half its target ready is not
// refilled, and one with fewer only below BusyLeases leases.)
const claimQuiet = 100 * time.Millisecond

// idleRate is the demand (claims per second: one in ten minutes) under which a key Ensure
// added keeps no slot.
const idleRate = 1.0 / 600

// build makes one slot of ks and parks it.
func (p *Pool) build(ks *keyState) {
	defer p.wg.Done()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(p.ctx, p.o.BuildTimeout)
	s, err := p.make(ctx, ks)
	cancel()
	d := time.Since(t0)

	p.mu.Lock()
	ks.building--
	p.building--
	switch {
	case err != nil:
		ks.failures++
		backoff := min(time.Second<<min(ks.failures-1, 6), time.Minute)
		ks.retryAt = time.Now().Add(backoff)
		p.mu.Unlock()
		if p.ctx.Err() == nil {
			p.m.refillErrors.WithLabelValues(ks.key.Name).Inc()
			p.log.Error("pool: building a slot", "key", ks.key.Name, "err", err, "retry_in", backoff.String())
		}
	case p.closed || ks.dropped:
		s.state = discarded
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p.destroy(ctx, s)
		cancel()
	default:
		ks.failures = 0
		if ks.buildTime == 0 {
			ks.buildTime = d
		} else {
			ks.buildTime = (ks.buildTime*3 + d) / 4
		}
		ks.ready = append(ks.ready, s)
		p.m.ready.WithLabelValues(ks.key.Name).Set(float64(len(ks.ready)))
		p.m.build.WithLabelValues(ks.key.Name).Observe(d.Seconds())
		p.mu.Unlock()
		p.log.Debug("pool: slot ready", "key", ks.key.Name, "slot", s.id, "build_ms", d.Milliseconds())
		go p.watch(s)
	}
	p.kick()
}

// make creates, starts, connects to, pre-starts and parks a slot; a failure at any step
// destroys what the steps before made.
func (p *Pool) make(ctx context.Context, ks *keyState) (_ *slot, err error) {
	k := ks.key
	s := &slot{id: p.o.NewID(), ks: ks}
	p.mu.Lock()
	p.owned[s.id] = true
	p.mu.Unlock()
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = errors.Join(err, p.destroy(dctx, s))
		}
	}()
	if err := p.o.Driver.Create(ctx, runtime.Spec{ID: s.id, Image: k.Image, Layer: k.Layer, Limits: k.Limits, Hostname: p.o.Hostname, Runtime: k.Runtime}); err != nil {
		return nil, fmt.Errorf("creating: %w", err)
	}
	sb, err := p.o.Driver.Start(ctx, s.id)
	if err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	s.sb = sb
	// A slot is built in the background: at a low CPU weight, so that importing pandas for
	// the next claim never slows the sandboxes running work now. The claim restores it.
	if p.weigher != nil {
		if err := p.weigher.SetCPUWeight(ctx, s.id, runtime.BackgroundCPUWeight); err == nil {
			s.background = true
		} else if !errdefs.IsConflict(err) {
			return nil, fmt.Errorf("lowering its CPU weight: %w", err)
		}
	}
	if s.client, err = agent.NewClient(sb.Conn()); err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	if k.Language != "" {
		if err := p.prestart(ctx, s, agent.PrestartRequest{Language: k.Language, Imports: k.Imports}); err != nil {
			return nil, fmt.Errorf("pre-starting %s: %w", k.Language, err)
		}
	} else if err := s.client.Ping(ctx); err != nil {
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	if k.Kernel != nil {
		if s.kernel, err = startKernel(ctx, s.client, k.Kernel); err != nil {
			return nil, err
		}
	}
	if err := bindIdentity(ctx, s.client); err != nil {
		return nil, err
	}
	if p.freezer != nil && (k.Kernel != nil || !slices.Contains(p.o.NoFreezeOn, k.Runtime)) {
		if err := p.freezer.Freeze(ctx, s.id); err != nil {
			return nil, fmt.Errorf("parking: %w", err)
		}
		s.frozen = true
	}
	// What the slot used to get here is the pool's, not its claimant's.
	if s.base, err = runtime.UsageOf(ctx, sb); err != nil {
		return nil, fmt.Errorf("reading its accounting: %w", err)
	}
	s.builtAt = time.Now()
	return s, nil
}

// prestart pre-starts the slot's interpreter: forked from the driver's zygote of its imports
// when it can be, else started by the agent.
func (p *Pool) prestart(ctx context.Context, s *slot, req agent.PrestartRequest) error {
	if req.Language == agent.LangPython && !s.ks.noZygote.Load() {
		forked, unsupported := p.fork(ctx, "warm", s.sb.ID(), s.client, req.Imports)
		if forked {
			return nil
		}
		if unsupported {
			s.ks.noZygote.Store(true)
		}
	}
	return s.client.Prestart(ctx, req)
}

// fork asks the driver's zygote of imports (nil: python's default, numpy and pandas; empty:
// the harness alone) for a python interpreter in sandbox id, and its agent to adopt it. Not
// forked, it says whether the sandbox cannot have one (unsupported: ask no more for its
// kind); a failure is logged and counted. path is warm (a slot) or cold (a claim the pool
// could not serve).
func (p *Pool) fork(ctx context.Context, path, id string, c *agent.Client, imports []string) (forked, unsupported bool) {
	f, ok := p.o.Driver.(runtime.InterpreterForker)
	if !ok || !p.o.Zygote {
		return false, true
	}
	var b [12]byte
	rand.Read(b[:])
	req := agent.PrestartRequest{Language: agent.LangPython, Imports: imports, ZygoteSocket: "lbb-zygote-" + hex.EncodeToString(b[:])}
	// The fork first: a driver without a zygote for this sandbox says so at once, and the
	// forked interpreter waits (~2 s) for the agent to listen.
	err := f.ForkInterpreter(ctx, id, runtime.ForkRequest{Language: req.Language, Socket: req.ZygoteSocket, Imports: imports})
	if err == nil {
		err = c.Prestart(ctx, req)
	}
	switch {
	case err == nil:
		p.m.zygote.WithLabelValues(path, "forked").Inc()
		return true, false
	case ctx.Err() != nil:
		return false, false // given up: not the zygote's failure
	case errdefs.CodeOf(err) == errdefs.CodeNotSupported:
		// Another runtime (gvisor, microvm) or a template layer.
		p.m.zygote.WithLabelValues(path, "unsupported").Inc()
		return false, true
	}
	p.m.zygote.WithLabelValues(path, "fallback").Inc()
	p.log.Warn("pool: the zygote did not give the sandbox its interpreter; the agent starts one", "sandbox", id, "path", path, "err", err)
	return false, false
}

// watch discards a parked slot whose sandbox ends (killed from outside, out of memory).
func (p *Pool) watch(s *slot) {
	<-s.sb.Done()
	p.mu.Lock()
	if s.state != parked {
		p.mu.Unlock()
		return
	}
	ks := s.ks
	for i, r := range ks.ready {
		if r == s {
			ks.ready = append(ks.ready[:i:i], ks.ready[i+1:]...)
			break
		}
	}
	s.state = discarded
	p.m.ready.WithLabelValues(ks.key.Name).Set(float64(len(ks.ready)))
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	p.log.Warn("pool: a parked slot ended; replacing it", "slot", s.id, "key", ks.key.Name)
	p.m.discarded.WithLabelValues(ks.key.Name, "ended").Inc()
	p.destroyAsync(s)
	p.kick()
}

// DefaultKeys are the keys lbb serve keeps on image for a limits class (the server's default
// limits): python with numpy and pandas imported (python-sci), lean python (the harness
// alone: most runs import neither, and a lean slot costs a fraction of the CPU to build),
// node, and bare slots (the agent up, nothing started) for long-lived sandboxes (Handover)
// and shell runs. Each key's depth follows its own demand.
func DefaultKeys(image string, limits runtime.Limits) []Key {
	return []Key{
		{Name: "python-sci", Image: image, Language: agent.LangPython, Limits: limits},
		{Name: "python", Image: image, Language: agent.LangPython, Flavour: FlavourLean, Imports: []string{}, Limits: limits},
		{Name: "node", Image: image, Language: agent.LangNode, Limits: limits},
		{Name: "bare", Image: image, Limits: limits},
	}
}

// KeyStats is one key's state.
type KeyStats struct {
	Name     string
	Language string
	Limits   runtime.Limits
	// Ready slots are parked; Building are being made; Target is what refill aims for.
	Ready, Building, Target int
	// Rate is the demand average, in claims per second.
	Rate float64
	// Warm and Cold count claims served from this key and missed by it.
	Warm, Cold uint64
	// BuildTime is the average time to build one slot.
	BuildTime time.Duration
}

// Stats reports every key's state (for lbb bench and logs).
func (p *Pool) Stats() []KeyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]KeyStats, 0, len(p.keys))
	for _, ks := range p.keys {
		out = append(out, KeyStats{Name: ks.key.Name, Language: ks.key.Language, Limits: ks.key.Limits,
			Ready: len(ks.ready), Building: ks.building, Target: ks.target, Rate: ks.rate,
			Warm: ks.warm, Cold: ks.cold, BuildTime: ks.buildTime})
	}
	return out
}

// WaitReady waits until every key has as many ready slots as its target (for benchmarks
// and tests that want a full pool). Refill must be started.
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		full := true
		for _, ks := range p.keys {
			if len(ks.ready) < ks.target {
				full = false
			}
		}
		p.mu.Unlock()
		if full {
			return nil
		}
		p.kick()
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool: waiting for ready slots: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
