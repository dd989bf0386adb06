//go:build linux

package ns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// ExportLayer copies stopped sandbox id's upper layer to dst (runtime.LayerExporter). The
// copy keeps owners, modes, xattrs (user.overlay.* marks opaque directories) and the 0/0
// character devices that are whiteouts, so dst stacks over the same image as a lower layer.
func (d *Driver) ExportLayer(ctx context.Context, id, dst string) (err error) {
	unlock := d.sbs.Lock(id)
	defer unlock()
	if _, ok := d.sbs.Get(id); ok {
		return errdefs.Conflict("sandbox %s is started: stop it before exporting its layer", id)
	}
	if _, err := os.Stat(d.dir(id)); err != nil {
		return errdefs.Wrap(errdefs.ClassNotFound, "", fmt.Errorf("sandbox %s: %w", id, err))
	}
	if err := d.sbs.MakeRunDir(id, "disk"); err != nil {
		return err
	}
	var u undo.Stack
	if _, _, err := d.sbs.MountDisk(ctx, &u, id); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.Undo()) }()
	upper := d.sbs.RunPath(id, "disk", "upper")
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--", upper, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the upper layer of %s: %v: %s", id, err, out)
	}
	return nil
}
