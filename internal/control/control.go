// Package control is lbb's control plane: it turns API calls into records and runs. It
// reserves idempotency keys before any code runs, resolves templates and limits, asks the
// host agent (hostagent.Host) for sandboxes and commands, writes what happened into the
// store, waits for commands, recovers after a crash, enforces retention and drains on
// shutdown. It knows no driver; docs/architecture.md draws the layers.
package control

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/keylock"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Image is the base image sandboxes run on (what records and base templates name).
type Image struct {
	ID       string
	Versions map[string]string
	Missing  []string
}

// Options configure a Service.
type Options struct {
	Store store.Store
	// Host is the host agent that runs every sandbox.
	Host hostagent.Host
	// Blobs keeps the bytes of Files of the graph; without it there are no Files.
	Blobs  blobs.Store
	Image  Image
	Config config.Config
	// Isolation is what drivers the server offers; zero means Config.Runtime alone.
	Isolation Isolation
	Log       *slog.Logger
	// Registerer receives the control plane's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// PlaneID is this control plane's id (PlaneID of its data directory), the holder the
	// store stamps its records with; "" for one alone on its store.
	PlaneID string
	// SharedStore says other control planes may use the store (PostgreSQL): they heartbeat,
	// and only those whose heartbeats stopped are dead (holders.go).
	SharedStore bool
}

// Service is the control plane.
type Service struct {
	st      store.Store
	host    hostagent.Host
	blobs   blobs.Store
	image   Image
	iso     Isolation
	cfg     config.Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	runCtx     context.Context
	cancelRuns context.CancelFunc

	mu       sync.Mutex
	draining bool
	inflight map[string]*inflight // by command id
	runs     sync.WaitGroup

	janitorStop chan struct{}
	janitorDone chan struct{}

	// Holders (holders.go): this control plane's id, whether peers share the store, its
	// heartbeat, and whether peers adopted it while it ran.
	id                 string
	shared             bool
	recovered          atomic.Bool
	liveStop, liveDone chan struct{}
	fenced             chan struct{}
	fenceOnce          sync.Once

	// lmu guards the long-lived sandboxes held (running or stopped) and the graphs' locks.
	lmu        sync.Mutex
	held       map[string]*heldSandbox
	graphLocks map[string]*sync.Mutex
	// sessions serializes the calls that open one session in this process, so that calls at
	// once find the sandbox the first makes instead of each starting one the store then
	// refuses (between servers the unique index decides: sessionTaken).
	sessions keylock.Locks

	stopEvents context.CancelFunc

	// oneCalls are the graphs and keys of one-call runs' sandboxes running here (for the
	// audit of their refused destinations).
	oneCalls map[string]owner

	// slots decide when one-call runs execute.
	slots *admission
	// terms are the terminals running here: who is attached, and their grace timers.
	terms terminals
	// previews sign and check the host names of port previews.
	previews previews
	// cmu guards the code contexts running here (contexts.go).
	cmu      sync.Mutex
	contexts map[string]*codeContext
	// bmu guards the template builds running here (layers.go), by version.
	bmu    sync.Mutex
	builds map[string]chan struct{}
}

type owner struct{ graph, key string }

// New returns a Service. Call Recover before serving and Shutdown at the end.
func New(o Options) *Service {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Config.MaxSandboxesPerGraph = max(o.Config.MaxSandboxesPerGraph, o.Config.MaxRunningPerGraph)
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Service{
		st: o.Store, host: o.Host, blobs: o.Blobs, image: o.Image, cfg: o.Config, log: o.Log,
		iso:     o.Isolation.withDefaults(o.Config.Runtime),
		now:     func() time.Time { return o.Now().UTC().Truncate(time.Millisecond) },
		metrics: newMetrics(o.Registerer),
		runCtx:  ctx, cancelRuns: func() { cancel(errShutdown) },
		inflight: map[string]*inflight{},
		held:     map[string]*heldSandbox{},
		oneCalls: map[string]owner{},
		contexts: map[string]*codeContext{},
		id:       o.PlaneID, shared: o.SharedStore, fenced: make(chan struct{}),
	}
	slots := o.Config.RunSlots
	if slots == 0 {
		slots = defaultRunSlots(o.Config.Defaults.MemoryMiB)
	}
	s.slots = newAdmission(slots, o.Config.RunQueue)
	if f, ok := o.Host.(hostFleet); ok && o.Config.RunSlots == 0 {
		s.slots.capacity = func() int { return fleetRunSlots(f.Hosts(), o.Config.Defaults.MemoryMiB) }
		go s.slots.follow(ctx, time.Second)
	}
	s.metrics.watchAdmission(s.slots)
	s.watchEvents()
	return s
}

// errShutdown is why commands still running at the end of the grace period end.
var errShutdown = errors.New("the server shut down")

// Store returns the record store.
func (s *Service) Store() store.Store { return s.st }

// Config returns the server configuration.
func (s *Service) Config() config.Config { return s.cfg }

// Caller is who makes a call: the graph it names and the key it authenticated with.
type Caller struct {
	Graph     string
	Key       store.Key
	RequestID string
}

// begin registers a run that is about to start, unless the service is draining.
func (s *Service) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return errdefs.Unavailable("the server is shutting down; retry with the same Idempotency-Key")
	}
	s.runs.Add(1)
	return nil
}

// Running reports how many runs are in flight.
func (s *Service) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// Shutdown stops taking runs, lets running ones finish for up to the grace period, then
// ends the rest (their records say killed, their sandboxes server_shutdown) and stops the
// janitor. Long-lived sandboxes are stopped with their disks kept (end reason
// server_shutdown), so that resume finds their workspaces after a restart. It returns when
// every run has been recorded or ctx ends.
func (s *Service) Shutdown(ctx context.Context) error {
	defer s.stopEvents()
	defer s.stopAllLive(context.WithoutCancel(ctx), store.EndServerShutdown)
	s.mu.Lock()
	s.draining = true
	n := len(s.inflight)
	s.mu.Unlock()
	s.StopJanitor()
	defer s.stopLiveness()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	if n > 0 {
		s.log.Info("draining runs", "running", n, "grace", s.cfg.ShutdownGrace.String())
	}
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		s.cancelRuns()
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	n = len(s.inflight)
	s.mu.Unlock()
	s.log.Warn("grace period over: ending runs", "running", n)
	s.cancelRuns()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
