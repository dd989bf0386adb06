// Package blobs keeps the bytes of Files of the graph, content-addressed by their SHA-256:
// the same bytes are kept once, whatever graphs and records name them. Store is the
// interface (a local directory, or an S3-compatible bucket: S3); records of who may read
// a blob live in the record store, never here.
package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Info is what a store knows of a blob.
type Info struct {
	SHA256 string
	Size   int64
}

// Store keeps blobs by content. Implementations are safe for concurrent use.
//
// Adding and removing the last name of a blob go in steps, so that the record store can
// order them (control's Files): Stage writes the bytes aside, Publish puts them in place
// (inside the transaction that records the File), Discard drops what was not published;
// Trash takes a blob out of place (inside the transaction that deletes its last File), and
// after the commit Purge removes it for good, or Restore puts it back when the commit failed.
type Store interface {
	// Put streams r into the store and answers its digest and size. More than max bytes
	// (max > 0) fail with a PayloadTooLarge error and keep nothing. Putting bytes that are
	// there already keeps one copy.
	Put(ctx context.Context, r io.Reader, max int64) (Info, error)
	// Stage streams r aside, as Put does, without putting it in place yet.
	Stage(ctx context.Context, r io.Reader, max int64) (*Staged, error)
	// Publish puts staged bytes in place under their digest (kept once when they are there
	// already). The staged copy is used up.
	Publish(ctx context.Context, st *Staged) error
	// Discard drops staged bytes that were not published; after Publish it does nothing.
	Discard(st *Staged)
	// Open streams a blob; an unknown digest is NotFound. The caller closes the reader.
	Open(ctx context.Context, sha256 string) (io.ReadCloser, Info, error)
	// Stat answers a blob's size; an unknown digest is NotFound.
	Stat(ctx context.Context, sha256 string) (Info, error)
	// Delete removes a blob; an unknown digest is no error.
	Delete(ctx context.Context, sha256 string) error
	// Trash takes a blob out of place (Open no longer finds it) and keeps it aside; an
	// unknown digest is no error.
	Trash(ctx context.Context, sha256 string) error
	// Restore puts a trashed blob back in place (dropping it when the same bytes are there
	// again); Purge removes it. Either is no error for a digest with nothing in the trash.
	Restore(ctx context.Context, sha256 string) error
	Purge(ctx context.Context, sha256 string) error
	// Digests lists the blobs in place and those in the trash.
	Digests(ctx context.Context) (placed, trashed []string, err error)
}

// Staged is bytes a Store holds aside until Publish or Discard.
type Staged struct {
	Info
	// path is where they are; "" once published or discarded.
	path string
}

// ValidDigest reports whether s is a lower-case hex SHA-256.
func ValidDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Local keeps blobs in a directory: <dir>/sha256/<first two hex digits>/<digest>, written
// to a temporary file first (<dir>/tmp) and renamed into place once whole, so a reader
// never sees a partial blob. Trashed blobs wait in <dir>/trash/<digest>.
type Local struct {
	dir string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store in dir, made when missing.
func NewLocal(dir string) (*Local, error) {
	for _, d := range []string{filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp"), filepath.Join(dir, "trash")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blobs: %w", err)
		}
	}
	// Temporary files a crash left behind are nobody's.
	if tmps, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
		for _, e := range tmps {
			os.Remove(filepath.Join(dir, "tmp", e.Name()))
		}
	}
	return &Local{dir: dir}, nil
}

func (l *Local) path(digest string) string {
	return filepath.Join(l.dir, "sha256", digest[:2], digest)
}

// ContextReader reads from r until ctx ends: a copy from it stops with ctx's error.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, r io.Reader, max int64) (Info, error) {
	st, err := l.Stage(ctx, r, max)
	if err != nil {
		return Info{}, err
	}
	defer l.Discard(st)
	return st.Info, l.Publish(ctx, st)
}

// Stage implements Store.
func (l *Local) Stage(ctx context.Context, r io.Reader, max int64) (_ *Staged, err error) {
	f, err := os.CreateTemp(filepath.Join(l.dir, "tmp"), "put-")
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	defer func() {
		f.Close()
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	src := io.Reader(ctxReader{ctx, r})
	if max > 0 {
		src = io.LimitReader(src, max+1)
	}
	n, err := io.Copy(io.MultiWriter(f, h), src)
	if err != nil {
		return nil, fmt.Errorf("blobs: writing: %w", err)
	}
	if max > 0 && n > max {
		return nil, errdefs.New(errdefs.ClassPayloadTooLarge, "", "the file is larger than this server's cap of %d bytes", max)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	if err := f.Chmod(0o400); err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	return &Staged{Info: Info{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, path: f.Name()}, nil
}

// Publish implements Store.
func (l *Local) Publish(ctx context.Context, st *Staged) error {
	if st.path == "" {
		return fmt.Errorf("blobs: %s was published or discarded already", st.SHA256)
	}
	tmp := st.path
	st.path = ""
	dst := l.path(st.SHA256)
	if fi, err := os.Stat(dst); err == nil && fi.Size() == st.Size {
		os.Remove(tmp)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("blobs: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// Discard implements Store.
func (l *Local) Discard(st *Staged) {
	if st != nil && st.path != "" {
		os.Remove(st.path)
		st.path = ""
	}
}

// Open implements Store.
func (l *Local) Open(ctx context.Context, digest string) (io.ReadCloser, Info, error) {
	if !ValidDigest(digest) {
		return nil, Info{}, errdefs.InvalidArgument("%q is not a sha256 digest (64 lower-case hex digits)", digest)
	}
	f, err := os.Open(l.path(digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, Info{}, errdefs.NotFound("no blob %s", digest)
	} else if err != nil {
		return nil, Info{}, fmt.Errorf("blobs: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, fmt.Errorf("blobs: %w", err)
	}
	return f, Info{SHA256: digest, Size: fi.Size()}, nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, digest string) (Info, error) {
	if !ValidDigest(digest) {
		return Info{}, errdefs.InvalidArgument("%q is not a sha256 digest (64 lower-case hex digits)", digest)
	}
	fi, err := os.Stat(l.path(digest))
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, errdefs.NotFound("no blob %s", digest)
	} else if err != nil {
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	return Info{SHA256: digest, Size: fi.Size()}, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	if err := os.Remove(l.path(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

func (l *Local) trashPath(digest string) string { return filepath.Join(l.dir, "trash", digest) }

// Trash implements Store.
func (l *Local) Trash(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	if err := os.Rename(l.path(digest), l.trashPath(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// Restore implements Store.
func (l *Local) Restore(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	src := l.trashPath(digest)
	if _, err := os.Stat(l.path(digest)); err == nil {
		return l.Purge(ctx, digest) // the same bytes were put in place again meanwhile
	}
	if err := os.MkdirAll(filepath.Dir(l.path(digest)), 0o700); err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	if err := os.Rename(src, l.path(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// Purge implements Store.
func (l *Local) Purge(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	if err := os.Remove(l.trashPath(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// Digests implements Store.
func (l *Local) Digests(ctx context.Context) (placed, trashed []string, err error) {
	err = filepath.WalkDir(filepath.Join(l.dir, "sha256"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && ValidDigest(d.Name()) {
			placed = append(placed, d.Name())
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("blobs: %w", err)
	}
	es, err := os.ReadDir(filepath.Join(l.dir, "trash"))
	if err != nil {
		return nil, nil, fmt.Errorf("blobs: %w", err)
	}
	for _, e := range es {
		if ValidDigest(e.Name()) {
			trashed = append(trashed, e.Name())
		}
	}
	return placed, trashed, nil
}

// Digest is the hex SHA-256 of b, for tests and small payloads.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return strings.ToLower(hex.EncodeToString(s[:]))
}
