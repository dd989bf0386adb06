package diskarchive_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

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
