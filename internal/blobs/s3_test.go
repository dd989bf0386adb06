package blobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/littlebigbrain/lbb/internal/blobs/s3test"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// TestS3 runs the Store cases on a bucket of a real S3 server (SeaweedFS on loopback), then
// what only a remote store meets: a blob larger than one part, a copy damaged behind the
// store's back, and a bucket that does not exist.
func TestS3(t *testing.T) {
	srv := s3test.Start(t)
	open := func(t *testing.T) (*S3, string) {
		stage := t.TempDir()
		s, err := NewS3(ctx, srv.NewBucket(t), S3Options{StageDir: stage, Getenv: func(k string) string { return s3test.Env[k] }})
		if err != nil {
			t.Fatal(err)
		}
		s.MinAge = 0 // the cases list what they just wrote
		return s, filepath.Join(stage, "tmp")
	}
	t.Run("Store", func(t *testing.T) {
		s, tmp := open(t)
		testStore(t, s, tmp)
	})
	t.Run("StagedAndTrash", func(t *testing.T) {
		s, tmp := open(t)
		testStagedAndTrash(t, s, tmp)
	})
	t.Run("Multipart", func(t *testing.T) {
		s, _ := open(t)
		const size = 20<<20 + 12345 // two parts
		info, err := s.Put(ctx, pattern(size), 0)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, pattern(size))
		if info.Size != size || info.SHA256 != hex.EncodeToString(h.Sum(nil)) {
			t.Fatalf("info %+v", info)
		}
		r, got, err := s.Open(ctx, info.SHA256)
		if err != nil || got != info {
			t.Fatalf("%+v %v", got, err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != size {
			t.Fatalf("read back %d bytes: %v", n, err)
		}
	})
	t.Run("Damaged", func(t *testing.T) {
		s, _ := open(t)
		info, err := s.Put(ctx, strings.NewReader("the real bytes"), 0)
		if err != nil {
			t.Fatal(err)
		}
		evil := []byte("the evil bytes")
		if _, err := srv.Client().PutObject(ctx, s.bucket, s.placed(info.SHA256), bytes.NewReader(evil), int64(len(evil)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		r, _, err := s.Open(ctx, info.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(r)
		r.Close()
		if err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("reading a damaged copy: %v, want an error", err)
		}
	})
	t.Run("NoBucket", func(t *testing.T) {
		_, err := NewS3(ctx, "s3://no-such-bucket?endpoint="+srv.Endpoint, S3Options{StageDir: t.TempDir(), Getenv: func(k string) string { return s3test.Env[k] }})
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("err %v", err)
		}
		if _, err := NewS3(ctx, "s3:///x", S3Options{StageDir: t.TempDir()}); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("err %v", err)
		}
	})
}

// pattern is n bytes that are not all alike.
func pattern(n int64) io.Reader {
	return io.LimitReader(&counting{}, n)
}

type counting struct{ i byte }

func (c *counting) Read(p []byte) (int, error) {
	for k := range p {
		p[k] = c.i
		c.i = c.i*31 + 7
	}
	return len(p), nil
}
