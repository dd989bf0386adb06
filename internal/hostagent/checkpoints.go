package hostagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/littlebigbrain/lbb/internal/diskarchive"
)

// A checkpoint's directory (a snapshot's, or a paused sandbox's) is archived to the blob store
// when it is taken, so that a fork of the snapshot or a resume of the paused sandbox works on
// any host sharing the store: a host without the directory restores it from the archive
// first. Only a store other machines reach (blobs.Shared, Info.Blobs) gets them: in a local
// directory an archive would only double the bytes of a checkpoint this host keeps anyway. The directory does not change once taken, so a local copy, when there is one, is
// the archive's.

// archiveDir archives the checkpoint directory dir to the blob store: nil when this host
// shares none with others, or when the archive fails (the checkpoint then stays on this host
// alone; logged).
func (h *Local) archiveDir(ctx context.Context, what, dir string) *Workspace {
	if h.blobs == nil || h.info.Blobs == "" {
		return nil
	}
	t0 := time.Now()
	info, err := h.putArchive(ctx, func(w io.Writer) error { return diskarchive.WriteDir(ctx, w, dir) })
	if err != nil {
		h.log.Error("archiving a checkpoint (it stays on this host alone)", "checkpoint", what, "err", err)
		return nil
	}
	du := diskUsage(dir)
	h.log.Info("checkpoint archived", "checkpoint", what, "sha256", info.SHA256, "bytes", info.Size, "disk_bytes", du,
		"ms", time.Since(t0).Milliseconds())
	return &Workspace{SHA256: info.SHA256, Bytes: info.Size, DiskBytes: du, ArchivedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

// haveCheckpoint reports whether dir holds a checkpoint.
func haveCheckpoint(dir string) bool {
	ents, err := os.ReadDir(dir)
	return err == nil && len(ents) > 0
}

// placeCheckpoint makes sure dir holds a checkpoint: this host's, else archive a restored
// from the blob store. Without either it does nothing (the restore then says what is
// missing).
func (h *Local) placeCheckpoint(ctx context.Context, what, dir string, a *Workspace) error {
	if a == nil {
		return nil
	}
	h.placing.Lock()
	defer h.placing.Unlock()
	if haveCheckpoint(dir) {
		return nil
	}
	if h.blobs == nil {
		return fmt.Errorf("%s is not on this host, which has no blob store to restore its archive from", what)
	}
	t0 := time.Now()
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	rc, _, err := h.blobs.Open(ctx, a.SHA256)
	if err == nil {
		err = diskarchive.RestoreDir(ctx, rc, dir)
		rc.Close()
	}
	if err != nil {
		return fmt.Errorf("restoring %s from archive %s: %w", what, a.SHA256, err)
	}
	h.log.Info("checkpoint restored", "checkpoint", what, "sha256", a.SHA256, "bytes", a.Bytes, "ms", time.Since(t0).Milliseconds())
	return nil
}
