package hostagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Workspace files stream between the caller and the guest agent, which resolves every path
// beneath /workspace (openat2 RESOLVE_BENEATH): "..", absolute paths elsewhere and symlinks
// that leave are path_outside_workspace.

// agentOf answers the agent of a running long-lived sandbox.
func (h *Local) agentOf(id string) (*agent.Client, error) {
	_, l, _, err := h.running(id)
	if err != nil {
		return nil, err
	}
	return l.agent, nil
}

// WriteFile streams r into a workspace file, replacing it whole once r ends.
func (h *Local) WriteFile(ctx context.Context, sandboxID, p string, r io.Reader) (FileEntry, error) {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return FileEntry{}, err
	}
	return writeFile(ctx, ag, p, r)
}

// writeFile writes the file, then answers its entry. The sandbox's own processes may have
// removed the file by then (a program that consumes its input as it lands): the write still
// happened, so it answers the entry just written rather than not found.
func writeFile(ctx context.Context, ag *agent.Client, p string, r io.Reader) (FileEntry, error) {
	if r == nil {
		r = strings.NewReader("")
	}
	cr := &countingReader{r: r}
	if err := ag.WriteFile(ctx, p, 0, cr); err != nil {
		return FileEntry{}, agentError(err)
	}
	e, err := statFile(ctx, ag, p)
	if errdefs.IsNotFound(err) {
		rel := workspaceRel(p)
		return FileEntry{Path: rel, Name: path.Base(rel), Type: agent.TypeFile, Size: cr.n, Mode: "0644", MTime: time.Now().UTC().Format(time.RFC3339)}, nil
	}
	return e, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// StatFile answers a workspace file's or directory's entry.
func (h *Local) StatFile(ctx context.Context, sandboxID, p string) (FileEntry, error) {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return FileEntry{}, err
	}
	return statFile(ctx, ag, p)
}

func statFile(ctx context.Context, ag *agent.Client, p string) (FileEntry, error) {
	es, err := ag.List(ctx, p, false)
	if err != nil {
		return FileEntry{}, agentError(err)
	}
	rel := workspaceRel(p)
	for _, e := range es {
		if e.Path == rel {
			return e, nil
		}
	}
	return FileEntry{Path: rel, Name: path.Base(rel), Type: agent.TypeFile}, nil
}

// workspaceRel is how the agent names path p: relative to /workspace, cleaned.
func workspaceRel(p string) string {
	if strings.HasPrefix(p, "/") {
		p = strings.TrimPrefix(p, agent.Workspace)
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "."
	}
	return rel
}

// OpenFile streams a workspace file and answers its entry (Size is -1 when unknown: a
// symlink read through). A directory is is_directory. The caller closes the reader.
func (h *Local) OpenFile(ctx context.Context, sandboxID, p string) (FileEntry, io.ReadCloser, error) {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return FileEntry{}, nil, err
	}
	es, err := ag.List(ctx, p, false)
	if err != nil {
		return FileEntry{}, nil, agentError(err)
	}
	rel := workspaceRel(p)
	e := FileEntry{Path: rel, Name: path.Base(rel), Type: agent.TypeDir, Size: -1}
	if len(es) == 1 && es[0].Path == rel {
		e = es[0]
	}
	switch e.Type {
	case agent.TypeDir:
		return FileEntry{}, nil, errdefs.New(errdefs.ClassInvalidArgument, agent.CodeIsDir, "%s is a directory; list it, or read its files", p)
	case agent.TypeSymlink:
		e.Size = -1
	}
	rc, err := ag.ReadFile(ctx, p)
	if err != nil {
		return FileEntry{}, nil, agentError(err)
	}
	// The size the listing said may be stale (the file replaced since): the download
	// announces what the agent opened.
	e.Size = rc.Size
	return e, rc, nil
}

// ListFiles lists a workspace directory (recursive: everything beneath it).
func (h *Local) ListFiles(ctx context.Context, sandboxID, p string, recursive bool) ([]FileEntry, error) {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	if p == "" {
		p = "."
	}
	es, err := ag.List(ctx, p, recursive)
	if err != nil {
		return nil, agentError(err)
	}
	return es, nil
}

// RemoveFile removes a workspace file, symlink or directory (a directory that is not empty
// only with recursive).
func (h *Local) RemoveFile(ctx context.Context, sandboxID, p string, recursive bool) error {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return err
	}
	if err := ag.Remove(ctx, p, recursive); err != nil {
		return agentError(err)
	}
	return nil
}

// MakeDir makes a workspace directory and its parents.
func (h *Local) MakeDir(ctx context.Context, sandboxID, p string) (FileEntry, error) {
	ag, err := h.agentOf(sandboxID)
	if err != nil {
		return FileEntry{}, err
	}
	if err := ag.Mkdir(ctx, p); err != nil {
		return FileEntry{}, agentError(err)
	}
	// Listing a directory gives its contents: look its own entry up in its parent.
	rel := workspaceRel(p)
	es, err := ag.List(ctx, path.Dir(rel), false)
	if err != nil {
		return FileEntry{}, agentError(err)
	}
	for _, e := range es {
		if e.Path == rel {
			return e, nil
		}
	}
	return FileEntry{Path: rel, Name: path.Base(rel), Type: agent.TypeDir, Mode: "0755", MTime: time.Now().UTC().Format(time.RFC3339)}, nil
}

// agentError classifies an error of the guest agent.
func agentError(err error) error {
	var ae *agent.Error
	if !errors.As(err, &ae) {
		return err
	}
	msg := ae.Message
	switch ae.Code {
	case agent.CodePathOutside:
		return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodePathOutsideWorkspace, "%s", msg)
	case agent.CodeNotFound:
		return errdefs.New(errdefs.ClassNotFound, "", "%s", msg)
	case agent.CodeIsDir, agent.CodeNotDir, agent.CodeInvalid, agent.CodeNotSupported:
		return errdefs.New(errdefs.ClassInvalidArgument, ae.Code, "%s", msg)
	case agent.CodeExists, agent.CodeNotEmpty:
		return errdefs.New(errdefs.ClassConflict, ae.Code, "%s", msg)
	case agent.CodeDiskFull:
		return errdefs.New(errdefs.ClassPayloadTooLarge, "disk_full", "%s", msg)
	case agent.CodePermission:
		return errdefs.New(errdefs.ClassForbidden, ae.Code, "%s", msg)
	}
	return fmt.Errorf("the sandbox's agent: %w", err)
}
