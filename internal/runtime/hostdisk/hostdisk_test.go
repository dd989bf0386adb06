//go:build linux

package hostdisk

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(64 << 20)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt(bytes.Repeat([]byte{7}, 8192), 10<<20)
	f.WriteAt([]byte("tail"), 64<<20-4)
	f.Close()
	dst := filepath.Join(dir, "dst")
	if err := CopySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("copy differs")
	}
	var st unix.Stat_t
	unix.Stat(dst, &st)
	if st.Blocks*512 > 1<<20 {
		t.Fatalf("copy is not sparse: %d bytes allocated", st.Blocks*512)
	}
	if err := CopySparse(src, dst); err == nil {
		t.Fatal("copy over an existing file succeeded")
	}
}
