package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Pause, snapshot and fork of long-lived sandboxes, on the driver's optional abilities:
//
//   - runtime.Checkpointer (gvisor): pause saves the sandbox whole (memory, processes, disk)
//     into a directory and stops it, so its RAM is free and it outlives the server; resume
//     restores it. A snapshot is a checkpoint the sandbox is restored from at once, in place;
//     a fork is a new sandbox restored from a snapshot.
//   - runtime.Freezer (ns): pause parks the processes in RAM; resume thaws them. There are no
//     snapshots.
//
// A driver that routes between several (internal/runtime/mux) has both abilities and answers
// a Conflict with code not_supported for a sandbox whose own driver lacks one.

// NotSupported is the error for an ability the sandbox's isolation lacks.
func NotSupported(format string, args ...any) error {
	return errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, format, args...)
}

// IsNotSupported reports whether err says the isolation lacks the ability.
func IsNotSupported(err error) bool {
	return errdefs.IsConflict(err) && errdefs.CodeOf(err) == errdefs.CodeNotSupported
}

func (h *Host) checkpointer() (runtime.Checkpointer, bool) {
	c, ok := h.driver.(runtime.Checkpointer)
	return c, ok
}

// PauseSandbox parks a started sandbox and says how (store.PauseCheckpoint or
// store.PauseFreeze). Checkpointed, the sandbox is saved with its memory into dir (missing or
// empty) and stopped: l is closed, and ResumePaused makes a new Live. Frozen, l stays open and
// is the one ResumePaused hands back.
func (h *Host) PauseSandbox(ctx context.Context, l *Live, dir string) (string, error) {
	if c, ok := h.checkpointer(); ok {
		err := c.Checkpoint(ctx, l.ID, dir)
		if err == nil {
			l.Close()
			return store.PauseCheckpoint, nil
		}
		if !IsNotSupported(err) {
			return "", fmt.Errorf("checkpointing sandbox %s: %w", l.ID, err)
		}
	}
	f, ok := h.driver.(runtime.Freezer)
	if !ok {
		return "", NotSupported("runtime %q cannot pause sandboxes", h.driver.Name())
	}
	if err := f.Freeze(ctx, l.ID); err != nil {
		if IsNotSupported(err) {
			return "", err
		}
		return "", fmt.Errorf("freezing sandbox %s: %w", l.ID, err)
	}
	return store.PauseFreeze, nil
}

// PausedSandbox is a paused sandbox to wake.
type PausedSandbox struct {
	ID     string
	Limits runtime.Limits
	// Mode is how it was paused (store.PauseCheckpoint, store.PauseFreeze).
	Mode string
	// Dir holds the checkpoint (PauseCheckpoint).
	Dir string
	// Live is the frozen sandbox (PauseFreeze).
	Live *Live
}

// ResumePaused wakes a paused sandbox: a checkpointed one is restored with its memory (its
// processes run on; a new Live on a new channel), a frozen one is thawed (its Live again).
// A failed restore leaves the sandbox stopped with the checkpoint's disk.
func (h *Host) ResumePaused(ctx context.Context, p PausedSandbox) (*Live, error) {
	switch p.Mode {
	case store.PauseFreeze:
		f, ok := h.driver.(runtime.Freezer)
		if !ok || p.Live == nil {
			return nil, errdefs.Conflict("sandbox %s was frozen by a server that is gone; resume starts it again", p.ID)
		}
		if err := f.Thaw(ctx, p.ID); err != nil {
			return nil, fmt.Errorf("thawing sandbox %s: %w", p.ID, err)
		}
		return p.Live, nil
	case store.PauseCheckpoint:
		c, ok := h.checkpointer()
		if !ok {
			return nil, NotSupported("runtime %q cannot restore checkpoints", h.driver.Name())
		}
		return h.restore(ctx, c, p.ID, p.Dir, p.Limits, false)
	}
	return nil, fmt.Errorf("sandbox %s: unknown pause mode %q", p.ID, p.Mode)
}

// SnapshotSandbox saves a started sandbox into dir (missing or empty) with its memory and
// disk, and restores it in place from there: its processes run on. The channel is new, so
// it answers a new Live and closes l. Calls in flight on l end. When the restore fails the
// sandbox is stopped (disk kept) and the error says so; when the checkpoint fails it may
// still run (l.Sandbox.Done tells).
func (h *Host) SnapshotSandbox(ctx context.Context, l *Live, dir string) (*Live, error) {
	c, ok := h.checkpointer()
	if !ok {
		return nil, NotSupported("runtime %q cannot take memory snapshots", h.driver.Name())
	}
	t0 := time.Now()
	if err := c.Checkpoint(ctx, l.ID, dir); err != nil {
		if IsNotSupported(err) {
			return nil, err
		}
		return nil, fmt.Errorf("checkpointing sandbox %s: %w", l.ID, err)
	}
	l.Close()
	t1 := time.Now()
	nl, err := h.restore(ctx, c, l.ID, dir, l.Limits, false)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s was saved but did not start again (it is stopped): %w", l.ID, err)
	}
	h.log.Debug("sandbox snapshotted", "sandbox", l.ID, "checkpoint_ms", ms(t1.Sub(t0)), "restore_ms", ms(time.Since(t1)))
	return nl, nil
}

// ForkSandbox starts new sandbox id from the snapshot in dir: its memory, processes and disk
// as they were then. A failure destroys what it made.
func (h *Host) ForkSandbox(ctx context.Context, id, dir string, limits runtime.Limits) (*Live, error) {
	c, ok := h.checkpointer()
	if !ok {
		return nil, NotSupported("runtime %q cannot fork sandboxes", h.driver.Name())
	}
	return h.restore(ctx, c, id, dir, limits, true)
}

// restore starts id from the checkpoint in dir and connects to its agent. On failure a new
// sandbox (fork) is destroyed, an existing one stopped.
func (h *Host) restore(ctx context.Context, c runtime.Checkpointer, id, dir string, limits runtime.Limits, fork bool) (_ *Live, err error) {
	var client *agent.Client
	defer func() {
		if err == nil {
			return
		}
		if client != nil {
			client.Close()
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
	at := time.Now()
	client, err = agent.NewClient(sb.Conn())
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	if err := client.Ping(ctx); err != nil {
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	return &Live{ID: id, Sandbox: sb, Agent: client, StartedAt: at, Limits: limits, h: h}, nil
}

// Thaw wakes a frozen sandbox without a Live (before stopping or destroying it).
func (h *Host) Thaw(ctx context.Context, id string) error {
	f, ok := h.driver.(runtime.Freezer)
	if !ok {
		return nil
	}
	return f.Thaw(ctx, id)
}
