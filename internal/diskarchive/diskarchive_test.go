package diskarchive_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/diskarchive"
)

// A sparse image goes through an archive whole: its size, its data where it was, its holes
// as holes; the archive costs its data, not its size.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "disk.img")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	pieces := map[int64][]byte{0: []byte("superblock"), 64 << 20: bytes.Repeat([]byte("workspace "), 100000), size - 5: []byte("tail!")}
	for off, b := range pieces {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	var arch bytes.Buffer
	if err := diskarchive.Write(context.Background(), &arch, src); err != nil {
		t.Fatal(err)
	}
	if arch.Len() > 1<<20 {
		t.Fatalf("the archive of %d bytes of data is %d bytes", 1000015, arch.Len())
	}
	dst := filepath.Join(dir, "restored.img")
	os.WriteFile(dst, []byte("old"), 0o640)
	if err := diskarchive.Restore(context.Background(), bytes.NewReader(arch.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Size() != size || st.Mode().Perm() != 0o640 {
		t.Fatalf("restored: %v %v", st, err)
	}
	got, _ := os.ReadFile(dst)
	want, _ := os.ReadFile(src)
	if !bytes.Equal(got, want) {
		t.Fatal("the restored image differs")
	}

	// A corrupt archive leaves the file as it was.
	os.WriteFile(dst, []byte("old"), 0o640)
	bad := bytes.Clone(arch.Bytes())
	bad[len(bad)/2] ^= 0xff
	if err := diskarchive.Restore(context.Background(), bytes.NewReader(bad), dst); err == nil {
		t.Fatal("a corrupt archive restored")
	}
	if b, _ := os.ReadFile(dst); string(b) != "old" {
		t.Fatalf("a failed restore changed the file: %d bytes", len(b))
	}
	if err := diskarchive.Restore(context.Background(), bytes.NewReader(arch.Bytes()[:arch.Len()-10]), dst); err == nil {
		t.Fatal("a truncated archive restored")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
}

// A checkpoint's directory goes through an archive whole: its tree, its files' modes and
// bytes, a sparse file's holes as holes; a corrupt archive leaves the directory as it was.
func TestDirRoundTrip(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	src := filepath.Join(root, "src")
	os.MkdirAll(filepath.Join(src, "memory"), 0o700)
	os.WriteFile(filepath.Join(src, "memory", "checkpoint.img"), bytes.Repeat([]byte("pages "), 50000), 0o600)
	os.WriteFile(filepath.Join(src, "state.json"), []byte(`{"id":"x"}`), 0o644)
	os.WriteFile(filepath.Join(src, "empty"), nil, 0o600)
	f, err := os.Create(filepath.Join(src, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(512 << 20)
	f.WriteAt([]byte("files"), 100<<20)
	f.Close()

	var arch bytes.Buffer
	if err := diskarchive.WriteDir(ctx, &arch, src); err != nil {
		t.Fatal(err)
	}
	if arch.Len() > 1<<20 {
		t.Fatalf("the archive is %d bytes", arch.Len())
	}
	dst := filepath.Join(root, "dst")
	os.MkdirAll(dst, 0o700)
	os.WriteFile(filepath.Join(dst, "stale"), []byte("old"), 0o600)
	if err := diskarchive.RestoreDir(ctx, bytes.NewReader(arch.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"memory/checkpoint.img", "state.json", "empty", "disk.img"} {
		want, _ := os.ReadFile(filepath.Join(src, name))
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs (%v)", name, err)
		}
	}
	if st, _ := os.Stat(filepath.Join(dst, "state.json")); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(dst, "stale")); err == nil {
		t.Fatal("the old tree's file is still there")
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "disk.img"), &st); err != nil || st.Blocks*512 > 1<<20 {
		t.Fatalf("the restored disk image takes %d bytes (%v)", st.Blocks*512, err)
	}

	bad := bytes.Clone(arch.Bytes())
	bad[len(bad)/2] ^= 0xff
	if err := diskarchive.RestoreDir(ctx, bytes.NewReader(bad), dst); err == nil {
		t.Fatal("a corrupt archive restored")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(dst, "state.json")); err != nil {
		t.Fatal("a failed restore changed the directory")
	}
}
