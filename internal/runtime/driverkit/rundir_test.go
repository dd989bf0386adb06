//go:build linux

package driverkit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestRunDir: a sandbox's run directory is apart from its state directory, made again when a
// reboot emptied RunDir, and RunDir itself must be a directory only root may write: it may sit
// in /dev/shm, where anyone can make a name first.
func TestRunDir(t *testing.T) {
	testkit.RequiresRoot(t) // chown
	state, run := t.TempDir(), filepath.Join(t.TempDir(), "run")
	s := &Sandboxes[runtime.Sandbox]{Dir: state, RunDir: run}
	if got := s.RunPath("sbx_1", "disk"); got != filepath.Join(run, "sbx_1", "disk") {
		t.Fatalf("RunPath: %s", got)
	}
	if err := s.MakeRunDir("sbx_1", "disk", "root"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.RunPath("sbx_1", "disk"), s.RunPath("sbx_1", "root")} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", p, fi, err)
		}
	}
	if fi, err := os.Stat(run); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("RunDir: %v %v", fi, err)
	}
	// A reboot empties the tmpfs: the next start makes it all again.
	if err := os.RemoveAll(run); err != nil {
		t.Fatal(err)
	}
	if err := s.MakeRunDir("sbx_1", "disk"); err != nil {
		t.Fatalf("after RunDir went: %v", err)
	}
	if _, err := os.Stat(s.RunPath("sbx_1", "disk")); err != nil {
		t.Fatal(err)
	}
	if got := (&Sandboxes[runtime.Sandbox]{Dir: state}).RunPath("sbx_1", "disk"); got != filepath.Join(state, "sbx_1", "disk") {
		t.Errorf("without RunDir, RunPath is in the state directory: %s", got)
	}

	for name, plant := range map[string]func(p string) error{
		"a symlink":           func(p string) error { return os.Symlink(t.TempDir(), p) },
		"another user's":      func(p string) error { return errors.Join(os.Mkdir(p, 0o711), os.Chown(p, 65534, 65534)) },
		"writable by a group": func(p string) error { return errors.Join(os.Mkdir(p, 0o771), os.Chmod(p, 0o771)) },
	} {
		p := filepath.Join(t.TempDir(), "run")
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		s := &Sandboxes[runtime.Sandbox]{Dir: state, RunDir: p}
		err := s.MakeRunDir("sbx_2")
		if err == nil || !strings.Contains(err.Error(), "only root may write") {
			t.Errorf("%s RunDir: %v", name, err)
		}
	}
}

// TestDefaultRunDir: one directory per state directory, in /dev/shm when it is a tmpfs.
func TestDefaultRunDir(t *testing.T) {
	a, b := DefaultRunDir("/var/lib/lbb/sandboxes"), DefaultRunDir("/tmp/x/sandboxes")
	if a == "" {
		t.Skip("/dev/shm is no tmpfs here: sandboxes keep their mount points in their state directories")
	}
	if a == b || !strings.HasPrefix(a, "/dev/shm/lbb-run-") || a != DefaultRunDir("/var/lib/lbb/sandboxes/") {
		t.Errorf("DefaultRunDir: %s, %s", a, b)
	}
}

// TestRunDirOlderSandbox: a sandbox an older build started has its mount points in its state
// directory; a stop still finds and unmounts them. One made since is looked for in its run
// directory alone.
func TestRunDirOlderSandbox(t *testing.T) {
	testkit.RequiresRoot(t) // mount
	state, run := t.TempDir(), filepath.Join(t.TempDir(), "run")
	s := &Sandboxes[runtime.Sandbox]{Dir: state, RunDir: run}
	if err := os.MkdirAll(s.Path("sbx_new"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := s.dirs("sbx_new"); len(got) != 1 || got[0] != s.RunPath("sbx_new") {
		t.Errorf("a sandbox made since: %v", got)
	}
	old := s.Path("sbx_old", "disk")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", old, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(old, unix.MNT_DETACH) })
	if m, err := s.mountsOf("sbx_old"); err != nil || len(m) != 1 || m[0] != old {
		t.Fatalf("an older sandbox's disk: %v %v", m, err)
	}
	if err := s.UnmountDisk(context.Background(), "sbx_old"); err != nil {
		t.Fatal(err)
	}
	if m, err := s.mountsOf("sbx_old"); err != nil || len(m) != 0 {
		t.Errorf("still mounted after the stop: %v %v", m, err)
	}
}
