//go:build linux

package idmap

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMount(t *testing.T) {
	testkit.RequiresRoot(t)
	dir := t.TempDir()
	if err := Check(dir); err != nil {
		testkit.SkipPrivileged(t, "no idmapped mounts here: %v", err)
	}
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, "f"), 5000, 5000); err != nil {
		t.Fatal(err)
	}
	ns, err := Userns(5000, 70000, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := Mount(src, dst, ns, Writable); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)
	fi, err := os.Stat(filepath.Join(dst, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 70000 || st.Gid != 70000 {
		t.Errorf("through the mount: %d:%d, want 70000:70000", st.Uid, st.Gid)
	}
	// Written through the mount as a mapped id, stored as the source's; the host's root,
	// which the mapping leaves out, creates nothing there.
	if err := os.Lchown(filepath.Join(dst, "f"), 70003, 70003); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "g"), nil, 0o644); err == nil {
		t.Error("an unmapped id created a file through the mount")
	}
	fi, err = os.Stat(filepath.Join(src, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 5003 {
		t.Errorf("stored as %d, want 5003", st.Uid)
	}
}

// Each namespace's process is gone once Userns answers: none is left running or unreaped,
// and the namespace lives on in its file alone.
func TestUsernsLeavesNoProcess(t *testing.T) {
	testkit.RequiresRoot(t)
	for i := range 20 {
		ns, err := Userns(5000, 70000+uint32(i)*10, 10)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		ns.Close()
	}
	if _, err := unix.Wait4(-1, nil, unix.WNOHANG|unix.WALL, nil); !errors.Is(err, unix.ECHILD) {
		t.Errorf("a child is left: wait4: %v", err)
	}
}
