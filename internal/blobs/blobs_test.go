package blobs

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

var ctx = context.Background()

func TestLocal(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s, filepath.Join(dir, "tmp"))
}

// testStore is what every Store does; tmp is the directory of its temporary files.
func testStore(t *testing.T, s Store, tmp string) {
	data := []byte("hello, blobs\n")
	info, err := s.Put(ctx, bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != Digest(data) || info.Size != int64(len(data)) {
		t.Fatalf("info %+v", info)
	}
	// The same bytes again: one copy.
	if again, err := s.Put(ctx, bytes.NewReader(data), 100); err != nil || again != info {
		t.Fatalf("%+v %v", again, err)
	}
	r, got, err := s.Open(ctx, info.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(b, data) || got != info {
		t.Fatalf("%q %+v", b, got)
	}
	if st, err := s.Stat(ctx, info.SHA256); err != nil || st != info {
		t.Fatalf("%+v %v", st, err)
	}
	// Too large: nothing kept, no temporary file left.
	_, err = s.Put(ctx, strings.NewReader(strings.Repeat("x", 2000)), 1999)
	if errdefs.ClassOf(err) != errdefs.ClassPayloadTooLarge {
		t.Fatalf("err %v", err)
	}
	if _, err := s.Stat(ctx, Digest(bytes.Repeat([]byte("x"), 2000))); !errdefs.IsNotFound(err) {
		t.Fatalf("err %v", err)
	}
	if _, err := s.Put(ctx, strings.NewReader(strings.Repeat("x", 2000)), 2000); err != nil {
		t.Fatal(err)
	}
	if tmps, _ := os.ReadDir(tmp); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
	if _, _, err := s.Open(ctx, Digest([]byte("nope"))); !errdefs.IsNotFound(err) {
		t.Fatalf("err %v", err)
	}
	if _, _, err := s.Open(ctx, "../../etc/passwd"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("err %v", err)
	}
	if err := s.Delete(ctx, info.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, info.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, info.SHA256); !errdefs.IsNotFound(err) {
		t.Fatalf("err %v", err)
	}
}

func TestLocalConcurrentPuts(t *testing.T) {
	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("abc"), 100000)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Put(ctx, bytes.NewReader(data), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	r, info, err := s.Open(ctx, Digest(data))
	if err != nil || info.Size != int64(len(data)) {
		t.Fatal(info, err)
	}
	r.Close()
}

// TestStagedAndTrash: staged bytes are not readable until published and leave nothing when
// discarded; a trashed blob is not readable, and comes back or goes for good.
func TestStagedAndTrash(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	testStagedAndTrash(t, s, filepath.Join(dir, "tmp"))
}

func testStagedAndTrash(t *testing.T, s Store, tmp string) {
	data := []byte("staged bytes")
	st, err := s.Stage(ctx, bytes.NewReader(data), 0)
	if err != nil || st.SHA256 != Digest(data) || st.Size != int64(len(data)) {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := s.Stat(ctx, st.SHA256); !errdefs.IsNotFound(err) {
		t.Fatalf("staged bytes are readable: %v", err)
	}
	if err := s.Publish(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, st); err == nil {
		t.Fatal("published twice")
	}
	s.Discard(st) // after Publish: nothing
	if _, err := s.Stat(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	dropped, err := s.Stage(ctx, strings.NewReader("never published"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Discard(dropped)
	if tmps, _ := os.ReadDir(tmp); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}

	if err := s.Trash(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, st.SHA256); !errdefs.IsNotFound(err) {
		t.Fatalf("a trashed blob is readable: %v", err)
	}
	placed, trashed, err := s.Digests(ctx)
	if err != nil || len(placed) != 0 || len(trashed) != 1 || trashed[0] != st.SHA256 {
		t.Fatalf("placed %v, trashed %v, %v", placed, trashed, err)
	}
	if err := s.Restore(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, st.SHA256); err != nil {
		t.Fatalf("restored: %v", err)
	}
	// Trashed, then the same bytes put in place again: Restore keeps one copy.
	if err := s.Trash(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, bytes.NewReader(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	if placed, trashed, _ := s.Digests(ctx); len(placed) != 1 || len(trashed) != 0 {
		t.Fatalf("placed %v, trashed %v", placed, trashed)
	}
	if err := s.Trash(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, st.SHA256); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(context.Context, string) error{s.Trash, s.Restore, s.Purge} {
		if err := f(ctx, st.SHA256); err != nil {
			t.Fatalf("on nothing: %v", err)
		}
	}
	if placed, trashed, _ := s.Digests(ctx); len(placed) != 0 || len(trashed) != 0 {
		t.Fatalf("placed %v, trashed %v", placed, trashed)
	}
}
