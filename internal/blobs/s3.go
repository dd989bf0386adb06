package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// S3 keeps blobs in a bucket of an S3-compatible store (AWS S3, MinIO, SeaweedFS, …):
// <prefix>sha256/<digest> in place, <prefix>trash/<digest> trashed. Bytes are staged in a
// local directory first (hashed and counted on the way), then uploaded from the file, in
// parts past 16 MiB, with each part's MD5 checked by the server; reads verify the SHA-256 of
// what they stream. Nothing holds a whole object in memory.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
	stage  *Local // its tmp directory holds staged bytes
	// MinAge: Digests leaves out objects younger than this (default sweepAge).
	MinAge time.Duration
}

var _ Store = (*S3)(nil)

// Shared is a store other machines reach too: Location names it (its endpoint, bucket and
// prefix; never its credentials), so that two machines can tell that they share it.
type Shared interface {
	Location() string
}

var _ Shared = (*S3)(nil)

// Location is the bucket's endpoint, name and prefix.
func (s *S3) Location() string {
	return s.c.EndpointURL().String() + "/" + s.bucket + "/" + s.prefix
}

// S3Options are what NewS3 needs beyond the bucket's URL.
type S3Options struct {
	// StageDir is the local directory staged bytes wait in.
	StageDir string
	// Getenv reads the credentials' variables (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, or MINIO_ROOT_USER and MINIO_ROOT_PASSWORD); nil is os.Getenv.
	Getenv func(string) string
}

// IsS3URL reports whether a --blobs value names a bucket.
func IsS3URL(s string) bool { return strings.HasPrefix(s, "s3://") }

// NewS3 opens the bucket raw names: s3://bucket[/prefix]?endpoint=URL[&region=…]. The
// endpoint's scheme says whether TLS is used (https unless http:// is named); without an
// endpoint it is AWS's. The bucket must exist.
func NewS3(ctx context.Context, raw string, o S3Options) (*S3, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return nil, errdefs.InvalidArgument("blobs: %q: want s3://bucket[/prefix]?endpoint=URL", raw)
	}
	q := u.Query()
	endpoint, secure := "s3.amazonaws.com", true
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
			return nil, errdefs.InvalidArgument("blobs: endpoint %q: want http(s)://host[:port]", e)
		}
		endpoint, secure = eu.Host, eu.Scheme == "https"
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" {
		id, secret = getenv("MINIO_ROOT_USER"), getenv("MINIO_ROOT_PASSWORD")
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(id, secret, getenv("AWS_SESSION_TOKEN")),
		Secure: secure,
		Region: q.Get("region"),
	})
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	ok, err := c.BucketExists(ctx, u.Host)
	if err != nil {
		return nil, fmt.Errorf("blobs: bucket %s at %s: %w", u.Host, endpoint, err)
	} else if !ok {
		return nil, fmt.Errorf("blobs: bucket %s at %s does not exist; create it first", u.Host, endpoint)
	}
	stage, err := NewLocal(o.StageDir)
	if err != nil {
		return nil, err
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &S3{c: c, bucket: u.Host, prefix: prefix, stage: stage, MinAge: sweepAge}, nil
}

func (s *S3) placed(digest string) string  { return s.prefix + "sha256/" + digest }
func (s *S3) trashed(digest string) string { return s.prefix + "trash/" + digest }

func notFoundS3(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey"
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, r io.Reader, max int64) (Info, error) {
	st, err := s.Stage(ctx, r, max)
	if err != nil {
		return Info{}, err
	}
	defer s.Discard(st)
	return st.Info, s.Publish(ctx, st)
}

// Stage implements Store: the bytes wait in the local stage directory.
func (s *S3) Stage(ctx context.Context, r io.Reader, max int64) (*Staged, error) {
	return s.stage.Stage(ctx, r, max)
}

// Publish implements Store: it uploads the staged file unless the bucket has the blob.
func (s *S3) Publish(ctx context.Context, st *Staged) error {
	if st.path == "" {
		return fmt.Errorf("blobs: %s was published or discarded already", st.SHA256)
	}
	defer s.Discard(st)
	if info, err := s.Stat(ctx, st.SHA256); err == nil && info.Size == st.Size {
		return nil
	}
	f, err := os.Open(st.path)
	if err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	defer f.Close()
	_, err = s.c.PutObject(ctx, s.bucket, s.placed(st.SHA256), f, st.Size, minio.PutObjectOptions{
		ContentType:    "application/octet-stream",
		UserMetadata:   map[string]string{"sha256": st.SHA256},
		SendContentMd5: true,
		PartSize:       16 << 20,
		NumThreads:     2,
	})
	if err != nil {
		return fmt.Errorf("blobs: uploading %s: %w", st.SHA256, err)
	}
	return nil
}

// Discard implements Store.
func (s *S3) Discard(st *Staged) { s.stage.Discard(st) }

// Open implements Store: the reader fails at its end when the bytes are not the digest's.
func (s *S3) Open(ctx context.Context, digest string) (io.ReadCloser, Info, error) {
	if !ValidDigest(digest) {
		return nil, Info{}, errdefs.InvalidArgument("%q is not a sha256 digest (64 lower-case hex digits)", digest)
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.placed(digest), minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s.statErr(digest, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, Info{}, s.statErr(digest, err)
	}
	info := Info{SHA256: digest, Size: oi.Size}
	return &verifying{r: obj, c: obj, h: sha256.New(), want: digest, size: oi.Size}, info, nil
}

func (s *S3) statErr(digest string, err error) error {
	if notFoundS3(err) {
		return errdefs.NotFound("no blob %s", digest)
	}
	return fmt.Errorf("blobs: %s: %w", digest, err)
}

// verifying hashes what it reads and fails at EOF when the bytes are not the digest's.
type verifying struct {
	r    io.Reader
	c    io.Closer
	h    hash.Hash
	want string
	n    int64
	size int64
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want || v.n != v.size {
			return n, fmt.Errorf("blobs: %s read back as %s (%d bytes of %d): the store's copy is damaged", v.want, got, v.n, v.size)
		}
	}
	return n, err
}

func (v *verifying) Close() error { return v.c.Close() }

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, digest string) (Info, error) {
	if !ValidDigest(digest) {
		return Info{}, errdefs.InvalidArgument("%q is not a sha256 digest (64 lower-case hex digits)", digest)
	}
	oi, err := s.c.StatObject(ctx, s.bucket, s.placed(digest), minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.statErr(digest, err)
	}
	return Info{SHA256: digest, Size: oi.Size}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	return s.remove(ctx, s.placed(digest))
}

func (s *S3) remove(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !notFoundS3(err) {
		return fmt.Errorf("blobs: removing %s: %w", key, err)
	}
	return nil
}

// move copies from to to inside the bucket and removes from; a missing from is no error.
func (s *S3) move(ctx context.Context, from, to string) error {
	_, err := s.c.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: to}, minio.CopySrcOptions{Bucket: s.bucket, Object: from})
	if notFoundS3(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("blobs: copying %s to %s: %w", from, to, err)
	}
	return s.remove(ctx, from)
}

// Trash implements Store.
func (s *S3) Trash(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	return s.move(ctx, s.placed(digest), s.trashed(digest))
}

// Restore implements Store.
func (s *S3) Restore(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	if _, err := s.Stat(ctx, digest); err == nil {
		return s.Purge(ctx, digest) // the same bytes were put in place again meanwhile
	}
	return s.move(ctx, s.trashed(digest), s.placed(digest))
}

// Purge implements Store.
func (s *S3) Purge(ctx context.Context, digest string) error {
	if !ValidDigest(digest) {
		return errdefs.InvalidArgument("%q is not a sha256 digest", digest)
	}
	return s.remove(ctx, s.trashed(digest))
}

// sweepAge: Digests leaves out objects younger than this. A bucket may be shared by several
// control planes, and another's File may be between its blob's Publish and its commit: the
// start's sweep of blobs no File names must not take those.
const sweepAge = 10 * time.Minute

// Digests implements Store, leaving out blobs written in the last MinAge.
func (s *S3) Digests(ctx context.Context) (placed, trashed []string, err error) {
	list := func(prefix string) ([]string, error) {
		var out []string
		for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				return nil, fmt.Errorf("blobs: listing %s: %w", prefix, o.Err)
			}
			if d := path.Base(o.Key); ValidDigest(d) && time.Since(o.LastModified) >= s.MinAge {
				out = append(out, d)
			}
		}
		return out, nil
	}
	if placed, err = list(s.prefix + "sha256/"); err != nil {
		return nil, nil, err
	}
	trashed, err = list(s.prefix + "trash/")
	return placed, trashed, err
}
