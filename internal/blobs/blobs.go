// Package blobs keeps the bytes of Files of the graph, content-addressed by their SHA-256:
// the same bytes are kept once, whatever graphs and records name them. Store is the
// interface (a local directory now, an S3-compatible bucket later); records of who may read
// a blob live in the record store, never here.
package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
type Store interface {
	// Put streams r into the store and answers its digest and size. More than max bytes
	// (max > 0) fail with a PayloadTooLarge error and keep nothing. Putting bytes that are
	// there already keeps one copy.
	Put(ctx context.Context, r io.Reader, max int64) (Info, error)
	// Open streams a blob; an unknown digest is NotFound. The caller closes the reader.
	Open(ctx context.Context, sha256 string) (io.ReadCloser, Info, error)
	// Stat answers a blob's size; an unknown digest is NotFound.
	Stat(ctx context.Context, sha256 string) (Info, error)
	// Delete removes a blob; an unknown digest is no error.
	Delete(ctx context.Context, sha256 string) error
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
// to a temporary file first and renamed into place once whole, so a reader never sees a
// partial blob.
type Local struct {
	dir string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store in dir, made when missing.
func NewLocal(dir string) (*Local, error) {
	for _, d := range []string{filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
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
func (l *Local) Put(ctx context.Context, r io.Reader, max int64) (_ Info, err error) {
	f, err := os.CreateTemp(filepath.Join(l.dir, "tmp"), "put-")
	if err != nil {
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
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
		return Info{}, fmt.Errorf("blobs: writing: %w", err)
	}
	if max > 0 && n > max {
		return Info{}, errdefs.New(errdefs.ClassPayloadTooLarge, "", "the file is larger than this server's cap of %d bytes", max)
	}
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	if err := f.Close(); err != nil {
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	tmp := f.Name()
	f = nil
	info := Info{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}
	dst := l.path(info.SHA256)
	if fi, serr := os.Stat(dst); serr == nil && fi.Size() == n {
		os.Remove(tmp)
		return info, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("blobs: %w", err)
	}
	return info, nil
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

// Digest is the hex SHA-256 of b, for tests and small payloads.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return strings.ToLower(hex.EncodeToString(s[:]))
}
