//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
//	state.json  the sandbox's state: spec and the agent's token (a fork's agent is a copy)
//	memory/     runsc's image of the sandbox: kernel, processes, memory
//	disk.img    the disk as it was, copied sparsely
//
// The memory and the disk are one state: the Sentry's view of the disk (open files, cached
// metadata) is in the memory image, so a restore always takes the checkpoint's disk.

// Checkpoint saves started sandbox id into dir and stops it.
func (d *Driver) Checkpoint(ctx context.Context, id, dir string) error {
	if err := driverkit.CheckID(id); err != nil {
		return err
	}
	unlock := d.sbs.Lock(id)
	defer unlock()
	if _, err := d.sbs.Started(id); err != nil {
		return err
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
	// runsc saves, then ends the sandbox; the attached runsc run returns.
	if out, err := d.runsc(ctx, id, "checkpoint", "--image-path", filepath.Join(dir, "memory"), id); err != nil {
		return fmt.Errorf("runsc checkpoint %s: %w: %s", id, err, out)
	}
	// runsc writes its image 0755/0644; it is the sandbox's memory, env values included.
	if err := ownerOnly(filepath.Join(dir, "memory")); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	t1 := time.Now()
	if err := d.stop(ctx, id); err != nil {
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
	cp.Spec.ID = id
	if err := d.adopt(ctx, cp, filepath.Join(dir, "disk.img")); err != nil {
		return nil, err
	}
	return d.boot(ctx, id, filepath.Join(dir, "memory"))
}

// adopt makes sandbox st.Spec.ID the checkpoint's: created from it when new, else (stopped)
// given its disk and its agent's token.
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
	if err := d.cleanup(ctx, id); err != nil {
		return err
	}
	img := filepath.Join(d.dir(id), "disk.img")
	_ = os.Remove(img + ".restore")
	if err := hostdisk.CopySparse(disk, img+".restore"); err != nil {
		return fmt.Errorf("restore disk: %w", err)
	}
	if err := os.Rename(img+".restore", img); err != nil {
		return err
	}
	return driverkit.WriteJSON(filepath.Join(d.dir(id), "state.json"), st)
}

// ownerOnly makes the tree at root readable by its owner only: directories 0700, files 0600.
func ownerOnly(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		return os.Chmod(p, mode)
	})
}
