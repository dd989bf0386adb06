package control

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/bases"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// Long-lived sandboxes (Level 3): created without a run, they live until deleted or until
// they expire. Stop ends their processes and keeps their disk; resume starts them again on
// the same workspace. The control plane keeps their records and knows which it holds; the
// host agent holds each one's live state, its expiry timer, its env (whose values are never
// stored) and the commands running in it.
//
// After a crash or a restart, a sandbox that was running is stopped with its disk kept
// (end_reason server_restart) so that resume brings its workspace back; the commands that
// ran in it are lost. Its env values were only in memory: a resumed sandbox runs without
// them (commands can pass env of their own). A sandbox whose expiry passed while the server
// was down is destroyed at start.

// heldSandbox is a long-lived sandbox this control plane holds (it has not ended). ops
// serializes the changes of its record (create, stop, resume, pause, snapshot, delete,
// expire); the host agent holds its live state.
type heldSandbox struct {
	id, graph string
	ops       sync.Mutex
}

func (s *Service) lookupHeld(id string) *heldSandbox {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.held[id]
}

func (s *Service) addHeld(id, graph string) *heldSandbox {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	hs := &heldSandbox{id: id, graph: graph}
	s.held[id] = hs
	return hs
}

func (s *Service) removeHeld(id string) {
	s.lmu.Lock()
	delete(s.held, id)
	s.lmu.Unlock()
	s.forgetContexts(id)
}

// watchEvents follows the host agent's events until Shutdown: a sandbox whose init died is
// recorded stopped, one whose expiry passed is ended.
func (s *Service) watchEvents() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopEvents = cancel
	if s.host == nil {
		return
	}
	go func() {
		for ctx.Err() == nil {
			ch, err := s.host.Events(ctx)
			if err != nil {
				s.log.Warn("following the host agent's events", "err", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				continue
			}
			for e := range ch {
				go s.onEvent(e)
			}
		}
	}()
}

func (s *Service) onEvent(e hostagent.Event) {
	if e.Kind == hostagent.EventEgressRefused {
		s.onEgressRefused(e)
		return
	}
	hs := s.lookupHeld(e.Sandbox)
	if hs == nil {
		return
	}
	switch e.Kind {
	case hostagent.EventExpired:
		s.expire(hs.graph, hs.id)
	case hostagent.EventHostLost:
		s.hostLost(hs.graph, hs.id, e.Error)
	case hostagent.EventDied:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hs.ops.Lock()
		defer hs.ops.Unlock()
		sb, err := s.st.GetSandbox(ctx, hs.graph, hs.id)
		if err != nil || sb.Status != store.SandboxRunning {
			return
		}
		s.waitCommands(hs.id)
		addUsage(&sb, e.Usage)
		replaced, failed := s.archiveWorkspace(ctx, &sb)
		sb.Status, sb.EndReason, sb.Error = store.SandboxStopped, store.EndFailed, withError(e.Error, failed)
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			s.log.Error("recording a dead sandbox", "sandbox", hs.id, "err", err)
			return
		}
		s.dropArchive(ctx, replaced)
		s.log.Warn("sandbox ended by itself; stopped", "graph", hs.graph, "sandbox", hs.id)
	}
}

// hostLost ends a sandbox whose host was lost (internal/fleet) when it was live there: its
// processes are gone, its commands end lost (their Wait fails), never run again. A stopped
// one, or one paused with its memory saved, keeps its record: its disk is on the host, which
// may come back.
func (s *Service) hostLost(graph, id, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil || ended(sb) || sb.Status == store.SandboxStopped || sb.PauseMode == store.PauseCheckpoint {
		return
	}
	sb, err = s.endSandbox(ctx, graph, id, store.EndHostLost)
	if err != nil {
		s.log.Error("ending a sandbox whose host was lost", "graph", graph, "sandbox", id, "err", err)
		return
	}
	if sb.Error == "" {
		sb.Error = why
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			s.log.Error("recording a sandbox whose host was lost", "sandbox", id, "err", err)
		}
	}
	s.log.Warn("sandbox ended: its host was lost", "graph", graph, "sandbox", id, "why", why)
}

// addUsage folds a life's usage into the sandbox's.
func addUsage(sb *store.Sandbox, u store.Usage) {
	sb.Usage.VCPUMs += u.VCPUMs
	sb.Usage.GiBMs += u.GiBMs
	if u.Egress != nil {
		if sb.Usage.Egress == nil {
			sb.Usage.Egress = &store.EgressUsage{}
		}
		sb.Usage.Egress.Add(u.Egress)
	}
}

// commandsRunning counts the commands running in a sandbox.
func (s *Service) commandsRunning(sandboxID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, inf := range s.inflight {
		if inf.sandbox == sandboxID {
			n++
		}
	}
	return n
}

// waitCommands waits until the commands that ran in a sandbox that ended have their records.
func (s *Service) waitCommands(sandboxID string) {
	s.mu.Lock()
	var dones []chan struct{}
	for _, inf := range s.inflight {
		if inf.sandbox == sandboxID {
			dones = append(dones, inf.done)
		}
	}
	s.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-time.After(30 * time.Second):
			s.log.Error("a command did not end with its sandbox", "sandbox", sandboxID)
		}
	}
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

// CreateSandbox starts a long-lived sandbox (POST /v1/sandboxes without run) and answers
// 201 with its record. With an Idempotency-Key a retry answers the same sandbox.
func (s *Service) CreateSandbox(ctx context.Context, c Caller, req CreateRequest, idemKey, reqHash string) (Response, error) {
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
	// The key is written with the sandbox's record, in one commit (keys().DoUnreserved): a
	// concurrent call with the same key that commits first makes this one destroy the
	// sandbox it started and answer as a replay. A session's create reserves it first, since
	// its answer may be another sandbox's record (openSession).
	do := s.keys().DoUnreserved
	if req.Session != "" {
		do = func(ctx context.Context, graph, key, route, hash string, work func(context.Context, bool) (Response, error)) (Response, error) {
			return s.keys().Do(ctx, graph, key, route, hash, func(ctx context.Context) (Response, error) { return work(ctx, key != "") })
		}
	}
	return do(ctx, c.Graph, idemKey, RouteCreateSandbox, reqHash, func(ctx context.Context, reserved bool) (Response, error) {
		if req.Session != "" {
			defer s.sessions.Lock(c.Graph + "\x00" + req.Session)()
			if resp, ok, err := s.openSession(ctx, req, sb); ok || err != nil {
				return resp, err
			}
		}
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
		// sandbox under its own id (hostagent.CreateRequest.Warm), and the record takes that id, so
		// that the driver knows the sandbox by its record's id for stop, resume and reaping.
		// A graph at its cap starts nothing (the check is repeated with the insert, which
		// settles a race by destroying the sandbox). A crash before the insert leaves a
		// driver sandbox that no record claims, which Recover reaps.
		if err := s.checkCap(ctx, s.st, c.Graph, true, false); err != nil {
			return Response{}, err
		}
		if err := s.chargeRun(ctx, c.Key); err != nil {
			return Response{}, err
		}
		if err := s.checkSpend(ctx, c.Key); err != nil {
			return Response{}, err
		}
		endClaim := timing.Start(ctx, "claim")
		started, err := s.host.Create(ctx, hostagent.CreateRequest{ID: sb.ID, Limits: runtimeLimits(sb.Limits),
			Runtime: sb.Isolation, Layer: sb.Layer, Warm: true, Files: files, Env: env, Egress: hostEgress(sb), Git: sb.Git,
			Kernel: warmKernel(sb.Base, env)})
		endClaim()
		if err != nil {
			now := s.now()
			sb.Status, sb.EndReason, sb.EndedAt, sb.Error = store.SandboxFailed, store.EndFailed, &now, err.Error()
			if cerr := s.st.CreateSandbox(context.WithoutCancel(ctx), sb); cerr != nil {
				s.log.Error("recording a failed sandbox", "sandbox", sb.ID, "err", cerr)
			}
			s.log.Warn("sandbox failed to start", "graph", sb.Graph, "sandbox", sb.ID, "err", err)
			return Response{}, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not start: %w", sb.ID, err))
		}
		sb.ID, sb.Host = started.ID, s.hostOf(started.ID)
		if sb.API != nil {
			if err := s.grant(ctx, c.Key.ID, &sb, 0); err != nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				if _, derr := s.host.Destroy(dctx, sb.ID); derr != nil {
					s.log.Error("destroying a sandbox that got no grant", "sandbox", sb.ID, "err", derr)
				}
				return Response{}, err
			}
		}
		// The record, the key's answer and the call's audit entry are one commit: the answer
		// waits for one durable write after the claim instead of three.
		audit := pendingAudit(ctx)
		endAdmit := timing.Start(ctx, "admit")
		err = s.admit(ctx, &sb, started, exp, func(q store.Queries) error {
			return s.finishCreate(ctx, q, c.Graph, idemKey, reqHash, reserved, sb, audit)
		})
		endAdmit()
		if err != nil {
			audit.Untake() // its transaction did not commit: the API edge writes it
			s.revokeGrant(ctx, sb)
			return Response{}, s.sessionTaken(ctx, sb.Graph, sb.Session, err)
		}
		s.log.Info("sandbox started", "graph", sb.Graph, "sandbox", sb.ID, "expires_at", exp)
		if b, _ := bases.Lookup(sb.Base); b.Context != "" {
			s.prestartContext(c.Graph, sb.ID, b.Context, started.Kernel)
		}
		return idempotency.JSON(idempotency.Created, sb)
	})
}

// finishCreate, in the transaction q that inserts sb's record, keeps the create's answer
// under its idempotency key (when it has one): it finishes the key idempotency.Keys.Do
// reserved, or writes it finished when it was not reserved (Keys.DoUnreserved; a
// concurrent call's key makes the insert, and so the transaction, fail with a Conflict). It writes the
// call's audit entry too, so that none takes a commit of its own. When that transaction
// fails, the caller hands the audit entry back (PendingAudit.Untake).
func (s *Service) finishCreate(ctx context.Context, q store.Queries, graph, idemKey, reqHash string, reserved bool, sb store.Sandbox, audit *PendingAudit) error {
	resp, err := idempotency.JSON(idempotency.Created, sb)
	if err != nil {
		return err
	}
	now := s.now()
	switch {
	case idemKey != "" && reserved:
		r, err := q.GetIdempotency(ctx, graph, idemKey)
		if err != nil {
			return err
		}
		return s.finishKey(ctx, q, r, resp, &now, audit, sb.ID)
	case idemKey != "":
		// The insert fails with a Conflict when the key is taken (a unique key).
		if err := q.CreateIdempotency(ctx, idempotency.Finished(graph, idemKey, RouteCreateSandbox, reqHash, resp, now)); err != nil {
			return err
		}
	}
	return s.auditCreate(ctx, q, audit, resp, sb.ID, now)
}

// auditCreate writes a create's pending audit entry in q.
func (s *Service) auditCreate(ctx context.Context, q store.Queries, audit *PendingAudit, resp Response, target string, now time.Time) error {
	if e, ok := audit.Take(); ok {
		e.Status, e.Target, e.At = int(resp.Outcome), target, now
		return q.AppendAudit(ctx, e)
	}
	return nil
}

// warmKernel is the code context interpreter a sandbox of base may take running from the warm
// pool: its base's context's, unless the sandbox has an env of its own (which the pool's
// interpreter, started before, lacks).
func warmKernel(base string, env map[string]string) string {
	if b, _ := bases.Lookup(base); len(env) == 0 {
		return b.Context
	}
	return ""
}

// planSandbox validates a create request: its base or template, limits, lifetime, env and
// metadata, and the template's Files.
func (s *Service) planSandbox(ctx context.Context, c Caller, req CreateRequest) (store.Sandbox, map[string]string, []hostagent.File, error) {
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
			t, err := s.usableTemplate(ctx, c.Graph, req.Template, 0)
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
	var files []hostagent.File
	if tpl != nil {
		tplLimits, tplIsolation = &tpl.Limits, tpl.Isolation
		ref = &store.TemplateRef{ID: tpl.ID, Name: tpl.Name, Version: tpl.Version}
		var err error
		if files, err = s.templateFiles(ctx, c.Graph, tpl.Files); err != nil {
			return zero, nil, nil, err
		}
	}
	// Defaults, then the template's limits, the size's, and the call's, each field by field.
	sized, size, err := sizeLimits(req.Size)
	if err != nil {
		return zero, nil, nil, err
	}
	limits, err := s.limits(tplLimits, sized, req.Limits)
	if err != nil {
		return zero, nil, nil, err
	}
	if err := checkSession(req.Session); err != nil {
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
	var tplEgress *store.Egress
	if tpl != nil {
		tplEgress = tpl.Egress
	}
	eg, err := s.resolveEgress(req.Egress, tplEgress)
	if err != nil {
		return zero, nil, nil, err
	}
	grant, err := checkGrant(c.Key, req.API)
	if err != nil {
		return zero, nil, nil, err
	}
	if err := checkGit(req.Git); err != nil {
		return zero, nil, nil, err
	}
	origin := c.origin(req.Origin)
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	// The id is the one a cold start uses; a sandbox handed over by the warm pool keeps the
	// pool's (CreateSandbox).
	return store.Sandbox{ID: ids.New(ids.Sandbox), Graph: c.Graph, Status: store.SandboxStarting, Base: base.Name, Image: s.image.ID,
		Template: ref, Limits: limits, Isolation: isolation, EnvNames: sortedKeys(env), Metadata: req.Metadata, Origin: origin,
		Egress: eg, API: grant, Git: req.Git, Layer: layerOf(tpl), Session: req.Session, Size: size}, env, files, nil
}

// admit records a started sandbox as running, checking the graph's cap again in the same
// transaction, holds it and arms its expiry. A sandbox that gets no record is destroyed.
//
// also, when not nil, runs in that transaction after the insert (finishCreate).
func (s *Service) admit(ctx context.Context, sb *store.Sandbox, started hostagent.Sandbox, exp time.Time, also func(q store.Queries) error) error {
	at := started.StartedAt.UTC().Truncate(time.Millisecond)
	sb.Status, sb.StartedAt = store.SandboxRunning, &at
	err := s.st.WithTx(ctx, func(q store.Queries) error {
		if err := s.checkCap(ctx, q, sb.Graph, true, false); err != nil {
			return err
		}
		if err := q.CreateSandbox(ctx, *sb); err != nil {
			return err
		}
		if also != nil {
			return also(q)
		}
		return nil
	})
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, derr := s.host.Destroy(dctx, started.ID); derr != nil {
			s.log.Error("destroying a sandbox that got no record", "sandbox", started.ID, "err", derr)
		}
		return err
	}
	s.addHeld(sb.ID, sb.Graph)
	if err := s.host.SetExpiry(ctx, sb.ID, exp); err != nil {
		s.log.Error("arming a sandbox's expiry", "sandbox", sb.ID, "err", err)
	}
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

// sandboxFor reads a long-lived sandbox's record and whether this server holds it.
func (s *Service) sandboxFor(ctx context.Context, graph, id string) (store.Sandbox, *heldSandbox, error) {
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return sb, nil, err
	}
	hs := s.lookupHeld(id)
	if hs != nil && hs.graph != graph {
		return sb, nil, errdefs.NotFound("sandbox %s not found", id)
	}
	return sb, hs, nil
}

func ended(sb store.Sandbox) bool {
	return sb.Status == store.SandboxDestroyed || sb.Status == store.SandboxFailed
}

// heldSandbox reads a long-lived sandbox that this server holds, or says why it cannot be
// changed (one-call, ended, not held).
func (s *Service) heldSandbox(ctx context.Context, graph, id, what string) (store.Sandbox, *heldSandbox, error) {
	sb, hs, err := s.sandboxFor(ctx, graph, id)
	if err != nil {
		return sb, nil, err
	}
	if sb.OneCall {
		return sb, nil, errdefs.Conflict("sandbox %s is a one-call run's: it cannot %s", id, what)
	}
	if ended(sb) {
		return sb, nil, errdefs.Conflict("sandbox %s is %s", id, sb.Status)
	}
	if hs == nil {
		return sb, nil, errdefs.Conflict("sandbox %s is %s and not held by this server", id, sb.Status)
	}
	return sb, hs, nil
}

// stopHost stops a sandbox on the host agent (a paused one is thawed or its checkpoint
// dropped first), waits for its commands' records and folds the life's usage into sb. It
// answers the digest of the archive of the checkpoint it dropped, for dropArchive.
func (s *Service) stopHost(ctx context.Context, sb *store.Sandbox) (checkpoint string) {
	u, err := s.host.Stop(ctx, sb.ID)
	if err != nil {
		s.log.Error("stopping a sandbox", "sandbox", sb.ID, "err", err)
		sb.Error = err.Error()
	}
	s.waitCommands(sb.ID)
	addUsage(sb, u)
	return clearPause(sb)
}

// StopSandbox ends a sandbox's processes and keeps its disk. Stopping a stopped sandbox is
// no error.
func (s *Service) StopSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	sb, hs, err := s.heldSandbox(ctx, graph, id, "stop")
	if err != nil {
		return sb, err
	}
	hs.ops.Lock()
	defer hs.ops.Unlock()
	if sb, err = s.st.GetSandbox(ctx, graph, id); err != nil || sb.Status != store.SandboxRunning && sb.Status != store.SandboxPaused {
		if err == nil && ended(sb) {
			err = errdefs.Conflict("sandbox %s is %s", id, sb.Status)
		}
		return sb, err
	}
	// A stopped sandbox keeps its disk: the graph's quotas of those are checked before, as
	// the host cannot start it again as it was. The graph's lock keeps two stops from
	// passing the check together.
	gl := s.graphLock(graph)
	gl.Lock()
	defer gl.Unlock()
	u, err := s.st.GraphUsage(ctx, graph)
	if err != nil {
		return sb, err
	}
	if err := s.checkQuotas(graph, u, adds{QuotaStopped, 1}, adds{QuotaStoppedDiskBytes, sb.Limits.DiskMiB << 20}); err != nil {
		return sb, err
	}
	wctx := context.WithoutCancel(ctx)
	checkpoint := s.stopHost(wctx, &sb)
	replaced, failed := s.archiveWorkspace(wctx, &sb)
	sb.Error = withError(sb.Error, failed)
	sb.Status, sb.EndReason = store.SandboxStopped, store.EndStopped
	if err := s.st.UpdateSandbox(wctx, sb); err != nil {
		return sb, err
	}
	s.dropArchive(wctx, replaced)
	s.dropArchive(wctx, checkpoint)
	s.log.Info("sandbox stopped", "graph", graph, "sandbox", id)
	return sb, nil
}

// ResumeSandbox starts a stopped sandbox again on its disk, or wakes a paused one. Resuming a
// running sandbox is no error.
func (s *Service) ResumeSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	sb, hs, err := s.heldSandbox(ctx, graph, id, "resume")
	if err != nil {
		return sb, err
	}
	if err := s.begin(); err != nil {
		return sb, err
	}
	defer s.runs.Done()
	hs.ops.Lock()
	defer hs.ops.Unlock()
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
		if err := s.checkCap(wctx, q, graph, false, false); err != nil {
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
	t0 := time.Now()
	_, err = s.host.Resume(wctx, hostagent.ResumeRequest{ID: id, Limits: runtimeLimits(sb.Limits), Runtime: sb.Isolation, Layer: sb.Layer,
		Egress: hostEgress(sb), Workspace: sb.Workspace, Checkpoint: sb.Checkpoint})
	if err != nil {
		// A paused sandbox stays paused, so that a retry may wake it.
		prev.Error = "resume failed: " + err.Error()
		if uerr := s.st.UpdateSandbox(wctx, prev); uerr != nil {
			s.log.Error("recording a failed resume", "sandbox", id, "err", uerr)
		}
		return prev, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not resume: %w", id, err))
	}
	checkpoint := clearPause(&sb) // used: the sandbox runs on from it
	sb.Status, sb.EndReason, sb.Error = store.SandboxRunning, "", ""
	if h := s.hostOf(id); h != "" {
		sb.Host = h // resumed elsewhere when its host was lost and its workspace archived
	}
	// Its disk changes from now: the archive is stale.
	var stale string
	if sb.Workspace != nil {
		stale, sb.Workspace = sb.Workspace.SHA256, nil
	}
	if err := s.regrant(wctx, &sb); err != nil {
		s.log.Error("renewing a resumed sandbox's API grant", "sandbox", id, "err", err)
		sb.Error = "the API grant could not be renewed: " + err.Error()
	}
	if err := s.st.UpdateSandbox(wctx, sb); err != nil {
		return sb, err
	}
	s.dropArchive(wctx, stale)
	s.dropArchive(wctx, checkpoint)
	s.resumedTerminals(id)
	s.log.Info("sandbox resumed", "graph", graph, "sandbox", id, "from", prev.Status, "mode", prev.PauseMode, "ms", msSince(t0))
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
	return s.endSandbox(context.WithoutCancel(ctx), graph, id, store.EndDeleted)
}

// endSandbox destroys a long-lived sandbox for reason (deleted, expired).
func (s *Service) endSandbox(ctx context.Context, graph, id, reason string) (store.Sandbox, error) {
	hs := s.lookupHeld(id)
	if hs != nil {
		if hs.graph != graph {
			return store.Sandbox{}, errdefs.NotFound("sandbox %s not found", id)
		}
		hs.ops.Lock()
		defer hs.ops.Unlock()
	}
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return sb, err
	}
	if ended(sb) {
		return sb, nil
	}
	if err := s.dropSnapshots(ctx, graph, id); err != nil {
		s.log.Error("removing a sandbox's snapshots", "sandbox", id, "err", err)
	}
	u, err := s.host.Destroy(ctx, id)
	if err != nil {
		sb.Error = err.Error()
	}
	s.revokeGrant(ctx, sb)
	s.waitCommands(id)
	addUsage(&sb, u)
	s.removeHeld(id)
	now := s.now()
	checkpoint := clearPause(&sb)
	sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, reason, &now
	var archive string
	if sb.Workspace != nil {
		archive, sb.Workspace = sb.Workspace.SHA256, nil
	}
	if err := s.st.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	s.dropArchive(ctx, archive)
	s.dropArchive(ctx, checkpoint)
	s.log.Info("sandbox destroyed", "graph", graph, "sandbox", id, "reason", reason)
	return sb, nil
}

// stopAllLive stops every running (or frozen) long-lived sandbox (their disks stay) for
// reason: the server is shutting down.
func (s *Service) stopAllLive(ctx context.Context, reason string) {
	s.lmu.Lock()
	all := make([]*heldSandbox, 0, len(s.held))
	for _, hs := range s.held {
		all = append(all, hs)
	}
	s.lmu.Unlock()
	var wg sync.WaitGroup
	for _, hs := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hs.ops.Lock()
			defer hs.ops.Unlock()
			sb, err := s.st.GetSandbox(ctx, hs.graph, hs.id)
			// A frozen one ends as a running one does; a checkpointed one stays paused.
			if err != nil || sb.Status != store.SandboxRunning && sb.PauseMode != store.PauseFreeze {
				return
			}
			s.stopHost(ctx, &sb)
			// Its workspace is archived as at a stop call, so that it resumes on any host; a
			// store that does not answer holds the shutdown back only so long.
			actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			replaced, failed := s.archiveWorkspace(actx, &sb)
			cancel()
			sb.Error = withError(sb.Error, failed)
			sb.Status, sb.EndReason = store.SandboxStopped, reason
			if err := s.st.UpdateSandbox(ctx, sb); err != nil {
				s.log.Error("recording a stopped sandbox", "sandbox", hs.id, "err", err)
				return
			}
			s.dropArchive(ctx, replaced)
			s.log.Info("sandbox stopped for shutdown", "graph", hs.graph, "sandbox", hs.id)
		}()
	}
	wg.Wait()
}

// recoverLongLived runs at start, and when a dead peer is adopted, on holder's sandboxes: a
// long-lived sandbox that was running is stopped (its disk kept, end reason server_restart),
// one that was starting failed, and one whose expiry passed is destroyed. Those that remain
// are held here, with their expiry timers.
func (s *Service) recoverLongLived(ctx context.Context, holder string, rec *Recovered) error {
	all, err := s.st.ListSandboxesHeld(ctx, holder, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped)
	if err != nil {
		return err
	}
	now := s.now()
	for _, sb := range all {
		if sb.OneCall {
			continue
		}
		var archive, checkpoint string // a workspace and a checkpoint archive the record lets go of
		switch {
		case sb.ExpiresAt != nil && !sb.ExpiresAt.After(now):
			if _, err := s.host.Destroy(ctx, sb.ID); err != nil {
				sb.Error = err.Error()
			}
			if err := s.dropSnapshots(ctx, sb.Graph, sb.ID); err != nil {
				s.log.Error("removing a sandbox's snapshots", "sandbox", sb.ID, "err", err)
			}
			checkpoint = clearPause(&sb)
			sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, store.EndExpired, &now
			if sb.Workspace != nil {
				archive, sb.Workspace = sb.Workspace.SHA256, nil
			}
			s.revokeGrant(ctx, sb)
			rec.Expired = append(rec.Expired, sb.ID)
		case sb.Status == store.SandboxStarting && sb.PauseMode != store.PauseCheckpoint:
			if _, err := s.host.Destroy(ctx, sb.ID); err != nil {
				sb.Error = err.Error()
			}
			sb.Status, sb.EndReason, sb.EndedAt = store.SandboxFailed, store.EndLost, &now
			s.revokeGrant(ctx, sb)
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
				// A frozen one ends like a running one.
				if _, err := s.host.Stop(ctx, sb.ID); err != nil {
					sb.Error = err.Error()
				}
				sb.PausedAt, sb.PauseMode, sb.CheckpointBytes = nil, "", 0
				sb.Status, sb.EndReason = store.SandboxStopped, store.EndServerRestart
				rec.Stopped = append(rec.Stopped, sb.ID)
			}
			s.addHeld(sb.ID, sb.Graph)
			if sb.ExpiresAt != nil {
				if err := s.host.SetExpiry(ctx, sb.ID, *sb.ExpiresAt); err != nil {
					s.log.Error("arming a sandbox's expiry", "sandbox", sb.ID, "err", err)
				}
			}
		}
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			return fmt.Errorf("recover: %s: %w", sb.ID, err)
		}
		s.dropArchive(ctx, archive)
		s.dropArchive(ctx, checkpoint)
		s.log.Warn("sandbox recovered", "graph", sb.Graph, "sandbox", sb.ID, "status", sb.Status, "end_reason", sb.EndReason)
	}
	return nil
}

// expireDue ends the held sandboxes whose expiry passed (a backstop for their timers).
func (s *Service) expireDue() {
	s.lmu.Lock()
	var due []*heldSandbox
	for _, hs := range s.held {
		due = append(due, hs)
	}
	s.lmu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := s.now()
	for _, hs := range due {
		sb, err := s.st.GetSandbox(ctx, hs.graph, hs.id)
		if err == nil && sb.ExpiresAt != nil && sb.ExpiresAt.Before(now.Add(-5*time.Second)) && !ended(sb) {
			s.expire(hs.graph, hs.id)
		}
	}
}

func marshal(v any) (json.RawMessage, error) { return json.Marshal(v) }
