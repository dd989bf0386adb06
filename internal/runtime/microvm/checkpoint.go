//go:build linux

package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/hostdisk"
)

// A checkpoint directory holds:
//
//	state.json  the sandbox's state: spec, and what it booted (a restore boots the same)
//	memory      QEMU's migration stream of the machine: RAM and device state
//	disk.img    the sandbox's disk as it was, copied sparsely
//
// The memory and the disk are one state: the guest's page cache and its ext4's view are in
// the memory, so a restore always takes the checkpoint's disk.
//
// Before QEMU saves the machine the driver ends the channel's session: it closes its end, the
// agent sees the host go, lets the session go (commands still streaming end, as on any
// channel's end) and opens the port again, which QEMU reports (VSERPORT_CHANGE); the agent
// then waits for a host. Saved at that point, the machine resumes into a new session on the
// channel of whichever QEMU restores it, and its supervisor gets the host's time and fresh
// entropy (a fork also a machine id of its own) before Restore answers.

// Checkpoint saves started sandbox id into dir and stops it.
func (d *Driver) Checkpoint(ctx context.Context, id, dir string) error {
	if err := driverkit.CheckID(id); err != nil {
		return err
	}
	unlock := d.sbs.Lock(id)
	defer unlock()
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	if sb.frozen.Load() {
		return errdefs.Conflict("sandbox %s is frozen: thaw it before saving it", id)
	}
	st, err := d.readState(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return errdefs.InvalidArgument("checkpoint directory %s is not empty (%v)", dir, err)
	}
	t0 := time.Now()
	if err := d.save(ctx, sb, filepath.Join(dir, "memory")); err != nil {
		// The channel may be gone: the sandbox stops, its disk kept, rather than run on
		// unreachable.
		serr := d.stop(ctx, id, false)
		return errors.Join(fmt.Errorf("checkpoint %s: %w", id, err), serr)
	}
	t1 := time.Now()
	// The machine is saved and paused: it must not write its disk again (no sync).
	if err := d.stop(ctx, id, false); err != nil {
		return err
	}
	if err := hostdisk.CopySparse(filepath.Join(d.dir(id), "disk.img"), filepath.Join(dir, "disk.img")); err != nil {
		return fmt.Errorf("checkpoint disk: %w", err)
	}
	if err := driverkit.WriteJSON(filepath.Join(dir, "state.json"), st); err != nil {
		return err
	}
	d.cfg.Logger.Debug("sandbox checkpointed", "sandbox", id, "save", t1.Sub(t0), "disk", time.Since(t1))
	return nil
}

// save ends the channel's session, pauses the machine and migrates it into the file mem.
func (d *Driver) save(ctx context.Context, sb *sandbox, mem string) error {
	mark := sb.mon.mark()
	sb.conn.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := sb.mon.waitEvent(wctx, mark, func(ev qmpEvent) bool {
		var data struct {
			ID   string `json:"id"`
			Open bool   `json:"open"`
		}
		json.Unmarshal(ev.Data, &data)
		return ev.Event == "VSERPORT_CHANGE" && data.ID == "channel" && data.Open
	})
	if err != nil {
		return fmt.Errorf("the agent did not let its session go: %w", err)
	}
	if _, err := sb.mon.run(wctx, "stop", nil, nil); err != nil {
		return err
	}
	f, err := os.OpenFile(mem, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := sb.mon.run(wctx, "getfd", map[string]string{"fdname": "migration"}, f); err != nil {
		return err
	}
	if _, err := sb.mon.run(wctx, "migrate", map[string]string{"uri": "fd:migration"}, nil); err != nil {
		return err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		out, err := sb.mon.run(wctx, "query-migrate", nil, nil)
		if err != nil {
			return err
		}
		var m struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		json.Unmarshal(out, &m)
		switch m.Status {
		case "completed":
			return f.Sync()
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", m.Status, m.ErrorDesc)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("migration: %w", wctx.Err())
		case <-time.After(delay):
		}
	}
}

// Restore starts sandbox id from the checkpoint in dir: the checkpointed sandbox, or a new
// one (a fork).
func (d *Driver) Restore(ctx context.Context, id, dir string) (runtime.Sandbox, error) {
	if err := driverkit.CheckID(id); err != nil {
		return nil, err
	}
	cp, err := readState(filepath.Join(dir, "state.json"), id)
	if err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			return nil, errdefs.InvalidArgument("%s holds no checkpoint", dir)
		}
		return nil, err
	}
	fork := cp.Spec.ID != id
	cp.Spec.ID = id
	if err := d.adopt(ctx, cp, filepath.Join(dir, "disk.img")); err != nil {
		return nil, err
	}
	return d.boot(ctx, id, filepath.Join(dir, "memory"), fork)
}

// adopt makes sandbox st.Spec.ID the checkpoint's: created from it when new (with a QEMU uid
// of its own), else (stopped) given its disk and what it booted.
func (d *Driver) adopt(ctx context.Context, st state, disk string) error {
	id := st.Spec.ID
	unlock := d.sbs.Lock(id)
	defer unlock()
	if _, err := os.Stat(filepath.Join(d.dir(id), "state.json")); errors.Is(err, os.ErrNotExist) {
		return d.create(ctx, st, disk)
	}
	if err := d.sbs.ReapDead(ctx, id); err != nil {
		return err
	}
	if _, running := d.sbs.Get(id); running {
		return errdefs.Conflict("sandbox %s is started: stop it before restoring it", id)
	}
	old, err := d.readState(id)
	if err != nil {
		return err
	}
	st.UID = old.UID
	img := filepath.Join(d.dir(id), "disk.img")
	_ = os.Remove(img + ".restore")
	if err := hostdisk.CopySparse(disk, img+".restore"); err != nil {
		return fmt.Errorf("restore disk: %w", err)
	}
	if err := os.Chown(img+".restore", st.UID, st.UID); err != nil {
		return err
	}
	if err := os.Rename(img+".restore", img); err != nil {
		return err
	}
	return driverkit.WriteJSON(filepath.Join(d.dir(id), "state.json"), st)
}

// resume waits until QEMU has loaded the machine it was started with (-incoming) and runs it:
// the machine was saved paused, and QEMU keeps the state it was saved in.
func (s *sandbox) resume(ctx context.Context) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		out, err := s.mon.run(ctx, "query-status", nil, nil)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		json.Unmarshal(out, &st)
		switch st.Status {
		case "running":
			return nil
		case "paused", "postmigrate", "prelaunch":
			_, err := s.mon.run(ctx, "cont", nil, nil)
			return err
		case "inmigrate":
		default:
			return fmt.Errorf("loading the saved machine: QEMU is %q", st.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loading the saved machine: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}
