package driverkit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteOnceReplacesChanged: a copy that is there is used again only when its bytes, owner
// and mode are what WriteOnce would write; a changed one is replaced.
func TestWriteOnceReplacesChanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d", "agent")
	want := []byte("the agent")
	uid := os.Getuid()
	check := func(when string) {
		t.Helper()
		if !same(p, want, uid, 0o555) {
			fi, _ := os.Lstat(p)
			b, _ := os.ReadFile(p)
			t.Fatalf("%s: %q %v", when, b, fi)
		}
	}
	if err := WriteOnce(p, want, uid, 0o555); err != nil {
		t.Fatal(err)
	}
	check("written")
	for name, tamper := range map[string]func() error{
		"content": func() error {
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte("the AGENT"), 0); err != nil {
				return err
			}
			return os.Chmod(p, 0o555)
		},
		"mode": func() error { return os.Chmod(p, 0o777) },
		"kind": func() error {
			os.Remove(p)
			return os.Symlink("/bin/sh", p)
		},
	} {
		if err := tamper(); err != nil {
			t.Fatal(err)
		}
		if err := WriteOnce(p, want, uid, 0o555); err != nil {
			t.Fatal(err)
		}
		check("after a changed " + name)
	}
}
