package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, snapshot and fork of long-lived sandboxes, on the driver's optional abilities:
//
//   - runtime.Checkpointer (gvisor): pause saves the sandbox whole (memory, processes, disk)
//     into <data-dir>/paused/<id> and stops it, so its RAM is free and it outlives the
//     server; resume restores it. A snapshot is a checkpoint into
//     <data-dir>/snapshots/<snapshot> the sandbox is restored from at once, in place; a fork
//     is a new sandbox restored from a snapshot.
//   - runtime.Freezer (ns): pause parks the processes in RAM; resume thaws them. There are no
//     snapshots.
//
// A driver that routes between several (internal/runtime/mux) has both abilities and answers
// a Conflict with code not_supported for a sandbox whose own driver lacks one.
//
// A sandbox with commands running pauses by the freezer on every driver that has one (ns,
// gvisor, microvm): its commands, their output streams, stdin pipes and the readers attached
// to them stay as they are, parked, and go on when it resumes; their timeouts (the agent's
// and the host's backstop) are held meanwhile. A snapshot carries execs on: each one's stream
// is detachable in the guest agent (agent.ExecRequest.Detachable), and after the checkpoint
// and restore it attaches to the new agent from the offsets the host has (moveStream); a
// run(input, config) cannot move (commands_running). A fork carries on the copies its
// request names (ForkRequest.Commands, as commands of its own) and ends the others.

// CodeSandboxStopped is the code of an error after which the sandbox is stopped (its disk
// kept): a checkpoint or restore failed on the way.
const CodeSandboxStopped = "sandbox_stopped"

// NotSupported is the error for an ability the sandbox's isolation lacks.
func NotSupported(format string, args ...any) error {
	return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, format, args...)
}

// IsNotSupported reports whether err says the isolation lacks the ability.
func IsNotSupported(err error) bool {
	return errdefs.IsConflict(err) && errdefs.CodeOf(err) == errdefs.CodeNotSupported
}

func (h *Local) checkpointer() (runtime.Checkpointer, bool) {
	c, ok := h.driver.(runtime.Checkpointer)
	return c, ok
}

// detach takes a running sandbox's live from it, so that no command starts on it, unless a
// command runs (commands_running). The caller holds s.ops and gives the live back with
// setRunning, or stops the sandbox.
//
// With carry, its commands (execs, whose streams can move) are carried to the sandbox's next
// life: s.moving is set, and the commands' context stays.
func (h *Local) detach(id, what string, carry bool) (*sandbox, *live, error) {
	s := h.lookup(id, false)
	if s == nil {
		return nil, nil, notHere(id)
	}
	s.ops.Lock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil || s.frozen {
		s.ops.Unlock()
		return nil, nil, errdefs.Conflict("sandbox %s is not running; only a running sandbox can %s", id, what)
	}
	movable := carry
	for _, c := range s.cmds {
		movable = movable && c.detachable
	}
	if n := len(s.cmds); n > 0 && !movable {
		s.ops.Unlock()
		why := "whose output streams a checkpoint would end"
		if carry {
			why = "a run(input, config) among them, whose stream a checkpoint would end"
		}
		return nil, nil, errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
			"sandbox %s has %d command(s) running, %s; wait for them or kill them, then %s (pause keeps them)", id, n, why, what)
	}
	l := s.live
	s.live = nil
	if len(s.cmds) > 0 {
		// The commands go on in their context; the watcher of the old life finds it gone.
		s.moving = true
		s.notify()
		return s, l, nil
	}
	cancel := s.cancel
	s.ctx, s.cancel = nil, nil
	if cancel != nil {
		// Ends the watcher of its init: a checkpoint stops the sandbox on purpose.
		cancel(fmt.Errorf("the sandbox is being made to %s", what))
	}
	return s, l, nil
}

// moved ends a move of s's commands (detach with carry) once they can find its new life, or
// none (nl nil: they end). The caller holds s.ops.
func (h *Local) moved(ctx context.Context, s *sandbox, nl *live, cause error) {
	s.mu.Lock()
	if !s.moving {
		s.mu.Unlock()
		return
	}
	s.moving = false
	var cancel context.CancelCauseFunc
	if nl == nil {
		cancel = s.cancel
		s.ctx, s.cancel = nil, nil
	}
	s.notify()
	s.mu.Unlock()
	if cancel != nil {
		cancel(cause)
		return
	}
	h.holdTimeouts(ctx, s, nl, false)
}

// detachTo detaches a running sandbox (see detach) for a checkpoint into dir, which it makes
// fresh, and answers what the sandbox used so far. The caller unlocks s.ops.
func (h *Local) detachTo(ctx context.Context, id, what, dir string, carry bool) (*sandbox, *live, store.Usage, error) {
	s, l, err := h.detach(id, what, carry)
	if err != nil {
		return nil, nil, store.Usage{}, err
	}
	u := l.usage(ctx)
	if err := freshDir(dir); err != nil {
		h.setRunning(s, l)
		s.ops.Unlock()
		return nil, nil, store.Usage{}, err
	}
	return s, l, u, nil
}

// reattach undoes detachTo after the checkpoint into dir failed with err: dir goes and the
// sandbox runs on, or, when its live ended meanwhile, it is stopped and the error that says
// so (doing failed) is answered.
func (h *Local) reattach(ctx context.Context, s *sandbox, l *live, dir, doing string, err error) error {
	os.RemoveAll(dir)
	select {
	case <-l.sb.Done():
		return h.lost(ctx, s, l, fmt.Errorf("%s failed: %w", doing, err))
	default:
		h.setRunning(s, l)
		return nil
	}
}

// lost stops a sandbox whose live ended while it was detached (a failed checkpoint or
// restore) and answers the error that says so. The caller holds s.ops.
func (h *Local) lost(ctx context.Context, s *sandbox, l *live, err error) error {
	l.agent.Close()
	if serr := h.driver.Stop(ctx, s.id); serr != nil && !errors.Is(serr, runtime.ErrNotFound) {
		h.log.Error("stopping a sandbox", "sandbox", s.id, "err", serr)
	}
	return errdefs.New(errdefs.ClassUnavailable, CodeSandboxStopped, "%v; resume starts it again on its disk", err)
}

// freshDir makes sure dir does not exist and its parent does, for a checkpoint to fill.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Dir(dir), 0o700)
}

// Pause parks a running sandbox: with no command running checkpointed where the driver can
// (saved with its memory and stopped; Paused.Usage is its life's), else frozen.
func (h *Local) Pause(ctx context.Context, id string) (Paused, error) {
	if p, busy, err := h.pauseBusy(ctx, id); busy {
		return p, err
	}
	dir := h.pauseDir(id)
	s, l, u, err := h.detachTo(ctx, id, "pause", dir, false)
	if err != nil {
		return Paused{}, err
	}
	defer s.ops.Unlock()
	mode, err := h.pause(ctx, l, id, dir)
	if err != nil {
		if lerr := h.reattach(ctx, s, l, dir, "pausing", err); lerr != nil {
			return Paused{}, lerr
		}
		return Paused{}, err
	}
	if mode == store.PauseCheckpoint {
		return Paused{Mode: mode, Usage: u, Bytes: diskUsage(dir), Archive: h.archiveDir(ctx, "paused "+id, dir)}, nil
	}
	os.RemoveAll(dir)
	h.setRunning(s, l)
	s.mu.Lock()
	s.frozen = true
	s.mu.Unlock()
	return Paused{Mode: mode}, nil
}

// pauseBusy freezes sandbox id when it has commands running (busy), its commands' timeouts
// held; it answers busy false, and does nothing, for one that has none or is not running.
func (h *Local) pauseBusy(ctx context.Context, id string) (_ Paused, busy bool, _ error) {
	s := h.lookup(id, false)
	if s == nil {
		return Paused{}, false, nil
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	l, n := s.live, len(s.cmds)
	busy = l != nil && !s.frozen && n > 0
	s.mu.Unlock()
	if !busy {
		return Paused{}, false, nil
	}
	f, ok := h.driver.(runtime.Freezer)
	if !ok {
		return Paused{}, true, errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
			"sandbox %s has %d command(s) running and runtime %q cannot pause a sandbox without ending them; wait for them or kill them, then pause", id, n, h.driver.Name())
	}
	h.holdTimeouts(ctx, s, l, true)
	if err := f.Freeze(ctx, id); err != nil {
		h.holdTimeouts(ctx, s, l, false)
		if IsNotSupported(err) {
			return Paused{}, true, errdefs.New(errdefs.ClassConflict, errdefs.CodeCommandsRunning,
				"sandbox %s has %d command(s) running and its isolation cannot pause it without ending them (%v); wait for them or kill them, then pause", id, n, err)
		}
		return Paused{}, true, fmt.Errorf("freezing sandbox %s: %w", id, err)
	}
	s.mu.Lock()
	s.frozen = true
	s.mu.Unlock()
	return Paused{Mode: store.PauseFreeze}, true, nil
}

// holdTimeouts holds (hold) or releases the timeouts of the commands of a sandbox that is
// being paused or resumed: the agent's, and the host's backstops.
func (h *Local) holdTimeouts(ctx context.Context, s *sandbox, l *live, hold bool) {
	s.backstops.Hold(hold)
	if err := l.agent.HoldTimeouts(ctx, hold); err != nil {
		// An agent older than this call: its timeouts count the paused time.
		h.log.Warn("holding the commands' timeouts", "sandbox", s.id, "hold", hold, "err", err)
	}
}

func (h *Local) pause(ctx context.Context, l *live, id, dir string) (string, error) {
	if c, ok := h.checkpointer(); ok {
		err := c.Checkpoint(ctx, id, dir)
		if err == nil {
			l.agent.Close()
			return store.PauseCheckpoint, nil
		}
		if !IsNotSupported(err) {
			return "", fmt.Errorf("checkpointing sandbox %s: %w", id, err)
		}
	}
	f, ok := h.driver.(runtime.Freezer)
	if !ok {
		return "", NotSupported("runtime %q cannot pause sandboxes", h.driver.Name())
	}
	if err := f.Freeze(ctx, id); err != nil {
		if IsNotSupported(err) {
			return "", err
		}
		return "", fmt.Errorf("freezing sandbox %s: %w", id, err)
	}
	return store.PauseFreeze, nil
}

// Snapshot saves a running sandbox with its memory and disk under snapshotID and restores it
// in place from there: its processes run on, on a new channel.
func (h *Local) Snapshot(ctx context.Context, id, snapshotID string) (SnapshotInfo, error) {
	c, ok := h.checkpointer()
	if !ok {
		return SnapshotInfo{}, NotSupported("runtime %q cannot take memory snapshots", h.driver.Name())
	}
	dir := h.snapshotDir(snapshotID)
	s, l, u, err := h.detachTo(ctx, id, "be snapshotted", dir, true)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer s.ops.Unlock()
	s.mu.Lock()
	carried := s.moving
	s.mu.Unlock()
	if carried {
		// The commands' timeouts do not count the move; the restored agent has its held.
		h.holdTimeouts(ctx, s, l, true)
	}
	t0 := time.Now()
	err = c.Checkpoint(ctx, id, dir)
	if err != nil {
		lerr := h.reattach(ctx, s, l, dir, "a snapshot", err)
		if lerr != nil {
			h.moved(ctx, s, nil, lerr)
			return SnapshotInfo{}, lerr
		}
		h.moved(ctx, s, l, nil)
		if IsNotSupported(err) {
			return SnapshotInfo{}, err
		}
		return SnapshotInfo{}, fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	l.agent.Close()
	t1 := time.Now()
	nl, err := h.restore(ctx, c, id, dir, l.limits, false)
	if err != nil {
		err = errdefs.New(errdefs.ClassUnavailable, CodeSandboxStopped,
			"sandbox %s was saved but did not start again (it is stopped; resume starts it again on its disk): %v", id, err)
		h.moved(ctx, s, nil, err)
		return SnapshotInfo{}, err
	}
	h.log.Debug("sandbox snapshotted", "sandbox", id, "checkpoint_ms", ms(t1.Sub(t0)), "restore_ms", ms(time.Since(t1)), "commands_moved", carried)
	h.setRunning(s, nl)
	h.moved(ctx, s, nl, nil)
	// The sandbox runs on meanwhile; the snapshot's files do not change.
	return SnapshotInfo{ID: snapshotID, Bytes: diskUsage(dir), Usage: u, Archive: h.archiveDir(ctx, "snapshot "+snapshotID, dir),
		Sandbox: Sandbox{ID: id, Runtime: h.info.Default, StartedAt: nl.startedAt}}, nil
}

// DeleteSnapshot removes a snapshot's files.
func (h *Local) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if snapshotID == "" {
		return errdefs.InvalidArgument("no snapshot id")
	}
	if err := os.RemoveAll(h.snapshotDir(snapshotID)); err != nil {
		return fmt.Errorf("removing snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// Fork starts sandbox req.ID from snapshot req.SnapshotID: its memory, processes and disk as
// they were then, its env the source's with req.Env over it. A failure destroys what it made.
func (h *Local) Fork(ctx context.Context, req ForkRequest) (Sandbox, error) {
	c, ok := h.checkpointer()
	if !ok {
		return Sandbox{}, NotSupported("runtime %q cannot fork sandboxes", h.driver.Name())
	}
	if req.SnapshotID == "" {
		return Sandbox{}, errdefs.InvalidArgument("a fork starts from a snapshot")
	}
	env := map[string]string{}
	if src := h.lookup(req.Source, false); src != nil {
		src.mu.Lock()
		maps.Copy(env, src.env)
		src.mu.Unlock()
	}
	maps.Copy(env, req.Env)
	dir := h.snapshotDir(req.SnapshotID)
	if err := h.placeCheckpoint(ctx, "snapshot "+req.SnapshotID, dir, req.Archive); err != nil {
		return Sandbox{}, err
	}
	esb, err := h.newEgress(req.ID, req.Egress)
	if err != nil {
		return Sandbox{}, err
	}
	l, err := h.restore(ctx, c, req.ID, dir, req.Limits, true)
	if err != nil {
		return Sandbox{}, err
	}

	s := h.lookup(req.ID, true)
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	s.env = env
	s.egress, s.espec = esb, req.Egress
	s.mu.Unlock()
	if err := h.setRunning(s, l); err != nil {
		return Sandbox{}, h.abandon(ctx, s, l, err)
	}
	// The source's commands copied with it carry on as the fork's own where asked; the other
	// copies' streams wait for an attach nobody makes here, so they end now.
	var adopted []string
	for _, fc := range req.Commands {
		if h.adopt(ctx, req.ID, fc) {
			adopted = append(adopted, fc.ID)
		} else {
			h.log.Warn("a fork's copy of its source's command did not carry on", "sandbox", req.ID, "command", fc.Source)
		}
	}
	if err := l.agent.DropDetached(ctx); err != nil {
		h.log.Warn("ending the fork's copies of its source's commands", "sandbox", req.ID, "err", err)
	}
	// A snapshot of a sandbox with commands running holds its timeouts (see Snapshot).
	h.holdTimeouts(ctx, s, l, false)
	sb := h.answer(req.ID, req.Runtime, l)
	sb.Commands = adopted
	return sb, nil
}

// restore starts id from the checkpoint in dir and connects to its agent. On failure a new
// sandbox (fork) is destroyed, an existing one stopped.
func (h *Local) restore(ctx context.Context, c runtime.Checkpointer, id, dir string, limits runtime.Limits, fork bool) (_ *live, err error) {
	defer func() {
		if err == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		undo, verb := h.driver.Stop, "stopping"
		if fork {
			undo, verb = h.driver.Destroy, "destroying"
		}
		if uerr := undo(cctx, id); uerr != nil && !errors.Is(uerr, runtime.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("%s sandbox %s: %w", verb, id, uerr))
		}
	}()
	sb, err := c.Restore(ctx, id, dir)
	if err != nil {
		if IsNotSupported(err) {
			return nil, err
		}
		return nil, fmt.Errorf("restoring sandbox %s: %w", id, err)
	}
	return connect(ctx, sb, limits)
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
