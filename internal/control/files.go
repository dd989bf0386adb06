package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Workspace files stream between the API and the guest agent, which resolves every path
// beneath /workspace (openat2 RESOLVE_BENEATH): "..", absolute paths elsewhere and symlinks
// that leave are path_outside_workspace. Files of the graph are blobs (by sha256) named by
// records of one graph: another graph's File is not_found, whoever holds the same bytes.

// FileEntry is one entry of a workspace listing (the agent's).
type FileEntry = hostagent.FileEntry

// ImportedFile is the answer to an import: the workspace entry and the bytes' digest.
type ImportedFile struct {
	FileEntry
	SHA256 string `json:"sha256"`
}

// workspace checks that a long-lived sandbox of graph runs here, so that its files are
// reachable.
func (s *Service) workspace(ctx context.Context, graph, id string) error {
	sb, hs, err := s.sandboxFor(ctx, graph, id)
	if err != nil {
		return err
	}
	if sb.OneCall {
		return errdefs.Conflict("sandbox %s is a one-call run's; its workspace ended with its run", id)
	}
	if sb.Status != store.SandboxRunning {
		return errdefs.Conflict("sandbox %s is %s; its files are reachable while it runs (resume a stopped one)", id, sb.Status)
	}
	if hs == nil {
		// Running, held by another control plane on the same database (docs/deploy.md).
		return errdefs.Conflict("sandbox %s is %s and not held by this server", id, sb.Status)
	}
	return nil
}

// WriteFile streams r into a workspace file, replacing it whole once r ends.
func (s *Service) WriteFile(ctx context.Context, graph, sandboxID, p string, r io.Reader) (FileEntry, error) {
	if err := s.workspace(ctx, graph, sandboxID); err != nil {
		return FileEntry{}, err
	}
	return s.host.WriteFile(ctx, sandboxID, p, r)
}

// OpenFile streams a workspace file and answers its entry (Size is -1 when unknown: a
// symlink read through). A directory is is_directory. The caller closes the reader.
func (s *Service) OpenFile(ctx context.Context, graph, sandboxID, p string) (FileEntry, io.ReadCloser, error) {
	if err := s.workspace(ctx, graph, sandboxID); err != nil {
		return FileEntry{}, nil, err
	}
	return s.host.OpenFile(ctx, sandboxID, p)
}

// ListFiles lists a workspace directory (recursive: everything beneath it).
func (s *Service) ListFiles(ctx context.Context, graph, sandboxID, p string, recursive bool) ([]FileEntry, error) {
	if err := s.workspace(ctx, graph, sandboxID); err != nil {
		return nil, err
	}
	return s.host.ListFiles(ctx, sandboxID, p, recursive)
}

// RemoveFile removes a workspace file, symlink or directory (a directory that is not empty
// only with recursive).
func (s *Service) RemoveFile(ctx context.Context, graph, sandboxID, p string, recursive bool) error {
	if err := s.workspace(ctx, graph, sandboxID); err != nil {
		return err
	}
	return s.host.RemoveFile(ctx, sandboxID, p, recursive)
}

// MakeDir makes a workspace directory and its parents.
func (s *Service) MakeDir(ctx context.Context, graph, sandboxID, p string) (FileEntry, error) {
	if err := s.workspace(ctx, graph, sandboxID); err != nil {
		return FileEntry{}, err
	}
	return s.host.MakeDir(ctx, sandboxID, p)
}

func (s *Service) blobStore() (blobs.Store, error) {
	if s.blobs == nil {
		return nil, errdefs.Unavailable("this server keeps no Files (it has no blob store)")
	}
	return s.blobs, nil
}

// KeepFile keeps a workspace file as a File of the graph, naming the sandbox and path as its
// origin (POST /v1/files?source_sandbox=&source_path=). Answers 201 with the File.
func (s *Service) KeepFile(ctx context.Context, c Caller, sandboxID, p, idemKey string) (Response, error) {
	bs, err := s.blobStore()
	if err != nil {
		return Response{}, err
	}
	if sandboxID == "" || p == "" {
		return Response{}, errdefs.InvalidArgument("keeping a file needs source_sandbox and source_path")
	}
	hash := idempotency.Hash(RouteKeepFile, c.Graph, "sandbox", sandboxID, p)
	return s.keys().Do(ctx, c.Graph, idemKey, RouteKeepFile, hash, func(ctx context.Context) (Response, error) {
		e, rc, err := s.OpenFile(ctx, c.Graph, sandboxID, p)
		if err != nil {
			return Response{}, err
		}
		defer rc.Close()
		if e.Type != hostagent.TypeFile && e.Type != hostagent.TypeSymlink {
			return Response{}, errdefs.InvalidArgument("%s is a %s, not a file", p, e.Type)
		}
		if e.Size > s.cfg.MaxFileBytes {
			return Response{}, errdefs.New(errdefs.ClassPayloadTooLarge, "", "%s is %d bytes; this server keeps Files of up to %d", p, e.Size, s.cfg.MaxFileBytes)
		}
		if err := s.roomForFile(ctx, c.Graph, max(e.Size, unknownSize)); err != nil {
			return Response{}, err
		}
		st, err := bs.Stage(ctx, rc, s.cfg.MaxFileBytes)
		if err != nil {
			return Response{}, err
		}
		defer bs.Discard(st)
		f := store.File{ID: ids.New(ids.File), Graph: c.Graph, SHA256: st.SHA256, Size: st.Size, Name: e.Name,
			Origin: c.fileOrigin(store.FileOrigin{Kind: store.FileFromSandbox, Sandbox: sandboxID, Path: e.Path}), CreatedAt: s.now()}
		if err := s.st.WithTx(ctx, func(q store.Queries) error { return s.createFile(ctx, q, bs, f, st) }); err != nil {
			return Response{}, err
		}
		s.log.Info("file kept", "graph", c.Graph, "file", f.ID, "sandbox", sandboxID, "sha256", f.SHA256, "bytes", f.Size)
		return idempotency.JSON(idempotency.Created, f)
	})
}

// UploadFile stores r as a File of the graph (POST /v1/files). The bytes go to the blob
// store first, so that the idempotency hash can name them. Answers 201 with the File.
func (s *Service) UploadFile(ctx context.Context, c Caller, name string, r io.Reader, idemKey string) (Response, error) {
	bs, err := s.blobStore()
	if err != nil {
		return Response{}, err
	}
	if err := idempotency.Check(idemKey); err != nil {
		return Response{}, err
	}
	if strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return Response{}, errdefs.InvalidArgument("name %q: a file name, without slashes, of at most 255 bytes", name)
	}
	// Before the bytes are read, unless the key names an earlier call (which may have filled
	// the quota): its retry is answered from the key.
	if err := s.roomForFile(ctx, c.Graph, unknownSize); err != nil && !s.keyTaken(ctx, c.Graph, idemKey) {
		return Response{}, err
	}
	st, err := bs.Stage(ctx, r, s.cfg.MaxFileBytes)
	if err != nil {
		return Response{}, err
	}
	defer bs.Discard(st)
	hash := idempotency.Hash(RouteKeepFile, c.Graph, "upload", name, st.SHA256)
	return s.keys().Do(ctx, c.Graph, idemKey, RouteKeepFile, hash, func(ctx context.Context) (Response, error) {
		f := store.File{ID: ids.New(ids.File), Graph: c.Graph, SHA256: st.SHA256, Size: st.Size, Name: name,
			Origin: c.fileOrigin(store.FileOrigin{Kind: store.FileFromUpload}), CreatedAt: s.now()}
		if err := s.st.WithTx(ctx, func(q store.Queries) error { return s.createFile(ctx, q, bs, f, st) }); err != nil {
			return Response{}, err
		}
		s.log.Info("file uploaded", "graph", c.Graph, "file", f.ID, "sha256", f.SHA256, "bytes", f.Size)
		return idempotency.JSON(idempotency.Created, f)
	})
}

// Files of the graph are content-addressed: one blob holds the bytes of every File, of any
// graph, with the same sha256, and goes when the last of them is deleted. A File and its
// blob change together in one transaction of the store, where a File's creation and the
// deletion of the last File with the same bytes exclude each other (store.Queries.DeleteFile):
//
//   - a new File's bytes are staged aside first; the transaction checks the graph's quotas,
//     writes the record and then puts the bytes in place (kept once when there already);
//   - deleting the last File with some bytes takes the blob out of place (into the blob
//     store's trash) inside its transaction, and removes it for good after the commit (or
//     puts it back when the commit failed).
//
// So a File created while its bytes' last File is deleted either commits first (the delete
// then sees it and keeps the blob) or after (and puts its own copy in place). A crash between
// the two steps of either leaves a blob in place that no File names, or one in the trash that
// a File still names: Recover's sweepBlobs removes the first and puts the second back.

// roomForFile refuses a File of size bytes (unknownSize: not known yet) where the graph's
// quotas have no room: before its bytes are read; createFile checks again with the record.
func (s *Service) roomForFile(ctx context.Context, graph string, size int64) error {
	u, err := s.st.GraphUsage(ctx, graph)
	if err != nil {
		return err
	}
	return s.checkQuotas(graph, u, adds{QuotaFiles, 1}, adds{QuotaFileBytes, size})
}

// createFile records f, whose bytes st holds, within the graph's quotas, and puts its bytes
// in place, in the transaction q.
func (s *Service) createFile(ctx context.Context, q store.Queries, bs blobs.Store, f store.File, st *blobs.Staged) error {
	u, err := q.GraphUsage(ctx, f.Graph)
	if err != nil {
		return err
	}
	if err := s.checkQuotas(f.Graph, u, adds{QuotaFiles, 1}, adds{QuotaFileBytes, f.Size}); err != nil {
		return err
	}
	if err := q.CreateFile(ctx, f); err != nil {
		return err
	}
	if err := bs.Publish(ctx, st); err != nil {
		// The transaction may go on (a run's records): without the File.
		if _, _, derr := q.DeleteFile(ctx, f.Graph, f.ID); derr != nil {
			return errors.Join(err, derr)
		}
		return err
	}
	return nil
}

// DeleteFile deletes a File of the graph (DELETE /v1/files/{id}) and answers it; its bytes
// go with the last File, of any graph, that names them. Workspaces that imported it keep
// their copies. A File a template version names (by id, or by sha256 when no other File of
// the graph has those bytes) is file_in_use: versions are immutable and runs of them read it.
func (s *Service) DeleteFile(ctx context.Context, graph, id string) (store.File, error) {
	bs, err := s.blobStore()
	if err != nil {
		return store.File{}, err
	}
	ctx = context.WithoutCancel(ctx)
	var f store.File
	var last, trashed bool
	err = s.st.WithTx(ctx, func(q store.Queries) error {
		var err error
		if f, last, err = q.DeleteFile(ctx, graph, id); err != nil {
			return err
		}
		refs := []string{f.ID}
		if _, err := q.GetFileBySHA256(ctx, graph, f.SHA256); errdefs.IsNotFound(err) {
			refs = append(refs, f.SHA256)
		} else if err != nil {
			return err
		}
		tpls, err := q.TemplatesNamingFile(ctx, graph, refs...)
		if err != nil {
			return err
		}
		if len(tpls) > 0 {
			names := make([]string, len(tpls))
			for i, t := range tpls {
				names[i] = fmt.Sprintf("%s@%d", t.Name, t.Version)
			}
			return errdefs.New(errdefs.ClassConflict, errdefs.CodeFileInUse,
				"file %s is named by template version %s; template versions are immutable and their runs read it, so it stays",
				id, strings.Join(names, ", "))
		}
		if !last {
			return nil
		}
		if err := bs.Trash(ctx, f.SHA256); err != nil {
			return err
		}
		trashed = true
		return nil
	})
	if err != nil {
		if trashed {
			if rerr := bs.Restore(ctx, f.SHA256); rerr != nil {
				s.log.Error("putting back a blob whose File was not deleted", "sha256", f.SHA256, "err", rerr)
			}
		}
		return store.File{}, err
	}
	if last {
		if err := bs.Purge(ctx, f.SHA256); err != nil {
			s.log.Error("removing a deleted blob", "sha256", f.SHA256, "err", err)
		}
	}
	s.log.Info("file deleted", "graph", graph, "file", id, "sha256", f.SHA256, "blob_removed", last)
	return f, nil
}

// sweepBlobs runs at start, before any File is created: a blob in place that no File names
// (a crash after it was put in place, before its record committed) goes; one in the trash
// that a File still names (a crash before its deletion committed) is put back, and any other
// in the trash goes.
func (s *Service) sweepBlobs(ctx context.Context) (removed int, err error) {
	if s.blobs == nil {
		return 0, nil
	}
	placed, trashed, err := s.blobs.Digests(ctx)
	if err != nil {
		return 0, err
	}
	for _, sha := range trashed {
		named, err := s.st.BlobNamed(ctx, sha)
		if err != nil {
			return removed, err
		}
		if named {
			err = s.blobs.Restore(ctx, sha)
		} else {
			err = s.blobs.Purge(ctx, sha)
		}
		if err != nil {
			return removed, err
		}
	}
	for _, sha := range placed {
		named, err := s.st.BlobNamed(ctx, sha)
		if err != nil || named {
			if err != nil {
				return removed, err
			}
			continue
		}
		if err := s.blobs.Delete(ctx, sha); err != nil {
			return removed, err
		}
		removed++
		s.log.Warn("blob no File names removed", "sha256", sha)
	}
	return removed, nil
}

// ImportFile copies the graph's File with this sha256 into a workspace at path
// (PUT /v1/sandboxes/files/content). Answers 200 with the workspace entry.
func (s *Service) ImportFile(ctx context.Context, c Caller, sandboxID, p, sha, idemKey string) (Response, error) {
	bs, err := s.blobStore()
	if err != nil {
		return Response{}, err
	}
	if sandboxID == "" || p == "" || sha == "" {
		return Response{}, errdefs.InvalidArgument("importing a file needs sandbox, path and source_sha256")
	}
	sha = strings.ToLower(sha)
	if !blobs.ValidDigest(sha) {
		return Response{}, errdefs.InvalidArgument("source_sha256 %q is not a sha256 digest (64 hex digits)", sha)
	}
	hash := idempotency.Hash(RouteImportFile, c.Graph, sandboxID, p, sha)
	return s.keys().Do(ctx, c.Graph, idemKey, RouteImportFile, hash, func(ctx context.Context) (Response, error) {
		if _, err := s.st.GetFileBySHA256(ctx, c.Graph, sha); err != nil {
			return Response{}, err
		}
		rc, _, err := bs.Open(ctx, sha)
		if err != nil {
			return Response{}, err
		}
		defer rc.Close()
		e, err := s.WriteFile(ctx, c.Graph, sandboxID, p, rc)
		if err != nil {
			return Response{}, err
		}
		return idempotency.JSON(idempotency.Done, ImportedFile{FileEntry: e, SHA256: sha})
	})
}

// GetFile answers a File of the graph.
func (s *Service) GetFile(ctx context.Context, graph, id string) (store.File, error) {
	return s.st.GetFile(ctx, graph, id)
}

// OpenGraphFile streams a File's bytes. The caller closes the reader.
func (s *Service) OpenGraphFile(ctx context.Context, graph, id string) (store.File, io.ReadCloser, error) {
	bs, err := s.blobStore()
	if err != nil {
		return store.File{}, nil, err
	}
	f, err := s.st.GetFile(ctx, graph, id)
	if err != nil {
		return f, nil, err
	}
	rc, _, err := bs.Open(ctx, f.SHA256)
	if err != nil {
		return f, nil, fmt.Errorf("file %s: its bytes: %w", id, err)
	}
	return f, rc, nil
}

// resolveFile finds a File of the graph by id (fil_…) or sha256.
func (s *Service) resolveFile(ctx context.Context, graph, ref string) (store.File, error) {
	if strings.HasPrefix(ref, ids.File) {
		return s.st.GetFile(ctx, graph, ref)
	}
	if blobs.ValidDigest(strings.ToLower(ref)) {
		return s.st.GetFileBySHA256(ctx, graph, strings.ToLower(ref))
	}
	return store.File{}, errdefs.InvalidArgument("file %q: want a File id (fil_…) or its sha256", ref)
}

// templateFiles resolves a template's Files into what a sandbox start copies from the blobs.
func (s *Service) templateFiles(ctx context.Context, graph string, tfs []store.TemplateFile) ([]hostagent.File, error) {
	if len(tfs) == 0 {
		return nil, nil
	}
	if _, err := s.blobStore(); err != nil {
		return nil, err
	}
	out := make([]hostagent.File, 0, len(tfs))
	for _, tf := range tfs {
		f, err := s.resolveFile(ctx, graph, tf.File)
		if err != nil {
			return nil, fmt.Errorf("the template's file %s: %w", tf.File, err)
		}
		out = append(out, hostagent.File{Path: tf.Path, SHA256: f.SHA256})
	}
	return out, nil
}
