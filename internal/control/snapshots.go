package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"

	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, snapshot and fork of long-lived sandboxes.
//
// The host agent does the work (internal/hostagent/snapshot.go); the control plane keeps the
// records. Pause parks a running sandbox. Where its driver checkpoints (gvisor) it is saved
// with its memory into <data-dir>/paused/<sbx_id> and stopped: its RAM is free, and it stays paused
// across a server restart; resume restores it and its processes run on. Elsewhere (ns) the
// freezer parks its processes in RAM; a restart stops it like a running one. The record
// keeps which (PauseMode).
//
// A snapshot is a checkpoint of a running sandbox, memory and disk, kept in
// <data-dir>/snapshots/<snp_id>; the sandbox is restored from it at once and runs on.
// A fork is a new sandbox restored from a snapshot: the processes and memory of its source at
// that moment, its own from then on. Snapshots go with their sandbox (delete, expiry, the
// janitor for any left over) or by DELETE /v1/snapshots/{id}; forks do not need them once
// started.
//
// None of these breaks a running command: pause freezes a sandbox with commands running
// (they go on at resume); a snapshot carries them on (gvisor); a fork without a snapshot
// carries them into the fork as commands of its own (forked_from). Terminals and code
// contexts are commands too: a pause and a snapshot keep them (a terminal's client
// re-attaches; a context keeps its variables), and a fork without a snapshot gets copies of
// the contexts (forked_from) but not of the terminals. Only a run of run(input, config), or a
// code cell running, whose stream cannot move, makes them answer 409 commands_running.

// RouteFork is the route whose idempotency keys forks keep.
const RouteFork = "POST /v1/sandboxes/{id}/fork"

// RouteSnapshot is the route whose idempotency keys snapshots keep.
const RouteSnapshot = "POST /v1/sandboxes/{id}/snapshot"

// SnapshotOnce is SnapshotSandbox under an optional Idempotency-Key: a retry with the key
// (after a lost answer) gets the snapshot the first call took instead of taking a second.
// The answer is 201 with the snapshot.
func (s *Service) SnapshotOnce(ctx context.Context, c Caller, id string, req SnapshotRequest, idemKey, reqHash string) (Response, error) {
	return s.keys().Do(ctx, c.Graph, idemKey, RouteSnapshot, reqHash, func(ctx context.Context) (Response, error) {
		snap, err := s.SnapshotSandbox(ctx, c, id, req)
		if err != nil {
			return Response{}, err
		}
		return idempotency.JSON(idempotency.Created, snap)
	})
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshot.
type SnapshotRequest struct {
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Snapshot to start from; empty takes a fresh one of the running source (and keeps it).
	Snapshot         string            `json:"snapshot,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	ExpiresInSeconds int64             `json:"expires_in_seconds,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
}

// stoppedOnFailure records a sandbox the host agent stopped after a failed checkpoint or
// restore (hostagent.CodeSandboxStopped): stopped, disk kept, resume starts it again.
func (s *Service) stoppedOnFailure(ctx context.Context, sb *store.Sandbox, err error) {
	sb.Status, sb.EndReason, sb.Error = store.SandboxStopped, store.EndFailed, err.Error()
	if uerr := s.st.UpdateSandbox(ctx, *sb); uerr != nil {
		s.log.Error("recording a stopped sandbox", "sandbox", sb.ID, "err", uerr)
	}
}

func isStopped(err error) bool { return errdefs.CodeOf(err) == hostagent.CodeSandboxStopped }

// PauseSandbox parks a running sandbox (POST /v1/sandboxes/{id}/pause).
func (s *Service) PauseSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	if err := s.begin(); err != nil {
		return store.Sandbox{}, err
	}
	defer s.runs.Done()
	sb, hs, err := s.heldSandbox(ctx, graph, id, "pause")
	if err != nil {
		return sb, err
	}
	hs.ops.Lock()
	defer hs.ops.Unlock()
	wctx := context.WithoutCancel(ctx)
	if sb, err = s.st.GetSandbox(wctx, graph, id); err != nil {
		return sb, err
	}
	if sb.Status == store.SandboxPaused {
		// Like stop, pause is what it leaves: a retry of a pause whose answer was lost
		// answers the paused sandbox.
		return sb, nil
	}
	if sb.Status != store.SandboxRunning {
		return sb, errdefs.Conflict("sandbox %s is %s; only a running sandbox can pause", id, sb.Status)
	}
	// Its contexts' interpreters and its terminals are commands: the freezer keeps them, state
	// and all, and they go on at resume.
	release, _, err := s.holdContexts(id, "pause")
	if err != nil {
		return sb, err
	}
	defer release()
	t0 := time.Now()
	p, err := s.host.Pause(wctx, id)
	if err != nil {
		if isStopped(err) {
			s.waitCommands(id)
			s.stoppedOnFailure(wctx, &sb, err)
			return sb, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not pause and is stopped: %w", id, err))
		}
		if errdefs.IsConflict(err) {
			return sb, err
		}
		return sb, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not pause: %w", id, err))
	}
	// Checkpointed, it is stopped: its run so far is metered, its RAM free.
	addUsage(&sb, p.Usage)
	running := sb
	now := s.now()
	sb.Status, sb.PausedAt, sb.PauseMode, sb.CheckpointBytes, sb.Checkpoint = store.SandboxPaused, &now, p.Mode, p.Bytes, p.Archive
	// A checkpoint's size is known once it is taken: the graph's quotas of checkpoints are
	// checked with the record, and a pause past them is undone.
	var over error
	err = s.st.WithTx(wctx, func(q store.Queries) error {
		if p.Mode == store.PauseCheckpoint {
			u, err := q.GraphUsage(wctx, graph)
			if err != nil {
				return err
			}
			if over = s.checkQuotas(graph, u, adds{QuotaCheckpoints, 1}, adds{QuotaCheckpointBytes, p.Bytes}); over != nil {
				return over
			}
		}
		return q.UpdateSandbox(wctx, sb)
	})
	if over != nil {
		return s.unpause(wctx, sb, running, over)
	}
	if err != nil {
		if p.Archive != nil {
			s.dropArchive(wctx, p.Archive.SHA256)
		}
		return sb, err
	}
	s.log.Info("sandbox paused", "graph", graph, "sandbox", id, "mode", p.Mode, "bytes", p.Bytes, "ms", msSince(t0))
	return sb, nil
}

// unpause wakes a sandbox whose pause went past the graph's quotas (over) and answers over;
// one that does not wake is recorded paused, so that a resume may wake it.
func (s *Service) unpause(ctx context.Context, paused, running store.Sandbox, over error) (store.Sandbox, error) {
	_, err := s.host.Resume(ctx, hostagent.ResumeRequest{ID: running.ID, Limits: runtimeLimits(running.Limits), Runtime: running.Isolation, Layer: running.Layer})
	rec := running
	if err != nil {
		rec = paused
		rec.Error = "resume failed: " + err.Error()
	}
	if uerr := s.st.UpdateSandbox(ctx, rec); uerr != nil {
		return rec, uerr
	}
	if rec.Checkpoint == nil && paused.Checkpoint != nil {
		s.dropArchive(ctx, paused.Checkpoint.SHA256)
	}
	if err != nil {
		return rec, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s: its pause went past the graph's quota (%v) and it did not wake; it is paused: %w", running.ID, over, err))
	}
	s.log.Info("pause undone: past the graph's quota", "graph", running.Graph, "sandbox", running.ID, "err", over)
	return rec, over
}

// SnapshotSandbox saves a running sandbox with its memory (POST /v1/sandboxes/{id}/snapshot);
// it runs on.
func (s *Service) SnapshotSandbox(ctx context.Context, c Caller, id string, req SnapshotRequest) (store.Snapshot, error) {
	if err := validMetadata(req.Metadata); err != nil {
		return store.Snapshot{}, err
	}
	if err := s.begin(); err != nil {
		return store.Snapshot{}, err
	}
	defer s.runs.Done()
	_, hs, err := s.heldSandbox(ctx, c.Graph, id, "be snapshotted")
	if err != nil {
		return store.Snapshot{}, err
	}
	hs.ops.Lock()
	defer hs.ops.Unlock()
	// Its contexts' interpreters are carried on with its commands.
	release, _, err := s.holdContexts(id, "be snapshotted")
	if err != nil {
		return store.Snapshot{}, err
	}
	defer release()
	return s.snapshot(context.WithoutCancel(ctx), c.Graph, id, req.Metadata)
}

// snapshot takes a snapshot of running sandbox id. The caller holds its ops and its
// contexts (holdContexts).
func (s *Service) snapshot(ctx context.Context, graph, id string, md map[string]string) (store.Snapshot, error) {
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	snap := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: graph, SandboxID: id, Isolation: sb.Isolation, Memory: true, Metadata: md}
	if sb.Status != store.SandboxRunning {
		return snap, errdefs.Conflict("sandbox %s is %s; only a running sandbox can be snapshotted", id, sb.Status)
	}
	// Its size is known once it is taken (checked again with its record): refuse here only
	// what cannot fit whatever its size.
	u, err := s.st.GraphUsage(ctx, graph)
	if err != nil {
		return snap, err
	}
	if err := s.checkQuotas(graph, u, adds{QuotaSnapshots, 1}, adds{QuotaSnapshotBytes, unknownSize}); err != nil {
		return snap, err
	}
	t0 := time.Now()
	info, err := s.host.Snapshot(ctx, id, snap.ID)
	took := time.Since(t0)
	if err != nil {
		switch {
		case isStopped(err):
			s.waitCommands(id)
			s.stoppedOnFailure(ctx, &sb, err)
			return snap, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s: the snapshot failed and the sandbox is stopped: %w", id, err))
		case hostagent.IsNotSupported(err):
			return snap, s.noSnapshots(sb)
		case errdefs.IsConflict(err):
			return snap, err
		}
		return snap, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s: the snapshot failed: %w", id, err))
	}
	addUsage(&sb, info.Usage)
	if err := s.st.UpdateSandbox(ctx, sb); err != nil {
		s.log.Error("recording a sandbox's usage", "sandbox", id, "err", err)
	}
	snap.SizeBytes, snap.CreatedAt, snap.DurationMs, snap.Archive = info.Bytes, s.now(), float64(took.Microseconds())/1000, info.Archive
	err = s.st.WithTx(ctx, func(q store.Queries) error {
		u, err := q.GraphUsage(ctx, graph)
		if err != nil {
			return err
		}
		if err := s.checkQuotas(graph, u, adds{QuotaSnapshots, 1}, adds{QuotaSnapshotBytes, snap.SizeBytes}); err != nil {
			return err
		}
		return q.CreateSnapshot(ctx, snap)
	})
	if err != nil {
		if derr := s.host.DeleteSnapshot(ctx, snap.ID); derr != nil {
			s.log.Error("removing a snapshot that got no record", "snapshot", snap.ID, "err", derr)
		}
		if snap.Archive != nil {
			s.dropArchive(ctx, snap.Archive.SHA256)
		}
		return snap, err
	}
	s.log.Info("sandbox snapshotted", "graph", graph, "sandbox", id, "snapshot", snap.ID, "ms", snap.DurationMs, "bytes", snap.SizeBytes)
	return renderSnapshot(snap), nil
}

// noSnapshots is the error for a sandbox whose isolation takes no memory snapshots.
func (s *Service) noSnapshots(sb store.Sandbox) error {
	iso := firstNonEmpty(sb.Isolation, s.iso.Default)
	return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported,
		`memory snapshots need isolation "gvisor"; sandbox %s runs on %q, whose processes live in the host's own kernel, which cannot save them (pause freezes them in place instead)`, sb.ID, iso)
}

func renderSnapshot(snap store.Snapshot) store.Snapshot {
	if snap.Metadata == nil {
		snap.Metadata = map[string]string{}
	}
	return snap
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// GetSnapshot answers one snapshot of the graph.
func (s *Service) GetSnapshot(ctx context.Context, graph, id string) (store.Snapshot, error) {
	snap, err := s.st.GetSnapshot(ctx, graph, id)
	return renderSnapshot(snap), err
}

// ListSnapshots lists a sandbox's snapshots, newest first.
func (s *Service) ListSnapshots(ctx context.Context, graph, sandboxID string, p store.Page) ([]store.Snapshot, string, error) {
	if _, err := s.st.GetSandbox(ctx, graph, sandboxID); err != nil {
		return nil, "", err
	}
	out, next, err := s.st.ListSnapshots(ctx, graph, sandboxID, p)
	for i := range out {
		out[i] = renderSnapshot(out[i])
	}
	return out, next, err
}

// DeleteSnapshot removes a snapshot and its bytes; forks made from it run on.
func (s *Service) DeleteSnapshot(ctx context.Context, graph, id string) (store.Snapshot, error) {
	snap, err := s.st.GetSnapshot(ctx, graph, id)
	if err != nil {
		return snap, err
	}
	// A fork restoring from it holds its sandbox's ops.
	if hs := s.lookupHeld(snap.SandboxID); hs != nil && hs.graph == graph {
		hs.ops.Lock()
		defer hs.ops.Unlock()
	}
	if err := s.dropSnapshot(context.WithoutCancel(ctx), snap); err != nil {
		return snap, err
	}
	return renderSnapshot(snap), nil
}

func (s *Service) dropSnapshot(ctx context.Context, snap store.Snapshot) error {
	if err := s.host.DeleteSnapshot(ctx, snap.ID); err != nil {
		return fmt.Errorf("removing snapshot %s: %w", snap.ID, err)
	}
	if err := s.st.DeleteSnapshot(ctx, snap.Graph, snap.ID); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	if snap.Archive != nil {
		s.dropArchive(ctx, snap.Archive.SHA256)
	}
	s.log.Info("snapshot deleted", "graph", snap.Graph, "sandbox", snap.SandboxID, "snapshot", snap.ID)
	return nil
}

// allSnapshots lists the ids of every snapshot of a sandbox.
func (s *Service) allSnapshots(ctx context.Context, graph, sandboxID string) ([]string, error) {
	var out []string
	page := store.Page{Limit: 100}
	for {
		snaps, next, err := s.st.ListSnapshots(ctx, graph, sandboxID, page)
		if err != nil {
			return nil, err
		}
		for _, snap := range snaps {
			out = append(out, snap.ID)
		}
		if next == "" || len(snaps) == 0 {
			return out, nil
		}
		page.Cursor = next
	}
}

// dropSnapshots removes every snapshot of a sandbox that ends. The caller holds its ops.
func (s *Service) dropSnapshots(ctx context.Context, graph, sandboxID string) error {
	var errs []error
	for {
		snaps, _, err := s.st.ListSnapshots(ctx, graph, sandboxID, store.Page{Limit: 100})
		if err != nil {
			return err
		}
		for _, snap := range snaps {
			if err := s.dropSnapshot(ctx, snap); err != nil {
				errs = append(errs, err)
			}
		}
		if len(snaps) < 100 || len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
}

// sweepSnapshots removes the snapshots whose sandbox has ended (a crash between the end and
// their removal). Files no record claims go at start, with Recover's Reap.
func (s *Service) sweepSnapshots(ctx context.Context) (int, error) {
	n := 0
	for {
		snaps, err := s.st.ListEndedSnapshots(ctx, 100)
		if err != nil {
			return n, err
		}
		for _, snap := range snaps {
			if err := s.dropSnapshot(ctx, snap); err != nil {
				return n, err
			}
			n++
		}
		if len(snaps) < 100 {
			return n, nil
		}
	}
}

// ForkSandbox starts a new sandbox from a snapshot of sandbox id (POST
// /v1/sandboxes/{id}/fork) and answers 201 with its record. Without req.Snapshot it takes a
// fresh snapshot of the running source first. With an Idempotency-Key a retry answers the
// same fork.
func (s *Service) ForkSandbox(ctx context.Context, c Caller, id string, req ForkRequest, idemKey, reqHash string) (Response, error) {
	if err := idempotency.Check(idemKey); err != nil {
		return Response{}, err
	}
	// A replay needs no valid request: the answer is stored.
	if resp, ok, err := s.keys().Stored(ctx, c.Graph, idemKey, reqHash); ok || err != nil {
		return resp, err
	}
	if err := s.chargeRun(ctx, c.Key); err != nil {
		return Response{}, err
	}
	if err := s.begin(); err != nil {
		return Response{}, err
	}
	defer s.runs.Done()
	if req.ExpiresInSeconds < 0 {
		return Response{}, errdefs.InvalidArgument("expires_in_seconds must not be negative")
	}
	if req.ExpiresInSeconds > int64(s.cfg.MaxLifetime/time.Second) {
		return Response{}, errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeLimitExceeded,
			"expires_in_seconds %d is above this server's cap of %d", req.ExpiresInSeconds, int64(s.cfg.MaxLifetime/time.Second))
	}
	if err := validEnv(req.Env); err != nil {
		return Response{}, err
	}
	if err := validMetadata(req.Metadata); err != nil {
		return Response{}, err
	}
	src, hs, err := s.heldSandbox(ctx, c.Graph, id, "be forked")
	if err != nil {
		return Response{}, err
	}
	if req.Snapshot != "" {
		snap, err := s.st.GetSnapshot(ctx, c.Graph, req.Snapshot)
		if err != nil {
			return Response{}, err
		}
		if snap.SandboxID != id {
			return Response{}, errdefs.InvalidArgument("snapshot %s is of sandbox %s, not %s", snap.ID, snap.SandboxID, id)
		}
	} else if src.Status != store.SandboxRunning {
		return Response{}, errdefs.Conflict("sandbox %s is %s; a fork without a snapshot is of a running sandbox", id, src.Status)
	}
	return s.keys().Do(ctx, c.Graph, idemKey, RouteFork, reqHash, func(ctx context.Context) (Response, error) {
		// The source's ops keep its snapshots (and the source) in place while the fork
		// restores from one.
		hs.ops.Lock()
		defer hs.ops.Unlock()
		src, err := s.st.GetSandbox(ctx, c.Graph, id)
		if err != nil {
			return Response{}, err
		}
		if ended(src) {
			return Response{}, errdefs.Conflict("sandbox %s is %s", id, src.Status)
		}
		var carry []store.Command
		var drivers map[string]*codeContext
		if req.Snapshot == "" {
			if src.Status != store.SandboxRunning {
				return Response{}, errdefs.Conflict("sandbox %s is %s; only a running sandbox can be forked", id, src.Status)
			}
			// The commands running now carry on in the fork as commands of its own; a
			// run(input, config)'s stream cannot be carried.
			var runs int
			if carry, runs = s.runningCommands(ctx, c.Graph, id); runs > 0 {
				return Response{}, errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
					"sandbox %s has %d run(input, config) call(s) running, whose streams a fork cannot carry: wait for them or kill them, then fork", id, runs)
			}
		}
		if err := s.checkCap(ctx, s.st, c.Graph, true, false); err != nil {
			return Response{}, err
		}
		var snap store.Snapshot
		if req.Snapshot == "" {
			// Its contexts' interpreters go into the fork as copies: contexts of the fork's own
			// with the same state. A named snapshot's fork gets none: which interpreters it
			// holds is not kept, and their copies end.
			release, held, err := s.holdContexts(id, "be forked")
			if err != nil {
				return Response{}, err
			}
			defer release()
			drivers = forkedDrivers(held)
			if snap, err = s.snapshot(ctx, c.Graph, id, nil); err != nil {
				return Response{}, err
			}
		} else if snap, err = s.st.GetSnapshot(ctx, c.Graph, req.Snapshot); err != nil {
			return Response{}, err
		}
		return s.fork(ctx, c, src, snap, req, carry, drivers)
	})
}

// fork starts the new sandbox from snap and records it, with copies of the commands carry
// and of the contexts' interpreters drivers (by the fork's command id). The caller holds the
// source's ops.
func (s *Service) fork(ctx context.Context, c Caller, from store.Sandbox, snap store.Snapshot, req ForkRequest, carry []store.Command,
	drivers map[string]*codeContext) (Response, error) {
	md := req.Metadata
	if md == nil {
		md = from.Metadata
	}
	// The fork is its source as it was (base, template, limits, isolation, env), with a life
	// and a record of its own.
	sb := from
	envNames := map[string]string{}
	for _, k := range from.EnvNames {
		envNames[k] = ""
	}
	for k := range req.Env {
		envNames[k] = ""
	}
	sb.ID, sb.Status, sb.OneCall, sb.EnvNames, sb.Metadata = ids.New(ids.Sandbox), store.SandboxStarting, false, sortedKeys(envNames), md
	sb.Origin = c.origin(nil)
	sb.CreatedAt, sb.StartedAt, sb.EndedAt, sb.EndReason, sb.Error = s.now(), nil, nil, "", ""
	sb.Usage, sb.PausedAt, sb.PauseMode, sb.CheckpointBytes = store.Usage{}, nil, "", 0
	// The source's archives are its own (a stopped source's workspace, a paused one's
	// checkpoint): the fork's disk is the snapshot's.
	sb.Workspace, sb.Checkpoint = nil, nil
	sb.ForkedFrom = &store.ForkedFrom{Sandbox: from.ID, Snapshot: snap.ID}
	exp := sb.CreatedAt.Add(time.Duration(req.ExpiresInSeconds) * time.Second)
	if req.ExpiresInSeconds == 0 {
		exp = sb.CreatedAt.Add(s.cfg.DefaultLifetime)
	}
	sb.ExpiresAt = &exp
	// As a create: the sandbox starts before its record exists (a crash between leaves a
	// driver sandbox Recover reaps), and the cap is checked again with the insert.
	t0 := time.Now()
	// Its egress is its source's, its quota fresh; its API grant, if the source has one, is a
	// key of its own, within the forking key's scopes.
	if sb.API != nil {
		g := *sb.API
		g.Key, g.Scopes = "", slices.DeleteFunc(slices.Clone(g.Scopes), func(sc string) bool { return !c.Key.HasScope(sc) })
		sb.API = &g
		if len(g.Scopes) == 0 {
			sb.API = nil
		}
	}
	copies := map[string]store.Command{}
	var fcs []hostagent.ForkCommand
	for _, cmd := range carry {
		fc := hostagent.ForkCommand{Source: cmd.ID, ID: ids.New(ids.Command), Timeout: time.Duration(cmd.TimeoutMs) * time.Millisecond,
			HeadBytes: s.cfg.OutputHeadBytes, TailBytes: s.cfg.OutputTailBytes}
		fcs = append(fcs, fc)
		copies[fc.ID] = cmd
	}
	for id, cc := range drivers {
		fcs = append(fcs, hostagent.ForkCommand{Source: cc.driver, ID: id, Timeout: driverTimeout, Hold: true, HeadBytes: 4096, TailBytes: 4096})
	}
	started, err := s.host.Fork(ctx, hostagent.ForkRequest{ID: sb.ID, Source: from.ID, SnapshotID: snap.ID, Archive: snap.Archive,
		Limits: runtimeLimits(sb.Limits), Runtime: sb.Isolation, Env: req.Env, Egress: hostEgress(sb), Commands: fcs})
	if err != nil {
		now := s.now()
		sb.Status, sb.EndReason, sb.EndedAt, sb.Error = store.SandboxFailed, store.EndFailed, &now, err.Error()
		if cerr := s.st.CreateSandbox(ctx, sb); cerr != nil {
			s.log.Error("recording a failed fork", "sandbox", sb.ID, "err", cerr)
		}
		s.log.Warn("fork failed to start", "graph", sb.Graph, "sandbox", sb.ID, "snapshot", snap.ID, "err", err)
		if hostagent.IsNotSupported(err) {
			return Response{}, s.noSnapshots(from)
		}
		return Response{}, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("fork %s of %s did not start: %w", sb.ID, from.ID, err))
	}
	sb.Host = s.hostOf(sb.ID)
	if sb.API != nil {
		if err := s.grant(ctx, c.Key.ID, &sb, 0); err != nil {
			s.log.Error("granting a fork the API", "sandbox", sb.ID, "err", err)
			sb.API, sb.Error = nil, "the API grant could not be made: "+err.Error()
		}
	}
	if err := s.admit(ctx, &sb, started, exp, nil); err != nil {
		s.revokeGrant(ctx, sb)
		return Response{}, err
	}
	for _, id := range started.Commands {
		if cc := drivers[id]; cc != nil {
			s.adoptContext(sb.ID, cc, id)
			continue
		}
		s.carryCommand(ctx, c, sb, copies[id], id)
	}
	s.log.Info("sandbox forked", "graph", sb.Graph, "sandbox", sb.ID, "from", from.ID, "snapshot", snap.ID, "ms", msSince(t0), "expires_at", exp,
		"commands", len(started.Commands))
	return idempotency.JSON(idempotency.Created, sb)
}

// runningCommands answers the records of the processes running in a sandbox, and how many
// runs of run(input, config) run beside them.
func (s *Service) runningCommands(ctx context.Context, graph, sandboxID string) (procs []store.Command, runs int) {
	s.mu.Lock()
	var ids []string
	for id, inf := range s.inflight {
		if inf.sandbox == sandboxID {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		cmd, err := s.st.GetCommand(ctx, graph, id)
		switch {
		case err != nil || cmd.Status != store.CommandRunning:
		case cmd.Kind == store.KindProcess:
			procs = append(procs, cmd)
		case cmd.Kind == store.KindTerminal || cmd.Kind == store.KindCode:
			// A terminal stays with its source (the fork's copy is hung up); a cell is its
			// context's (holdContexts answers for it).
		default:
			runs++
		}
	}
	return procs, runs
}

// carryCommand records fork sb's copy of command src, which its host agent carries on as
// command id, and waits for its end as for any command.
func (s *Service) carryCommand(ctx context.Context, c Caller, sb store.Sandbox, src store.Command, id string) {
	now := s.now()
	cmd := store.Command{ID: id, Graph: sb.Graph, SandboxID: sb.ID, Kind: src.Kind, Argv: src.Argv, Cwd: src.Cwd,
		EnvNames: src.EnvNames, TimeoutMs: src.TimeoutMs, Status: store.CommandRunning, ForkedFrom: src.ID,
		Origin: c.origin(nil), CreatedAt: now, StartedAt: &now}
	if err := s.st.CreateCommand(ctx, cmd); err != nil {
		s.log.Error("recording a fork's copy of a command", "sandbox", sb.ID, "command", id, "from", src.ID, "err", err)
		s.host.Signal(context.WithoutCancel(ctx), id, "")
		return
	}
	if err := s.begin(); err != nil {
		s.host.Signal(context.WithoutCancel(ctx), id, "")
		return
	}
	inf := &inflight{done: make(chan struct{}), sandbox: sb.ID}
	s.mu.Lock()
	s.inflight[cmd.ID] = inf
	s.mu.Unlock()
	s.metrics.running.Inc()
	// Metered from the fork's start: what the copy uses in the fork is its own.
	base, err := s.host.Usage(ctx, sb.ID)
	if err != nil {
		base = store.Usage{}
	}
	go func() {
		defer s.runs.Done()
		s.runCommand(context.Background(), cmd, nil, inf, nil, func() {}, meterFrom{base: base})
	}()
}
