package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/host"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, snapshot and fork of long-lived sandboxes.
//
// Pause parks a running sandbox. Where its driver checkpoints (gvisor) it is saved with its
// memory into <data-dir>/paused/<sbx_id> and stopped: its RAM is free, and it stays paused
// across a server restart; resume restores it and its processes run on. Elsewhere (ns) the
// freezer parks its processes in RAM; a restart stops it like a running one. The record
// keeps which (PauseMode).
//
// A snapshot is a checkpoint of a running sandbox, memory and disk, kept in
// <data-dir>/snapshots/<graph>/<snp_id>; the sandbox is restored from it at once and runs on.
// A fork is a new sandbox restored from a snapshot: the processes and memory of its source at
// that moment, its own from then on. Snapshots go with their sandbox (delete, expiry, the
// janitor for any left over) or by DELETE /v1/snapshots/{id}; forks do not need them once
// started.
//
// None of these breaks a running command: they answer 409 commands_running instead.

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

// SnapshotHost is what pause, snapshot and fork need of the host layer (host.Host).
type SnapshotHost interface {
	PauseSandbox(ctx context.Context, l *host.Live, dir string) (string, error)
	ResumePaused(ctx context.Context, p host.PausedSandbox) (*host.Live, error)
	SnapshotSandbox(ctx context.Context, l *host.Live, dir string) (*host.Live, error)
	ForkSandbox(ctx context.Context, id, dir string, limits runtime.Limits) (*host.Live, error)
	Thaw(ctx context.Context, id string) error
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

func (s *Service) snapshotHost() (SnapshotHost, error) {
	if err := s.level3(); err != nil {
		return nil, err
	}
	h, ok := s.sandboxes.(SnapshotHost)
	if !ok {
		return nil, host.NotSupported("this server's host cannot pause, snapshot or fork sandboxes")
	}
	return h, nil
}

func (s *Service) pauseDir(id string) string { return filepath.Join(s.cfg.DataDir, "paused", id) }

func (s *Service) snapshotDir(graph, id string) string {
	return filepath.Join(s.cfg.DataDir, "snapshots", graph, id)
}

// freshDir makes sure dir does not exist and its parent does, for a checkpoint to fill.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Dir(dir), 0o700)
}

// detach takes a running sandbox's Live from it, so that no command starts on it, unless a
// command runs (409 commands_running). The caller holds ls.ops and gives the Live back with
// setRunning (or records the sandbox stopped).
func (s *Service) detach(ls *liveSandbox, sb store.Sandbox, what string) (*host.Live, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := ls.idle(sb, what); err != nil {
		return nil, err
	}
	live, cancel := ls.live, ls.cancel
	ls.live, ls.ctx, ls.cancel = nil, nil, nil
	if cancel != nil {
		// Ends the watcher of its init: a checkpoint stops the sandbox on purpose.
		cancel(fmt.Errorf("the sandbox is being made to %s", what))
	}
	return live, nil
}

// idle says why a sandbox cannot be checkpointed now: it does not run, or a command runs in
// it. The caller holds ls.mu.
func (ls *liveSandbox) idle(sb store.Sandbox, what string) error {
	if sb.Status != store.SandboxRunning {
		return errdefs.Conflict("sandbox %s is %s; only a running sandbox can %s", sb.ID, sb.Status, what)
	}
	if n := len(ls.cmds); n > 0 {
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
			"sandbox %s has %d command(s) running; wait for them or kill them, then %s", sb.ID, n, what)
	}
	if ls.live == nil {
		return errdefs.Conflict("sandbox %s is not running on this server", sb.ID)
	}
	return nil
}

// addUsage folds a run's usage into the sandbox's.
func (ls *liveSandbox) addUsage(sb *store.Sandbox, u store.Usage) {
	ls.mu.Lock()
	ls.usage.VCPUMs += u.VCPUMs
	ls.usage.GiBMs += u.GiBMs
	sb.Usage = ls.usage
	ls.mu.Unlock()
}

// lost records a sandbox whose run ended while it was detached (a failed checkpoint or
// restore): stopped, disk kept, resume starts it again.
func (s *Service) lost(ctx context.Context, ls *liveSandbox, sb *store.Sandbox, live *host.Live, usage store.Usage, err error) {
	live.Close()
	if serr := s.sandboxes.StopSandbox(ctx, sb.ID); serr != nil {
		s.log.Error("stopping a sandbox", "sandbox", sb.ID, "err", serr)
	}
	ls.addUsage(sb, usage)
	sb.Status, sb.EndReason = store.SandboxStopped, store.EndFailed
	sb.Error = err.Error() + "; resume starts it again on its disk"
	if uerr := s.st.UpdateSandbox(ctx, *sb); uerr != nil {
		s.log.Error("recording a stopped sandbox", "sandbox", sb.ID, "err", uerr)
	}
}

// PauseSandbox parks a running sandbox (POST /v1/sandboxes/{id}/pause).
func (s *Service) PauseSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	hst, err := s.snapshotHost()
	if err != nil {
		return store.Sandbox{}, err
	}
	if err := s.begin(); err != nil {
		return store.Sandbox{}, err
	}
	defer s.runs.Done()
	sb, ls, err := s.heldSandbox(ctx, graph, id, "pause")
	if err != nil {
		return sb, err
	}
	ls.ops.Lock()
	defer ls.ops.Unlock()
	wctx := context.WithoutCancel(ctx)
	if sb, err = s.st.GetSandbox(wctx, graph, id); err != nil {
		return sb, err
	}
	if sb.Status == store.SandboxPaused {
		// Like stop, pause is what it leaves: a retry of a pause whose answer was lost
		// answers the paused sandbox.
		return sb, nil
	}
	live, err := s.detach(ls, sb, "pause")
	if err != nil {
		return sb, err
	}
	usage := live.Usage(wctx)
	dir := s.pauseDir(id)
	if err := freshDir(dir); err != nil {
		s.setRunning(ls, live)
		return sb, err
	}
	t0 := time.Now()
	mode, err := hst.PauseSandbox(wctx, live, dir)
	if err != nil {
		os.RemoveAll(dir)
		select {
		case <-live.Sandbox.Done():
			s.lost(wctx, ls, &sb, live, usage, fmt.Errorf("pausing failed: %w", err))
			return sb, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not pause and is stopped: %w", id, err))
		default:
			s.setRunning(ls, live)
		}
		if errdefs.IsConflict(err) {
			return sb, err
		}
		return sb, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not pause: %w", id, err))
	}
	if mode == store.PauseCheckpoint {
		// Stopped: its run so far is metered, its RAM free.
		ls.addUsage(&sb, usage)
	} else {
		ls.mu.Lock()
		ls.frozen = live
		ls.mu.Unlock()
		os.RemoveAll(dir)
	}
	now := s.now()
	sb.Status, sb.PausedAt, sb.PauseMode = store.SandboxPaused, &now, mode
	if err := s.st.UpdateSandbox(wctx, sb); err != nil {
		return sb, err
	}
	s.log.Info("sandbox paused", "graph", graph, "sandbox", id, "mode", mode, "ms", msSince(t0))
	return sb, nil
}

// resumePaused wakes a paused sandbox whose record ResumeSandbox has made starting (prev is
// the record before). The caller holds ls.ops. A failure keeps it paused, so that a retry
// may wake it.
func (s *Service) resumePaused(ctx context.Context, ls *liveSandbox, sb, prev store.Sandbox) (store.Sandbox, error) {
	fail := func(err error) (store.Sandbox, error) {
		prev.Error = "resume failed: " + err.Error()
		if uerr := s.st.UpdateSandbox(ctx, prev); uerr != nil {
			s.log.Error("recording a failed resume", "sandbox", sb.ID, "err", uerr)
		}
		return prev, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s did not resume: %w", sb.ID, err))
	}
	hst, err := s.snapshotHost()
	if err != nil {
		return fail(err)
	}
	ls.mu.Lock()
	frozen := ls.frozen
	ls.mu.Unlock()
	t0 := time.Now()
	live, err := hst.ResumePaused(ctx, host.PausedSandbox{ID: sb.ID, Limits: runtimeLimits(sb.Limits), Mode: prev.PauseMode,
		Dir: s.pauseDir(sb.ID), Live: frozen})
	if err != nil {
		return fail(err)
	}
	ls.mu.Lock()
	ls.frozen = nil
	ls.mu.Unlock()
	s.setRunning(ls, live)
	if prev.PauseMode == store.PauseCheckpoint {
		if err := os.RemoveAll(s.pauseDir(sb.ID)); err != nil {
			s.log.Warn("removing a used checkpoint", "sandbox", sb.ID, "err", err)
		}
	}
	sb.Status, sb.PausedAt, sb.PauseMode, sb.EndReason, sb.Error = store.SandboxRunning, nil, "", "", ""
	if err := s.st.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	s.log.Info("sandbox resumed from pause", "graph", sb.Graph, "sandbox", sb.ID, "mode", prev.PauseMode, "ms", msSince(t0))
	return sb, nil
}

// unpause readies a paused sandbox to be stopped or destroyed: a frozen one is thawed (its
// processes must run to end), a checkpoint is dropped. The caller holds ls.ops (ls may be nil
// after a restart) and records the new status.
func (s *Service) unpause(ctx context.Context, ls *liveSandbox, sb *store.Sandbox) {
	if sb.Status != store.SandboxPaused && sb.PauseMode == "" {
		return
	}
	if sb.PauseMode == store.PauseFreeze {
		var frozen *host.Live
		if ls != nil {
			ls.mu.Lock()
			frozen, ls.frozen = ls.frozen, nil
			ls.mu.Unlock()
		}
		if hst, ok := s.sandboxes.(SnapshotHost); ok {
			if err := hst.Thaw(ctx, sb.ID); err != nil && frozen != nil {
				s.log.Warn("thawing a paused sandbox", "sandbox", sb.ID, "err", err)
			}
		}
		if frozen != nil {
			if ls != nil {
				ls.addUsage(sb, frozen.Usage(ctx))
			}
			frozen.Close()
		}
	}
	if err := os.RemoveAll(s.pauseDir(sb.ID)); err != nil {
		s.log.Warn("removing a checkpoint", "sandbox", sb.ID, "err", err)
	}
	sb.PausedAt, sb.PauseMode = nil, ""
}

// SnapshotSandbox saves a running sandbox with its memory (POST /v1/sandboxes/{id}/snapshot);
// it runs on.
func (s *Service) SnapshotSandbox(ctx context.Context, c Caller, id string, req SnapshotRequest) (store.Snapshot, error) {
	if err := validMetadata(req.Metadata); err != nil {
		return store.Snapshot{}, err
	}
	if _, err := s.snapshotHost(); err != nil {
		return store.Snapshot{}, err
	}
	if err := s.begin(); err != nil {
		return store.Snapshot{}, err
	}
	defer s.runs.Done()
	_, ls, err := s.heldSandbox(ctx, c.Graph, id, "be snapshotted")
	if err != nil {
		return store.Snapshot{}, err
	}
	ls.ops.Lock()
	defer ls.ops.Unlock()
	return s.snapshot(context.WithoutCancel(ctx), ls, c.Graph, id, req.Metadata)
}

// snapshot takes a snapshot of running sandbox id. The caller holds ls.ops.
func (s *Service) snapshot(ctx context.Context, ls *liveSandbox, graph, id string, md map[string]string) (store.Snapshot, error) {
	hst, err := s.snapshotHost()
	if err != nil {
		return store.Snapshot{}, err
	}
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	live, err := s.detach(ls, sb, "be snapshotted")
	if err != nil {
		return store.Snapshot{}, err
	}
	usage := live.Usage(ctx)
	snap := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: graph, SandboxID: id, Isolation: sb.Isolation, Memory: true, Metadata: md}
	dir := s.snapshotDir(graph, snap.ID)
	if err := freshDir(dir); err != nil {
		s.setRunning(ls, live)
		return snap, err
	}
	t0 := time.Now()
	nl, err := hst.SnapshotSandbox(ctx, live, dir)
	took := time.Since(t0)
	if err != nil {
		os.RemoveAll(dir)
		select {
		case <-live.Sandbox.Done():
			s.lost(ctx, ls, &sb, live, usage, fmt.Errorf("a snapshot failed: %w", err))
			return snap, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s: the snapshot failed and the sandbox is stopped: %w", id, err))
		default:
			s.setRunning(ls, live)
		}
		if host.IsNotSupported(err) {
			return snap, s.noSnapshots(sb)
		}
		return snap, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("sandbox %s: the snapshot failed: %w", id, err))
	}
	s.setRunning(ls, nl)
	ls.addUsage(&sb, usage)
	if err := s.st.UpdateSandbox(ctx, sb); err != nil {
		s.log.Error("recording a sandbox's usage", "sandbox", id, "err", err)
	}
	snap.SizeBytes, snap.CreatedAt, snap.DurationMs = diskUsage(dir), s.now(), float64(took.Microseconds())/1000
	if err := s.st.CreateSnapshot(ctx, snap); err != nil {
		os.RemoveAll(dir)
		return snap, err
	}
	s.log.Info("sandbox snapshotted", "graph", graph, "sandbox", id, "snapshot", snap.ID, "ms", snap.DurationMs, "bytes", snap.SizeBytes)
	return renderSnapshot(snap), nil
}

// noSnapshots is the error for a sandbox whose isolation takes no memory snapshots.
func (s *Service) noSnapshots(sb store.Sandbox) error {
	iso := firstNonEmpty(sb.Isolation, s.iso.Default)
	return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported,
		`memory snapshots need isolation "gvisor"; sandbox %s runs on %q`, sb.ID, iso)
}

func renderSnapshot(snap store.Snapshot) store.Snapshot {
	if snap.Metadata == nil {
		snap.Metadata = map[string]string{}
	}
	return snap
}

// diskUsage is the bytes dir takes on disk (its disk image is sparse).
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
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
	if ls := s.lookupLive(snap.SandboxID); ls != nil && ls.graph == graph {
		ls.ops.Lock()
		defer ls.ops.Unlock()
	}
	if err := s.dropSnapshot(context.WithoutCancel(ctx), snap); err != nil {
		return snap, err
	}
	return renderSnapshot(snap), nil
}

func (s *Service) dropSnapshot(ctx context.Context, snap store.Snapshot) error {
	if err := os.RemoveAll(s.snapshotDir(snap.Graph, snap.ID)); err != nil {
		return fmt.Errorf("removing snapshot %s: %w", snap.ID, err)
	}
	if err := s.st.DeleteSnapshot(ctx, snap.Graph, snap.ID); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	s.log.Info("snapshot deleted", "graph", snap.Graph, "sandbox", snap.SandboxID, "snapshot", snap.ID)
	return nil
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
// their removal), and, at start (orphans), snapshot and checkpoint directories that no
// record claims.
func (s *Service) sweepSnapshots(ctx context.Context, orphans bool) (int, error) {
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
			break
		}
	}
	if !orphans || s.cfg.DataDir == "" {
		return n, nil
	}
	root := filepath.Join(s.cfg.DataDir, "snapshots")
	graphs, _ := os.ReadDir(root)
	for _, g := range graphs {
		ents, _ := os.ReadDir(filepath.Join(root, g.Name()))
		for _, e := range ents {
			if _, err := s.st.GetSnapshot(ctx, g.Name(), e.Name()); errdefs.IsNotFound(err) {
				s.log.Warn("removing a snapshot directory no record claims", "dir", filepath.Join(root, g.Name(), e.Name()))
				os.RemoveAll(filepath.Join(root, g.Name(), e.Name()))
				n++
			}
		}
	}
	paused, _ := os.ReadDir(filepath.Join(s.cfg.DataDir, "paused"))
	for _, e := range paused {
		ls := s.lookupLive(e.Name())
		if ls != nil {
			if sb, err := s.st.GetSandbox(ctx, ls.graph, ls.id); err == nil && sb.PauseMode == store.PauseCheckpoint {
				continue
			}
		}
		s.log.Warn("removing a checkpoint no paused sandbox claims", "sandbox", e.Name())
		os.RemoveAll(filepath.Join(s.cfg.DataDir, "paused", e.Name()))
	}
	return n, nil
}

// ForkSandbox starts a new sandbox from a snapshot of sandbox id (POST
// /v1/sandboxes/{id}/fork) and answers 201 with its record. Without req.Snapshot it takes a
// fresh snapshot of the running source first. With an Idempotency-Key a retry answers the
// same fork.
func (s *Service) ForkSandbox(ctx context.Context, c Caller, id string, req ForkRequest, idemKey, reqHash string) (Response, error) {
	if _, err := s.snapshotHost(); err != nil {
		return Response{}, err
	}
	if err := idempotency.Check(idemKey); err != nil {
		return Response{}, err
	}
	// A replay needs no valid request: the answer is stored.
	if resp, ok, err := s.keys().Stored(ctx, c.Graph, idemKey, reqHash); ok || err != nil {
		return resp, err
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
	src, ls, err := s.heldSandbox(ctx, c.Graph, id, "be forked")
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
		ls.ops.Lock()
		defer ls.ops.Unlock()
		src, err := s.st.GetSandbox(ctx, c.Graph, id)
		if err != nil {
			return Response{}, err
		}
		if ended(src) {
			return Response{}, errdefs.Conflict("sandbox %s is %s", id, src.Status)
		}
		if req.Snapshot == "" {
			ls.mu.Lock()
			err := ls.idle(src, "be forked")
			ls.mu.Unlock()
			if err != nil {
				return Response{}, err
			}
		}
		if err := s.checkCap(ctx, s.st, c.Graph); err != nil {
			return Response{}, err
		}
		var snap store.Snapshot
		if req.Snapshot == "" {
			if snap, err = s.snapshot(ctx, ls, c.Graph, id, nil); err != nil {
				return Response{}, err
			}
		} else if snap, err = s.st.GetSnapshot(ctx, c.Graph, req.Snapshot); err != nil {
			return Response{}, err
		}
		return s.fork(ctx, c, ls, src, snap, req)
	})
}

// fork starts the new sandbox from snap and records it. The caller holds the source's ops.
func (s *Service) fork(ctx context.Context, c Caller, src *liveSandbox, from store.Sandbox, snap store.Snapshot, req ForkRequest) (Response, error) {
	hst, err := s.snapshotHost()
	if err != nil {
		return Response{}, err
	}
	env := map[string]string{}
	src.mu.Lock()
	for k, v := range src.env {
		env[k] = v
	}
	src.mu.Unlock()
	for k, v := range req.Env {
		env[k] = v
	}
	md := req.Metadata
	if md == nil {
		md = from.Metadata
	}
	// The fork is its source as it was (base, template, limits, isolation), with a life and
	// a record of its own.
	sb := from
	sb.ID, sb.Status, sb.OneCall, sb.EnvNames, sb.Metadata = ids.New(ids.Sandbox), store.SandboxStarting, false, sortedKeys(env), md
	sb.Origin = store.Origin{Key: c.Key.ID}
	sb.CreatedAt, sb.StartedAt, sb.EndedAt, sb.EndReason, sb.Error = s.now(), nil, nil, "", ""
	sb.Usage, sb.PausedAt, sb.PauseMode = store.Usage{}, nil, ""
	sb.ForkedFrom = &store.ForkedFrom{Sandbox: from.ID, Snapshot: snap.ID}
	exp := sb.CreatedAt.Add(time.Duration(req.ExpiresInSeconds) * time.Second)
	if req.ExpiresInSeconds == 0 {
		exp = sb.CreatedAt.Add(s.cfg.DefaultLifetime)
	}
	sb.ExpiresAt = &exp
	// As a create: the sandbox starts before its record exists (a crash between leaves a
	// driver sandbox Recover reaps), and the cap is checked again with the insert.
	t0 := time.Now()
	live, err := hst.ForkSandbox(ctx, sb.ID, s.snapshotDir(snap.Graph, snap.ID), runtimeLimits(sb.Limits))
	if err != nil {
		now := s.now()
		sb.Status, sb.EndReason, sb.EndedAt, sb.Error = store.SandboxFailed, store.EndFailed, &now, err.Error()
		if cerr := s.st.CreateSandbox(ctx, sb); cerr != nil {
			s.log.Error("recording a failed fork", "sandbox", sb.ID, "err", cerr)
		}
		s.log.Warn("fork failed to start", "graph", sb.Graph, "sandbox", sb.ID, "snapshot", snap.ID, "err", err)
		if host.IsNotSupported(err) {
			return Response{}, s.noSnapshots(from)
		}
		return Response{}, errdefs.Wrap(errdefs.ClassUnavailable, "", fmt.Errorf("fork %s of %s did not start: %w", sb.ID, from.ID, err))
	}
	if err := s.admit(ctx, &sb, live, env, exp); err != nil {
		return Response{}, err
	}
	s.log.Info("sandbox forked", "graph", sb.Graph, "sandbox", sb.ID, "from", from.ID, "snapshot", snap.ID, "ms", msSince(t0), "expires_at", exp)
	return idempotency.JSON(idempotency.Created, sb)
}
