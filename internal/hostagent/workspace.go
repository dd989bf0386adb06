package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/diskarchive"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// A stopped sandbox's workspace (its whole disk) is archived to the blob store, so that it can
// start again where this host's copy is gone. The host marks its own copy with the archive it
// matches (<DataDir>/workspaces/<sandbox>: the archive's digest), written when it archives or
// restores the disk and removed when the sandbox starts (its disk changes then): a resume that
// brings an archive uses the local disk only when its mark names that archive.

func (h *Local) markFile(id string) string { return filepath.Join(h.dataDir, "workspaces", id) }

func (h *Local) mark(id, sha string) error {
	if err := os.MkdirAll(filepath.Dir(h.markFile(id)), 0o700); err != nil {
		return err
	}
	return os.WriteFile(h.markFile(id), []byte(sha+"\n"), 0o600)
}

func (h *Local) marked(id string) string {
	b, _ := os.ReadFile(h.markFile(id))
	return strings.TrimSpace(string(b))
}

func (h *Local) unmark(id string) {
	if err := os.Remove(h.markFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Warn("removing a workspace's mark", "sandbox", id, "err", err)
	}
}

func (h *Local) diskFiler() (runtime.DiskFiler, error) {
	df, ok := h.driver.(runtime.DiskFiler)
	if !ok {
		return nil, NotSupported("runtime %q keeps no disk to archive", h.driver.Name())
	}
	if h.blobs == nil {
		return nil, NotSupported("this host has no blob store to archive workspaces to")
	}
	return df, nil
}

// ArchiveWorkspace implements Host.
func (h *Local) ArchiveWorkspace(ctx context.Context, id string) (Workspace, error) {
	df, err := h.diskFiler()
	if err != nil {
		return Workspace{}, err
	}
	s := h.lookup(id, true)
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	running := s.live != nil
	s.mu.Unlock()
	if running {
		return Workspace{}, errdefs.Conflict("sandbox %s is running: stop it before archiving its workspace", id)
	}
	disk, err := df.DiskFile(ctx, id)
	if err != nil {
		return Workspace{}, fmt.Errorf("archiving sandbox %s's workspace: %w", id, err)
	}
	st, err := os.Stat(disk)
	if err != nil {
		return Workspace{}, err
	}
	t0 := time.Now()
	info, err := h.putArchive(ctx, func(w io.Writer) error { return diskarchive.Write(ctx, w, disk) })
	if err != nil {
		return Workspace{}, fmt.Errorf("archiving sandbox %s's workspace: %w", id, err)
	}
	if err := h.mark(id, info.SHA256); err != nil {
		h.log.Warn("marking an archived workspace", "sandbox", id, "err", err)
	}
	h.log.Info("workspace archived", "sandbox", id, "sha256", info.SHA256, "bytes", info.Size, "disk_bytes", st.Size(),
		"ms", time.Since(t0).Milliseconds())
	return Workspace{SHA256: info.SHA256, Bytes: info.Size, DiskBytes: st.Size(), ArchivedAt: time.Now().UTC().Truncate(time.Millisecond)}, nil
}

// placeWorkspace makes sure a stopped sandbox about to start has the disk of its archive
// ws (when it has one): this host's copy when its mark names ws, else ws restored from the
// blob store, into a sandbox created for it when this host has none (created is then true:
// a failed start destroys it). The caller holds s.ops.
func (h *Local) placeWorkspace(ctx context.Context, spec runtime.Spec, ws *Workspace) (created bool, err error) {
	if ws == nil {
		return false, nil
	}
	df, err := h.diskFiler()
	if err != nil {
		return false, err
	}
	disk, err := df.DiskFile(ctx, spec.ID)
	switch {
	case err == nil && h.marked(spec.ID) == ws.SHA256:
		return false, nil // this host's copy is the archive's
	case errors.Is(err, runtime.ErrNotFound):
		if err := h.driver.Create(ctx, spec); err != nil {
			return false, fmt.Errorf("creating sandbox %s for its archived workspace: %w", spec.ID, err)
		}
		created = true
		if disk, err = df.DiskFile(ctx, spec.ID); err != nil {
			return created, h.undoCreate(spec.ID, err)
		}
	case err != nil:
		return false, err
	}
	t0 := time.Now()
	rc, _, err := h.blobs.Open(ctx, ws.SHA256)
	if err == nil {
		err = diskarchive.Restore(ctx, rc, disk)
		rc.Close()
	}
	if err != nil {
		err = fmt.Errorf("restoring sandbox %s's workspace from archive %s: %w", spec.ID, ws.SHA256, err)
		if created {
			return created, h.undoCreate(spec.ID, err)
		}
		return false, err
	}
	if err := h.mark(spec.ID, ws.SHA256); err != nil {
		h.log.Warn("marking a restored workspace", "sandbox", spec.ID, "err", err)
	}
	h.log.Info("workspace restored", "sandbox", spec.ID, "sha256", ws.SHA256, "created", created, "ms", time.Since(t0).Milliseconds())
	return created, nil
}

// putArchive streams what write writes into the blob store.
func (h *Local) putArchive(ctx context.Context, write func(w io.Writer) error) (blobs.Info, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	info, err := h.blobs.Put(ctx, pr, 0)
	pr.CloseWithError(errors.New("the upload ended"))
	return info, err
}

// undoCreate destroys a sandbox placeWorkspace created, joining what fails to err.
func (h *Local) undoCreate(id string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if derr := h.driver.Destroy(ctx, id); derr != nil {
		err = errors.Join(err, fmt.Errorf("destroying sandbox %s: %w", id, derr))
	}
	return err
}
