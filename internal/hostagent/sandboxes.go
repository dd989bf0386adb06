package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Long-lived sandboxes are addressed by their id in the driver: Stop keeps their disk and a
// later Resume starts the same workspace. A create may take a started sandbox from the warm
// pool (CreateRequest.Warm): the pool names it, and the answer says that id, so that the
// driver id is still the record's.
//
// The host agent holds each long-lived sandbox it has started or been told about in memory:
// its state (running, frozen, checkpointed, stopped), its env (whose values are never
// stored), its expiry timer and the commands running in it. A sandbox whose init dies by
// itself is stopped (disk kept) and reported (EventDied).

// sandbox is a long-lived sandbox of this host agent.
type sandbox struct {
	id string
	// ops serializes lifecycle changes (create, stop, resume, pause, snapshot, destroy).
	ops sync.Mutex

	mu sync.Mutex
	// live is the started sandbox; nil while stopped or checkpointed.
	live *live
	// frozen says the freezer parks live.
	frozen bool
	// ctx is the commands' context while it runs; cancel ends them with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	env    map[string]string
	cmds   map[string]*command
	// backstops are its commands' backstop deadlines (held while it is paused).
	backstops agent.Deadlines
	// moving says a snapshot is moving it, commands and all, to a new life; changed is
	// closed (and replaced) whenever live or moving changes (see Local.moveStream).
	moving  bool
	changed chan struct{}
	expiry  *time.Timer
	// expired says its expiry passed: it ends for that.
	expired bool
	// egress is its route out and API (nil: none), served on every life as espec says;
	// egressErr says why the current life's could not be opened.
	egress    *egress.Sandbox
	espec     *Egress
	egressErr error
}

// live is a started sandbox and its agent.
type live struct {
	sb        runtime.Sandbox
	agent     *agent.Client
	startedAt time.Time
	limits    runtime.Limits
	// egress is the sandbox's, and egressBase what it had carried when this life began;
	// served says its Listen session is open on agent (it ends with the agent's channel, so
	// a freeze keeps it and a checkpoint or stop ends it).
	egress     *egress.Sandbox
	egressBase store.EgressUsage
	served     bool
}

// usage is what the sandbox used from its start until now: CPU time, reserved memory and
// what its egress carried.
func (l *live) usage(ctx context.Context) store.Usage {
	st, err := l.sb.Stats(ctx)
	if err != nil {
		st = runtime.Stats{}
	}
	u := usage(st.CPUNanos, l.limits, l.startedAt, time.Now())
	u.Egress = lifeEgress(l.egress, l.egressBase)
	return u
}

// lookup answers the sandbox id, made (stopped) when make is set and it is unknown.
func (h *Local) lookup(id string, make bool) *sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sandboxes[id]
	if s == nil && make {
		s = &sandbox{id: id, cmds: map[string]*command{}, changed: newChanged()}
		h.sandboxes[id] = s
	}
	return s
}

func (h *Local) forget(id string) {
	h.mu.Lock()
	s := h.sandboxes[id]
	delete(h.sandboxes, id)
	h.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		if s.expiry != nil {
			s.expiry.Stop()
		}
		s.mu.Unlock()
	}
}

func (h *Local) pauseDir(id string) string { return filepath.Join(h.dataDir, "paused", id) }

func (h *Local) snapshotDir(id string) string { return filepath.Join(h.dataDir, "snapshots", id) }

// Create starts a long-lived sandbox, from the warm pool when req.Warm and one is ready.
func (h *Local) Create(ctx context.Context, req CreateRequest) (Sandbox, error) {
	image, layer, err := h.image(req.Layer, req.Runtime)
	if err != nil {
		return Sandbox{}, err
	}
	spec := runtime.Spec{ID: req.ID, Image: image, Layer: layer, Limits: req.Limits, Runtime: req.Runtime}
	var l *live
	var kernel *pool.Running
	if req.Warm && h.pool != nil {
		if req.Layer != "" {
			// Bare slots of the layer, as its demand asks (warmLayer); a claim for a kernel
			// takes one too (the kernel then starts in it).
			h.warmLayer(req.Layer, pool.Request{Spec: spec})
		}
		l, kernel, err = h.handover(ctx, spec, req.Kernel, req.Files)
	}
	if l == nil && err == nil {
		l, err = h.start(ctx, spec, true, req.Files)
	}
	if err != nil {
		return Sandbox{}, err
	}
	s := h.lookup(l.sb.ID(), true)
	s.ops.Lock()
	defer s.ops.Unlock()
	esb, err := h.newEgress(s.id, req.Egress)
	if err == nil && req.Git != nil {
		err = h.clone(ctx, l.agent, s.id, esb, req.Git)
	}
	if err != nil {
		return Sandbox{}, h.abandon(ctx, s, l, err)
	}
	s.mu.Lock()
	s.env = maps.Clone(req.Env)
	s.egress, s.espec = esb, req.Egress
	s.mu.Unlock()
	if err := h.setRunning(s, l); err != nil {
		return Sandbox{}, h.abandon(ctx, s, l, err)
	}
	a := h.answer(s.id, req.Runtime, l)
	if kernel != nil {
		a.Kernel = h.adoptKernel(ctx, s, kernel)
	}
	return a, nil
}

// adoptKernel makes the kernel a slot came with a held command of sandbox s, with its stdin
// open, as a caller's Exec of it would have (the code contexts' driver: see
// control.startDriver). It answers the command's id, "" when it ended meanwhile.
func (h *Local) adoptKernel(ctx context.Context, s *sandbox, k *pool.Running) string {
	_, l, sctx, err := h.running(s.id)
	if err != nil {
		return ""
	}
	c := &command{id: k.ID, procID: k.ID, sandbox: s.id, done: make(chan struct{}), detachable: true,
		stdout: output.NewCapture(4096, 4096), stderr: output.NewCapture(4096, 4096), stdin: k.Stdin,
		hold: output.NewHold(HoldBytes, h.holdIdle)}
	c.agent.Store(l.agent)
	e := execution{kernel: k, timeout: pool.KernelTimeout, limits: l.limits, killed: c.killed.Load, hold: c.hold, egress: l.egress, backstops: &s.backstops}
	e.reattach = func(ctx context.Context) (*agent.Client, io.Reader) { return h.moveStream(ctx, s, c) }
	h.launch(ctx, s, l, sctx, c, e, nil)
	select {
	case <-c.done:
		return ""
	default:
		return c.id
	}
}

// abandon destroys a sandbox Create started but cannot hand over, and answers err.
func (h *Local) abandon(ctx context.Context, s *sandbox, l *live, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	s.mu.Lock()
	cancelLife := s.cancel
	s.live, s.ctx, s.cancel = nil, nil, nil
	s.mu.Unlock()
	if cancelLife != nil {
		cancelLife(err)
	}
	l.agent.Close()
	if derr := h.driver.Destroy(cctx, s.id); derr != nil && !errors.Is(derr, runtime.ErrNotFound) {
		err = errors.Join(err, fmt.Errorf("destroying sandbox %s: %w", s.id, derr))
	}
	h.forget(s.id)
	return err
}

func (h *Local) answer(id, rt string, l *live) Sandbox {
	if rt == "" {
		rt = h.info.Default
	}
	return Sandbox{ID: id, Runtime: rt, StartedAt: l.startedAt}
}

// handover takes a started sandbox from the warm pool and writes files into it; nil, nil
// when the pool has none.
func (h *Local) handover(ctx context.Context, spec runtime.Spec, kernel string, files []File) (*live, *pool.Running, error) {
	// A long-lived sandbox runs no pre-started run() interpreter: it takes a bare slot, or
	// one whose code context's kernel runs.
	lease, err := h.pool.Handover(ctx, pool.Request{Spec: spec, Kernel: kernel})
	if err != nil || lease == nil {
		return nil, nil, err
	}
	id := lease.Sandbox.ID()
	if err := h.writeFiles(ctx, lease.Agent, files); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, nil, errors.Join(fmt.Errorf("sandbox %s: %w", id, err), lease.Release(cctx))
	}
	return &live{sb: lease.Sandbox, agent: lease.Agent, startedAt: lease.StartedAt, limits: spec.Limits}, lease.Kernel, nil
}

// start creates (with create) and starts a sandbox and connects to its agent. A failure
// undoes what it did: a sandbox it created is destroyed, one it resumed is stopped again
// with its disk kept.
func (h *Local) start(ctx context.Context, spec runtime.Spec, create bool, files []File) (_ *live, err error) {
	var client *agent.Client
	started := false
	defer func() {
		if err == nil {
			return
		}
		if client != nil {
			client.Close()
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		switch {
		case create:
			if derr := h.driver.Destroy(cctx, spec.ID); derr != nil {
				err = errors.Join(err, fmt.Errorf("destroying sandbox %s: %w", spec.ID, derr))
			}
		case started:
			if serr := h.driver.Stop(cctx, spec.ID); serr != nil {
				err = errors.Join(err, fmt.Errorf("stopping sandbox %s: %w", spec.ID, serr))
			}
		}
	}()
	if create {
		if err := h.driver.Create(ctx, spec); err != nil {
			return nil, fmt.Errorf("creating sandbox: %w", err)
		}
	}
	sb, err := h.driver.Start(ctx, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	started = true
	l, err := connect(ctx, sb, spec.Limits)
	if l != nil {
		client = l.agent
	}
	if err != nil {
		return nil, err
	}
	if err := h.writeFiles(ctx, client, files); err != nil {
		return nil, err
	}
	return l, nil
}

// connect reaches a started sandbox's agent. On failure the client it made is closed.
func connect(ctx context.Context, sb runtime.Sandbox, limits runtime.Limits) (*live, error) {
	at := time.Now()
	client, err := agent.NewClient(sb.Conn())
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	if err := client.Ping(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	return &live{sb: sb, agent: client, startedAt: at, limits: limits}, nil
}

// setRunning binds a started sandbox to s, serves its egress on it, and watches it: a
// sandbox whose init dies by itself is stopped (disk kept) and reported. The caller holds
// s.ops. An error says the egress could not be served (the sandbox runs, sealed).
func (h *Local) setRunning(s *sandbox, l *live) error {
	s.mu.Lock()
	ctx, cancel := s.ctx, s.cancel
	if ctx == nil || ctx.Err() != nil {
		ctx, cancel = context.WithCancelCause(context.Background())
	}
	// (A live ctx is kept: the commands that a snapshot moved to this life run on in it.)
	s.live, s.frozen, s.ctx, s.cancel = l, false, ctx, cancel
	s.notify()
	esb, spec := s.egress, s.espec
	s.mu.Unlock()
	var eerr error
	if esb != nil && !l.served {
		if l.egress == nil {
			l.egress, l.egressBase = esb, esb.Usage()
		}
		if _, eerr = h.openEgress(context.Background(), l.agent, esb, spec); eerr != nil {
			h.log.Error("opening a sandbox's egress", "sandbox", s.id, "err", eerr)
		}
		l.served = eerr == nil
	}
	s.mu.Lock()
	s.egressErr = eerr
	s.mu.Unlock()
	go func() {
		select {
		case <-l.sb.Done():
		case <-ctx.Done():
			return
		}
		s.ops.Lock()
		defer s.ops.Unlock()
		s.mu.Lock()
		same := s.live == l
		s.mu.Unlock()
		if !same || ctx.Err() != nil {
			return
		}
		h.log.Warn("sandbox ended by itself; stopping it", "sandbox", s.id)
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		u, err := h.stopLive(sctx, s, errors.New("the sandbox's init process exited"))
		e := Event{Kind: EventDied, Sandbox: s.id, Usage: u, Error: "the sandbox's init process exited (out of memory?); resume starts it again"}
		if err != nil {
			e.Error += "; stopping it: " + err.Error()
		}
		h.emit(e)
	}()
	return eerr
}

// stopLive ends a running (or frozen) sandbox's commands and processes and keeps its disk;
// it answers the usage of the life that ended. The caller holds s.ops.
func (h *Local) stopLive(ctx context.Context, s *sandbox, cause error) (store.Usage, error) {
	s.mu.Lock()
	l, cancel, frozen := s.live, s.cancel, s.frozen
	cmds := make([]*command, 0, len(s.cmds))
	for _, c := range s.cmds {
		cmds = append(cmds, c)
	}
	s.mu.Unlock()
	if l == nil {
		return store.Usage{}, nil
	}
	if frozen {
		// Its processes must run to end.
		if err := h.thaw(ctx, s.id); err != nil {
			h.log.Warn("thawing a paused sandbox", "sandbox", s.id, "err", err)
		}
		s.backstops.Hold(false)
	}
	u := l.usage(ctx)
	if cancel != nil {
		cancel(cause)
	}
	var err error
	if serr := h.driver.Stop(ctx, s.id); serr != nil && !errors.Is(serr, runtime.ErrNotFound) {
		h.log.Error("stopping a sandbox", "sandbox", s.id, "err", serr)
		err = fmt.Errorf("stopping sandbox %s: %w", s.id, serr)
	}
	l.agent.Close()
	// The commands end with their sandbox.
	for _, c := range cmds {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			h.log.Error("a command did not end with its sandbox", "sandbox", s.id, "command", c.id)
		}
	}
	s.mu.Lock()
	s.live, s.frozen, s.ctx, s.cancel = nil, false, nil, nil
	s.notify()
	s.mu.Unlock()
	return u, err
}

func newChanged() chan struct{} { return make(chan struct{}) }

// notify wakes those waiting for s's live to change. The caller holds s.mu.
func (s *sandbox) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (h *Local) thaw(ctx context.Context, id string) error {
	f, ok := h.driver.(runtime.Freezer)
	if !ok {
		return nil
	}
	return f.Thaw(ctx, id)
}

// Resume starts a stopped sandbox again on its disk, thaws a frozen one or restores a
// checkpointed one.
func (h *Local) Resume(ctx context.Context, req ResumeRequest) (Sandbox, error) {
	s := h.lookup(req.ID, true)
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	l, frozen := s.live, s.frozen
	if s.env == nil && req.Env != nil {
		s.env = maps.Clone(req.Env)
	}
	if s.egress == nil && req.Egress.on() {
		esb, err := h.newEgress(req.ID, req.Egress)
		if err != nil {
			s.mu.Unlock()
			return Sandbox{}, err
		}
		s.egress, s.espec = esb, req.Egress
	}
	s.mu.Unlock()
	switch {
	case l != nil && frozen:
		f, ok := h.driver.(runtime.Freezer)
		if !ok {
			return Sandbox{}, NotSupported("runtime %q cannot thaw sandboxes", h.driver.Name())
		}
		if err := f.Thaw(ctx, req.ID); err != nil {
			return Sandbox{}, fmt.Errorf("thawing sandbox %s: %w", req.ID, err)
		}
		s.mu.Lock()
		s.frozen = false
		s.mu.Unlock()
		h.holdTimeouts(ctx, s, l, false)
		return h.answer(req.ID, req.Runtime, l), nil
	case l != nil:
		return h.answer(req.ID, req.Runtime, l), nil
	}
	// A sandbox of a template layer needs it mounted (again, after a restart).
	image, layer, err := h.image(req.Layer, req.Runtime)
	if err != nil {
		return Sandbox{}, err
	}
	dir := h.pauseDir(req.ID)
	if err := h.placeCheckpoint(ctx, "paused "+req.ID, dir, req.Checkpoint); err != nil {
		return Sandbox{}, err
	}
	if haveCheckpoint(dir) {
		c, ok := h.checkpointer()
		if !ok {
			return Sandbox{}, NotSupported("runtime %q cannot restore checkpoints", h.driver.Name())
		}
		// A failed restore leaves the sandbox stopped with the checkpoint's disk, and the
		// checkpoint in place for a retry.
		l, err := h.restore(ctx, c, req.ID, dir, req.Limits, false)
		if err != nil {
			return Sandbox{}, err
		}
		if err := os.RemoveAll(dir); err != nil {
			h.log.Warn("removing a used checkpoint", "sandbox", req.ID, "err", err)
		}
		return h.resumed(ctx, s, l, req)
	}
	spec := runtime.Spec{ID: req.ID, Image: image, Layer: layer, Limits: req.Limits, Runtime: req.Runtime}
	created, err := h.placeWorkspace(ctx, spec, req.Workspace)
	if err != nil {
		return Sandbox{}, err
	}
	// Its disk changes from here: no archive matches it any more.
	h.unmark(req.ID)
	l, err = h.start(ctx, spec, false, nil)
	if err != nil {
		if created {
			err = h.undoCreate(req.ID, err)
		}
		return Sandbox{}, err
	}
	return h.resumed(ctx, s, l, req)
}

// resumed binds a resumed sandbox's new life; one whose egress cannot be served is stopped
// again (its disk kept).
func (h *Local) resumed(ctx context.Context, s *sandbox, l *live, req ResumeRequest) (Sandbox, error) {
	if err := h.setRunning(s, l); err != nil {
		h.stopLive(context.WithoutCancel(ctx), s, err)
		return Sandbox{}, errdefs.Wrap(errdefs.ClassUnavailable, CodeSandboxStopped, fmt.Errorf("sandbox %s: %w", s.id, err))
	}
	return h.answer(req.ID, req.Runtime, l), nil
}

// Stop ends a sandbox's processes and commands and keeps its disk; a frozen one is thawed
// first, a checkpoint dropped. It works on a sandbox a previous process started.
func (h *Local) Stop(ctx context.Context, id string) (store.Usage, error) {
	s := h.lookup(id, true)
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	held := s.live != nil
	s.mu.Unlock()
	u, err := h.stopLive(ctx, s, errors.New("the sandbox was stopped"))
	if !held {
		// Not running here: a sandbox a crash left running, or a frozen one of a process that
		// is gone.
		h.thaw(ctx, id)
		if serr := h.driver.Stop(ctx, id); serr != nil && !errors.Is(serr, runtime.ErrNotFound) {
			err = fmt.Errorf("stopping sandbox %s: %w", id, serr)
		}
	}
	h.removeCheckpoint(id)
	return u, err
}

// removeCheckpoint removes the checkpoint a paused sandbox may have left.
func (h *Local) removeCheckpoint(id string) {
	if err := os.RemoveAll(h.pauseDir(id)); err != nil {
		h.log.Warn("removing a checkpoint", "sandbox", id, "err", err)
	}
}

// Destroy ends a sandbox in any state and removes its disk and checkpoint.
func (h *Local) Destroy(ctx context.Context, id string) (store.Usage, error) {
	s := h.lookup(id, true)
	s.ops.Lock()
	defer s.ops.Unlock()
	defer h.forget(id)
	cause := errors.New("the sandbox was deleted")
	s.mu.Lock()
	if s.expired {
		cause = errors.New("the sandbox expired")
	}
	s.mu.Unlock()
	u, _ := h.stopLive(ctx, s, cause)
	h.thaw(ctx, id)
	var err error
	if derr := h.driver.Destroy(ctx, id); derr != nil && !errors.Is(derr, runtime.ErrNotFound) {
		err = fmt.Errorf("destroying sandbox %s: %w", id, derr)
	}
	h.removeCheckpoint(id)
	h.unmark(id)
	return u, err
}

// Usage is what a running sandbox used since it (last) started.
func (h *Local) Usage(ctx context.Context, id string) (store.Usage, error) {
	s := h.lookup(id, false)
	if s == nil {
		return h.oneCallUsage(ctx, id)
	}
	s.mu.Lock()
	l := s.live
	s.mu.Unlock()
	if l == nil {
		return store.Usage{}, nil
	}
	return l.usage(ctx), nil
}

// oneCallUsage is what a one-call run's sandbox used since it started, while it runs (the
// control plane meters a run against its budgets while it runs).
func (h *Local) oneCallUsage(ctx context.Context, id string) (store.Usage, error) {
	h.mu.Lock()
	oc := h.runs[id]
	h.mu.Unlock()
	if oc == nil {
		return store.Usage{}, notHere(id)
	}
	select {
	case <-oc.done:
	default:
		return store.Usage{}, nil // still starting
	}
	if oc.lease == nil {
		return store.Usage{}, nil
	}
	st, err := oc.lease.Sandbox.Stats(ctx)
	if err != nil {
		return store.Usage{}, err
	}
	return usage(st.CPUNanos, oc.limits, oc.lease.StartedAt, time.Now()), nil
}

// SetExpiry arms the sandbox's expiry timer (EventExpired at at); the zero time clears it.
func (h *Local) SetExpiry(ctx context.Context, id string, at time.Time) error {
	s := h.lookup(id, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	if !at.IsZero() {
		s.expiry = time.AfterFunc(max(time.Until(at), 0), func() {
			s.mu.Lock()
			s.expired = true
			s.mu.Unlock()
			h.emit(Event{Kind: EventExpired, Sandbox: id})
		})
	}
	return nil
}

// running answers a running long-lived sandbox (not frozen) and its commands' context.
func (h *Local) running(id string) (*sandbox, *live, context.Context, error) {
	s := h.lookup(id, false)
	if s == nil {
		return nil, nil, nil, notHere(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil || s.frozen {
		return nil, nil, nil, errdefs.Conflict("sandbox %s is not running", id)
	}
	return s, s.live, s.ctx, nil
}
