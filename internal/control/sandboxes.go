package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/bases"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/host"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Long-lived sandboxes (Level 3): created without a run, they live until deleted or until
// they expire. Stop ends their processes and keeps their disk; resume starts them again on
// the same workspace. The control plane holds each one that has not ended (running or
// stopped) in memory, with its expiry timer, its env (whose values are never stored) and
// the commands running in it.
//
// After a crash or a restart, a sandbox that was running is stopped with its disk kept
// (end_reason server_restart) so that resume brings its workspace back; the commands that
// ran in it are lost. Its env values were only in memory: a resumed sandbox runs without
// them (commands can pass env of their own). A sandbox whose expiry passed while the server
// was down is destroyed at start.

// SandboxHost is what long-lived sandboxes need of the host layer.
type SandboxHost interface {
	StartSandbox(ctx context.Context, spec host.SandboxSpec) (*host.Live, error)
	StopSandbox(ctx context.Context, id string) error
	DestroySandbox(ctx context.Context, id string) error
}

// liveSandbox is a long-lived sandbox that has not ended.
type liveSandbox struct {
	id, graph string
	// ops serializes lifecycle changes (create, stop, resume, delete, expire).
	ops sync.Mutex

	mu sync.Mutex
	// live is the started sandbox; nil while stopped.
	live *host.Live
	// ctx is the commands' context while it runs; cancel ends them with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	env    map[string]string
	cmds   map[string]*liveCommand
	expiry *time.Timer
	// frozen is the sandbox's Live while the freezer parks it (paused, PauseFreeze).
	frozen *host.Live
	// startedAt and usage meter the life so far: usage of the runs before this one.
	usage store.Usage
}

func (ls *liveSandbox) running() (*host.Live, context.Context) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.live, ls.ctx
}

func (s *Service) lookupLive(id string) *liveSandbox {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.lives[id]
}

func (s *Service) addLive(ls *liveSandbox) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.lives[ls.id] = ls
}

func (s *Service) removeLive(id string) {
	s.lmu.Lock()
	ls := s.lives[id]
	delete(s.lives, id)
	s.lmu.Unlock()
	if ls != nil {
		ls.mu.Lock()
		if ls.expiry != nil {
			ls.expiry.Stop()
		}
		ls.mu.Unlock()
	}
}

// scheduleExpiry ends the sandbox at its expiry.
func (s *Service) scheduleExpiry(ls *liveSandbox, at time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.expiry != nil {
		ls.expiry.Stop()
	}
	ls.expiry = time.AfterFunc(max(time.Until(at), 0), func() { s.expire(ls.graph, ls.id) })
}

func (s *Service) expire(graph, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.endSandbox(ctx, graph, id, store.EndExpired); err != nil && !errdefs.IsConflict(err) {
		s.log.Error("expiring a sandbox", "graph", graph, "sandbox", id, "err", err)
		return
	}
	s.log.Info("sandbox expired", "graph", graph, "sandbox", id)
}

func (s *Service) level3() error {
	if s.sandboxes == nil {
		return errdefs.Unavailable("this server runs one-call runs only: it has no host for long-lived sandboxes")
	}
	return nil
}

// CreateSandbox starts a long-lived sandbox (POST /v1/sandboxes without run) and answers
// 201 with its record. With an Idempotency-Key a retry answers the same sandbox.
func (s *Service) CreateSandbox(ctx context.Context, c Caller, req CreateRequest, idemKey, reqHash string) (Response, error) {
	if err := s.level3(); err != nil {
		return Response{}, err
	}
	if err := idempotency.Check(idemKey); err != nil {
		return Response{}, err
	}
	// A replay needs no valid request: the answer is stored.
	if resp, ok, err := s.keys().Stored(ctx, c.Graph, idemKey, reqHash); ok || err != nil {
		return resp, err
	}
	sb, env, files, err := s.planSandbox(ctx, c, req)
	if err != nil {
		return Response{}, err
	}
	return s.keys().Do(ctx, c.Graph, idemKey, RouteCreateSandbox, reqHash, func(ctx context.Context) (Response, error) {
		if err := s.begin(); err != nil {
			return Response{}, err
		}
		defer s.runs.Done()
		sb.CreatedAt = s.now()
		exp := sb.CreatedAt.Add(time.Duration(req.ExpiresInSeconds) * time.Second)
		if req.ExpiresInSeconds == 0 {
			exp = sb.CreatedAt.Add(s.cfg.DefaultLifetime)
		}
		sb.ExpiresAt = &exp
		// The sandbox starts before its record exists: a warm pool hands over a started
		// sandbox under its own id (host.SandboxSpec.Warm), and the record takes that id, so
		// that the driver knows the sandbox by its record's id for stop, resume and reaping.
		// A graph at its cap starts nothing (the check is repeated with the insert, which
		// settles a race by destroying the sandbox). A crash before the insert leaves a
		// driver sandbox that no record claims, which Recover reaps.
		if err := s.checkCap(ctx, s.st, c.Graph); err != nil {
			return Response{}, err
		}
		live, err := s.sandboxes.StartSandbox(ctx, host.SandboxSpec{ID: sb.ID, Image: s.image.Rootfs, Limits: runtimeLimits(sb.Limits),
			Runtime: sb.Isolation, Create: true, Warm: true, Files: files})
		if err != nil {
			now := s.now()
			sb.Status, sb.EndReason, sb.EndedAt, sb.Error = store.SandboxFailed, store.EndFailed, &now, err.Error()
			if cerr := s.st.CreateSandbox(context.WithoutCancel(ctx), sb); cerr != nil {
				s.log.Error("recording a failed sandbox", "sandbox", sb.ID, "err", cerr)
			}
			s.log.Warn("sandbox failed to start", "graph", sb.Graph, "sandbox", sb.ID, "err", err)
			return Response{}, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not start: %w", sb.ID, err))
		}
		sb.ID = live.ID
		if err := s.admit(ctx, &sb, live, env, exp); err != nil {
			return Response{}, err
		}
		s.log.Info("sandbox started", "graph", sb.Graph, "sandbox", sb.ID, "expires_at", exp)
		return idempotency.JSON(idempotency.Created, sb)
	})
}

// planSandbox validates a create request: its base or template, limits, lifetime, env and
// metadata, and the template's Files.
func (s *Service) planSandbox(ctx context.Context, c Caller, req CreateRequest) (store.Sandbox, map[string]string, []host.WorkspaceFile, error) {
	var zero store.Sandbox
	if req.TimeoutMs != 0 {
		return zero, nil, nil, errdefs.InvalidArgument("timeout_ms is for runs and commands; a sandbox has expires_in_seconds")
	}
	if req.ExpiresInSeconds < 0 {
		return zero, nil, nil, errdefs.InvalidArgument("expires_in_seconds must not be negative")
	}
	if d := time.Duration(req.ExpiresInSeconds) * time.Second; d > s.cfg.MaxLifetime || req.ExpiresInSeconds > int64(s.cfg.MaxLifetime/time.Second) {
		return zero, nil, nil, errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeLimitExceeded,
			"expires_in_seconds %d is above this server's cap of %d", req.ExpiresInSeconds, int64(s.cfg.MaxLifetime/time.Second))
	}
	baseName := req.Base
	var tpl *store.Template
	if req.Template != "" {
		if b, ok := bases.Lookup(req.Template); ok {
			baseName = b.Name
		} else {
			t, err := s.resolveTemplate(ctx, c.Graph, req.Template)
			if err != nil {
				return zero, nil, nil, err
			}
			if req.Base != "" {
				if b, ok := bases.Lookup(req.Base); !ok || b.Name != t.Base {
					return zero, nil, nil, errdefs.InvalidArgument("template %s runs on %s; drop base from the call", req.Template, t.Base)
				}
			}
			tpl, baseName = &t, t.Base
		}
	}
	if baseName == "" {
		baseName = "lbb/python"
	}
	base, ok := bases.Lookup(baseName)
	if !ok {
		return zero, nil, nil, errdefs.InvalidArgument("unknown base %q: want lbb/python, lbb/node or lbb/shell", baseName)
	}
	var tplLimits *store.Limits
	var tplIsolation string
	var ref *store.TemplateRef
	var files []host.WorkspaceFile
	if tpl != nil {
		tplLimits, tplIsolation = &tpl.Limits, tpl.Isolation
		ref = &store.TemplateRef{ID: tpl.ID, Name: tpl.Name, Version: tpl.Version}
		var err error
		if files, err = s.templateFiles(ctx, c.Graph, tpl.Files); err != nil {
			return zero, nil, nil, err
		}
	}
	limits, err := s.limits(tplLimits, req.Limits)
	if err != nil {
		return zero, nil, nil, err
	}
	isolation, err := s.resolveIsolation(req.Isolation, tplIsolation)
	if err != nil {
		return zero, nil, nil, err
	}
	if err := validEnv(req.Env); err != nil {
		return zero, nil, nil, err
	}
	if err := validMetadata(req.Metadata); err != nil {
		return zero, nil, nil, err
	}
	origin := store.Origin{Key: c.Key.ID}
	if req.Origin != nil {
		origin.Workflow, origin.Run, origin.Step = req.Origin.Workflow, req.Origin.Run, req.Origin.Step
	}
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	// The id is the one a cold start uses; a sandbox handed over by the warm pool keeps the
	// pool's (CreateSandbox).
	return store.Sandbox{ID: ids.New(ids.Sandbox), Graph: c.Graph, Status: store.SandboxStarting, Base: base.Name, Image: s.image.ID,
		Template: ref, Limits: limits, Isolation: isolation, EnvNames: sortedKeys(env), Metadata: req.Metadata, Origin: origin}, env, files, nil
}

// admit records a started sandbox as running, checking the graph's cap again in the same
// transaction, and holds it live with its expiry. A sandbox that gets no record is
// destroyed.
func (s *Service) admit(ctx context.Context, sb *store.Sandbox, live *host.Live, env map[string]string, exp time.Time) error {
	at := live.StartedAt.UTC().Truncate(time.Millisecond)
	sb.Status, sb.StartedAt = store.SandboxRunning, &at
	err := s.st.WithTx(ctx, func(q store.Queries) error {
		if err := s.checkCap(ctx, q, sb.Graph); err != nil {
			return err
		}
		return q.CreateSandbox(ctx, *sb)
	})
	if err != nil {
		live.Close()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := s.sandboxes.DestroySandbox(dctx, live.ID); derr != nil {
			s.log.Error("destroying a sandbox that got no record", "sandbox", live.ID, "err", derr)
		}
		return err
	}
	ls := &liveSandbox{id: sb.ID, graph: sb.Graph, env: env, cmds: map[string]*liveCommand{}}
	ls.ops.Lock()
	defer ls.ops.Unlock()
	s.addLive(ls)
	s.setRunning(ls, live)
	s.scheduleExpiry(ls, exp)
	return nil
}

func validEnv(env map[string]string) error {
	for k := range env {
		if !validEnvName(k) {
			return errdefs.InvalidArgument("env name %q is not a valid variable name", k)
		}
	}
	return nil
}

func validMetadata(md map[string]string) error {
	if len(md) > 64 {
		return errdefs.InvalidArgument("metadata has %d labels; at most 64", len(md))
	}
	for k, v := range md {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return errdefs.InvalidArgument("metadata label %q: keys are 1 to 128 bytes, values at most 1024", k)
		}
	}
	return nil
}

func runtimeLimits(l store.Limits) runtime.Limits {
	return runtime.Limits{MemoryMiB: l.MemoryMiB, CPUs: l.CPUs, Pids: l.Pids, DiskMiB: l.DiskMiB}
}

// checkCap refuses a sandbox beyond the graph's cap of running ones.
func (s *Service) checkCap(ctx context.Context, q store.Queries, graph string) error {
	n, err := q.CountActiveSandboxes(ctx, graph)
	if err != nil {
		return err
	}
	if n >= s.cfg.MaxRunningPerGraph {
		return errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeTooManySandboxes,
			"graph %s has %d running sandboxes, the most it may have; stop or delete one, or retry later", graph, n)
	}
	return nil
}

// setRunning binds a started sandbox to its record in memory and watches it: a sandbox whose
// init dies by itself is stopped (disk kept) and its record says why.
func (s *Service) setRunning(ls *liveSandbox, live *host.Live) {
	ctx, cancel := context.WithCancelCause(s.runCtx)
	ls.mu.Lock()
	ls.live, ls.ctx, ls.cancel = live, ctx, cancel
	ls.mu.Unlock()
	go func() {
		select {
		case <-live.Sandbox.Done():
		case <-ctx.Done():
			return
		}
		ls.mu.Lock()
		same := ls.live == live
		ls.mu.Unlock()
		if !same || ctx.Err() != nil {
			return
		}
		s.log.Warn("sandbox ended by itself; stopping it", "graph", ls.graph, "sandbox", ls.id)
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ls.ops.Lock()
		defer ls.ops.Unlock()
		ls.mu.Lock()
		same = ls.live == live
		ls.mu.Unlock()
		if !same {
			return
		}
		sb, err := s.st.GetSandbox(sctx, ls.graph, ls.id)
		if err != nil {
			s.log.Error("stopping a dead sandbox", "sandbox", ls.id, "err", err)
			return
		}
		s.stopLive(sctx, ls, &sb, errors.New("the sandbox's init process exited"))
		sb.Status, sb.EndReason, sb.Error = store.SandboxStopped, store.EndFailed, "the sandbox's init process exited (out of memory?); resume starts it again"
		if err := s.st.UpdateSandbox(sctx, sb); err != nil {
			s.log.Error("recording a dead sandbox", "sandbox", ls.id, "err", err)
		}
	}()
}

// stopLive ends a running sandbox's commands and processes and keeps its disk; it adds the
// run's usage to sb. The caller holds ls.ops.
func (s *Service) stopLive(ctx context.Context, ls *liveSandbox, sb *store.Sandbox, cause error) {
	ls.mu.Lock()
	live, cancel := ls.live, ls.cancel
	cmds := make([]*liveCommand, 0, len(ls.cmds))
	for _, c := range ls.cmds {
		cmds = append(cmds, c)
	}
	ls.mu.Unlock()
	if live == nil {
		return
	}
	usage := live.Usage(ctx)
	if cancel != nil {
		cancel(cause)
	}
	if err := s.sandboxes.StopSandbox(ctx, ls.id); err != nil {
		s.log.Error("stopping a sandbox", "sandbox", ls.id, "err", err)
		sb.Error = err.Error()
	}
	live.Close()
	// The commands end with their sandbox; wait until each has its record.
	for _, c := range cmds {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			s.log.Error("a command did not end with its sandbox", "sandbox", ls.id, "command", c.id)
		}
	}
	ls.mu.Lock()
	ls.live, ls.ctx, ls.cancel = nil, nil, nil
	ls.usage.VCPUMs += usage.VCPUMs
	ls.usage.GiBMs += usage.GiBMs
	sb.Usage = ls.usage
	ls.mu.Unlock()
}

// sandboxFor reads a long-lived sandbox's record and its state in memory.
func (s *Service) sandboxFor(ctx context.Context, graph, id string) (store.Sandbox, *liveSandbox, error) {
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return sb, nil, err
	}
	ls := s.lookupLive(id)
	if ls != nil && ls.graph != graph {
		return sb, nil, errdefs.NotFound("sandbox %s not found", id)
	}
	return sb, ls, nil
}

func ended(sb store.Sandbox) bool {
	return sb.Status == store.SandboxDestroyed || sb.Status == store.SandboxFailed
}

// heldSandbox reads a long-lived sandbox that this server holds, or says why it cannot be
// changed (one-call, ended, not held).
func (s *Service) heldSandbox(ctx context.Context, graph, id, what string) (store.Sandbox, *liveSandbox, error) {
	sb, ls, err := s.sandboxFor(ctx, graph, id)
	if err != nil {
		return sb, nil, err
	}
	if sb.OneCall {
		return sb, nil, errdefs.Conflict("sandbox %s is a one-call run's: it cannot %s", id, what)
	}
	if ended(sb) {
		return sb, nil, errdefs.Conflict("sandbox %s is %s", id, sb.Status)
	}
	if ls == nil {
		return sb, nil, errdefs.Conflict("sandbox %s is %s and not held by this server", id, sb.Status)
	}
	return sb, ls, nil
}

// StopSandbox ends a sandbox's processes and keeps its disk. Stopping a stopped sandbox is
// no error.
func (s *Service) StopSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	if err := s.level3(); err != nil {
		return store.Sandbox{}, err
	}
	sb, ls, err := s.heldSandbox(ctx, graph, id, "stop")
	if err != nil {
		return sb, err
	}
	ls.ops.Lock()
	defer ls.ops.Unlock()
	if sb, err = s.st.GetSandbox(ctx, graph, id); err != nil || sb.Status != store.SandboxRunning && sb.Status != store.SandboxPaused {
		if err == nil && ended(sb) {
			err = errdefs.Conflict("sandbox %s is %s", id, sb.Status)
		}
		return sb, err
	}
	wctx := context.WithoutCancel(ctx)
	if sb.Status == store.SandboxPaused {
		// A frozen one is thawed to end; a checkpoint (its memory) is dropped.
		s.unpause(wctx, ls, &sb)
		if err := s.sandboxes.StopSandbox(wctx, id); err != nil {
			sb.Error = err.Error()
		}
	}
	s.stopLive(wctx, ls, &sb, errors.New("the sandbox was stopped"))
	sb.Status, sb.EndReason = store.SandboxStopped, store.EndStopped
	if err := s.st.UpdateSandbox(wctx, sb); err != nil {
		return sb, err
	}
	s.log.Info("sandbox stopped", "graph", graph, "sandbox", id)
	return sb, nil
}

// ResumeSandbox starts a stopped sandbox again on its disk. Resuming a running sandbox is no
// error.
func (s *Service) ResumeSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	if err := s.level3(); err != nil {
		return store.Sandbox{}, err
	}
	sb, ls, err := s.heldSandbox(ctx, graph, id, "resume")
	if err != nil {
		return sb, err
	}
	if err := s.begin(); err != nil {
		return sb, err
	}
	defer s.runs.Done()
	ls.ops.Lock()
	defer ls.ops.Unlock()
	wctx := context.WithoutCancel(ctx)
	var prev store.Sandbox
	err = s.st.WithTx(wctx, func(q store.Queries) error {
		cur, err := q.GetSandbox(wctx, graph, id)
		if err != nil {
			return err
		}
		sb, prev = cur, cur
		if cur.Status != store.SandboxStopped && cur.Status != store.SandboxPaused {
			return nil
		}
		if err := s.checkCap(wctx, q, graph); err != nil {
			return err
		}
		sb.Status = store.SandboxStarting
		return q.UpdateSandbox(wctx, sb)
	})
	if err != nil || prev.Status != store.SandboxStopped && prev.Status != store.SandboxPaused {
		if err == nil && ended(sb) {
			err = errdefs.Conflict("sandbox %s is %s", id, sb.Status)
		}
		return sb, err
	}
	if prev.Status == store.SandboxPaused {
		return s.resumePaused(wctx, ls, sb, prev)
	}
	live, err := s.sandboxes.StartSandbox(wctx, host.SandboxSpec{ID: id, Image: s.image.Rootfs, Limits: runtimeLimits(sb.Limits)})
	if err != nil {
		prev.Error = "resume failed: " + err.Error()
		if uerr := s.st.UpdateSandbox(wctx, prev); uerr != nil {
			s.log.Error("recording a failed resume", "sandbox", id, "err", uerr)
		}
		return prev, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not resume: %w", id, err))
	}
	s.setRunning(ls, live)
	sb.Status, sb.EndReason, sb.Error = store.SandboxRunning, "", ""
	if err := s.st.UpdateSandbox(wctx, sb); err != nil {
		return sb, err
	}
	s.log.Info("sandbox resumed", "graph", graph, "sandbox", id)
	return sb, nil
}

// DeleteSandbox destroys a sandbox and its disk; its record is kept (destroyed, end reason
// deleted). Deleting a destroyed sandbox answers its record.
func (s *Service) DeleteSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return sb, err
	}
	if ended(sb) {
		return sb, nil
	}
	if sb.OneCall {
		return sb, errdefs.Conflict("sandbox %s is running a one-call run; it ends with its run", id)
	}
	if err := s.level3(); err != nil {
		return sb, err
	}
	return s.endSandbox(context.WithoutCancel(ctx), graph, id, store.EndDeleted)
}

// endSandbox destroys a long-lived sandbox for reason (deleted, expired).
func (s *Service) endSandbox(ctx context.Context, graph, id, reason string) (store.Sandbox, error) {
	ls := s.lookupLive(id)
	if ls != nil {
		if ls.graph != graph {
			return store.Sandbox{}, errdefs.NotFound("sandbox %s not found", id)
		}
		ls.ops.Lock()
		defer ls.ops.Unlock()
	}
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return sb, err
	}
	if ended(sb) {
		return sb, nil
	}
	if ls != nil {
		cause := errors.New("the sandbox was deleted")
		if reason == store.EndExpired {
			cause = errors.New("the sandbox expired")
		}
		s.unpause(ctx, ls, &sb)
		s.stopLive(ctx, ls, &sb, cause)
	}
	if err := s.dropSnapshots(ctx, graph, id); err != nil {
		s.log.Error("removing a sandbox's snapshots", "sandbox", id, "err", err)
	}
	if err := s.sandboxes.DestroySandbox(ctx, id); err != nil {
		sb.Error = err.Error()
	}
	s.removeLive(id)
	now := s.now()
	sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, reason, &now
	if err := s.st.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	s.log.Info("sandbox destroyed", "graph", graph, "sandbox", id, "reason", reason)
	return sb, nil
}

// stopAllLive stops every running long-lived sandbox (their disks stay) for reason: the
// server is shutting down.
func (s *Service) stopAllLive(ctx context.Context, reason string) {
	s.lmu.Lock()
	all := make([]*liveSandbox, 0, len(s.lives))
	for _, ls := range s.lives {
		all = append(all, ls)
	}
	s.lmu.Unlock()
	var wg sync.WaitGroup
	for _, ls := range all {
		ls.mu.Lock()
		held := ls.live != nil || ls.frozen != nil // a frozen one ends as a running one does
		ls.mu.Unlock()
		if !held {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls.ops.Lock()
			defer ls.ops.Unlock()
			sb, err := s.st.GetSandbox(ctx, ls.graph, ls.id)
			if err != nil || sb.Status != store.SandboxRunning && sb.PauseMode != store.PauseFreeze {
				return
			}
			if sb.Status == store.SandboxPaused {
				s.unpause(ctx, ls, &sb)
				if err := s.sandboxes.StopSandbox(ctx, sb.ID); err != nil {
					sb.Error = err.Error()
				}
			}
			s.stopLive(ctx, ls, &sb, errors.New("the server shut down"))
			sb.Status, sb.EndReason = store.SandboxStopped, reason
			if err := s.st.UpdateSandbox(ctx, sb); err != nil {
				s.log.Error("recording a stopped sandbox", "sandbox", ls.id, "err", err)
			}
			s.log.Info("sandbox stopped for shutdown", "graph", ls.graph, "sandbox", ls.id)
		}()
	}
	wg.Wait()
}

// recoverLongLived runs at start: a long-lived sandbox that was running is stopped (its
// disk kept, end reason server_restart), one that was starting failed, and one whose expiry
// passed is destroyed. Those that remain are held again, with their expiry timers.
func (s *Service) recoverLongLived(ctx context.Context, rec *Recovered) error {
	if s.sandboxes == nil {
		return nil
	}
	all, err := s.st.ListSandboxesByStatus(ctx, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped)
	if err != nil {
		return err
	}
	now := s.now()
	for _, sb := range all {
		if sb.OneCall {
			continue
		}
		switch {
		case sb.ExpiresAt != nil && !sb.ExpiresAt.After(now):
			s.unpause(ctx, nil, &sb)
			if err := s.sandboxes.DestroySandbox(ctx, sb.ID); err != nil {
				sb.Error = err.Error()
			}
			if err := s.dropSnapshots(ctx, sb.Graph, sb.ID); err != nil {
				s.log.Error("removing a sandbox's snapshots", "sandbox", sb.ID, "err", err)
			}
			sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, store.EndExpired, &now
			rec.Expired = append(rec.Expired, sb.ID)
		case sb.Status == store.SandboxStarting && sb.PauseMode != store.PauseCheckpoint:
			if err := s.sandboxes.DestroySandbox(ctx, sb.ID); err != nil {
				sb.Error = err.Error()
			}
			sb.Status, sb.EndReason, sb.EndedAt = store.SandboxFailed, store.EndLost, &now
			if sb.Error == "" {
				sb.Error = "the server stopped while the sandbox was starting"
			}
			rec.Sandboxes = append(rec.Sandboxes, sb.ID)
		default:
			if sb.PauseMode == store.PauseCheckpoint && sb.Status != store.SandboxStopped {
				// Saved with its memory (also when a resume was cut off): it stays paused,
				// and resume restores it.
				sb.Status = store.SandboxPaused
			} else if sb.Status != store.SandboxStopped {
				s.unpause(ctx, nil, &sb) // a frozen one ends like a running one
				if err := s.sandboxes.StopSandbox(ctx, sb.ID); err != nil {
					sb.Error = err.Error()
				}
				sb.Status, sb.EndReason = store.SandboxStopped, store.EndServerRestart
				rec.Stopped = append(rec.Stopped, sb.ID)
			}
			ls := &liveSandbox{id: sb.ID, graph: sb.Graph, cmds: map[string]*liveCommand{}, usage: sb.Usage}
			s.addLive(ls)
			if sb.ExpiresAt != nil {
				s.scheduleExpiry(ls, *sb.ExpiresAt)
			}
		}
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			return fmt.Errorf("recover: %s: %w", sb.ID, err)
		}
		s.log.Warn("sandbox recovered", "graph", sb.Graph, "sandbox", sb.ID, "status", sb.Status, "end_reason", sb.EndReason)
	}
	return nil
}

// expireDue ends the held sandboxes whose expiry passed (a backstop for their timers).
func (s *Service) expireDue() {
	s.lmu.Lock()
	var due []*liveSandbox
	for _, ls := range s.lives {
		due = append(due, ls)
	}
	s.lmu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := s.now()
	for _, ls := range due {
		sb, err := s.st.GetSandbox(ctx, ls.graph, ls.id)
		if err == nil && sb.ExpiresAt != nil && sb.ExpiresAt.Before(now.Add(-5*time.Second)) && !ended(sb) {
			s.expire(ls.graph, ls.id)
		}
	}
}

func marshal(v any) (json.RawMessage, error) { return json.Marshal(v) }
