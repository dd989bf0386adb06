//go:build linux

// Package idmap shows a directory through an idmapped mount (mount_setattr with
// MOUNT_ATTR_IDMAP, Linux 5.12 and later): its files, stored with one range of host ids,
// appear owned by another, and what is written through the mount is stored back with the
// first. Images and sandbox disks are stored with the shared range (hostids.Shared); each
// sandbox sees them, through such mounts, owned by its own.
package idmap

import (
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/kfile"
)

// Userns answers a user namespace that maps count ids from (inside it) onto host ids from to:
// the mapping an idmapped mount applies. It is held by the returned file alone.
//
// A user namespace needs a process: unshare needs a single thread, and a fork of the server
// copies its page tables (milliseconds, on every sandbox start). So a child shares the
// server's memory and files (clone with CLONE_VM|CLONE_FILES, no copy), runs a few
// instructions of its own that only wait, with every signal blocked, and is killed once its
// namespace is mapped and opened (see waiter). Where there is no waiter (other architectures),
// a traced child stops at its exec, before its first instruction.
func Userns(from, to, count uint32) (*os.File, error) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	pid, wait, err := waiter()
	if err != nil {
		return nil, fmt.Errorf("user namespace for an idmapped mount: %w", err)
	}
	defer wait()
	m := fmt.Appendf(nil, "%d %d %d\n", from, to, count)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := kfile.Write(fmt.Sprintf("/proc/%d/%s", pid, f), m); err != nil {
			return nil, fmt.Errorf("user namespace for an idmapped mount: %w", err)
		}
	}
	p := fmt.Sprintf("/proc/%d/ns/user", pid)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("user namespace for an idmapped mount: open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// tracedChild is waiter without a waiter of our own: a child of this program in a new user
// namespace, traced so that it stops at its exec and never runs; wait kills and reaps it. The
// calling thread is locked (the trace and Pdeathsig belong to it).
func tracedChild() (pid int, wait func(), err error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"lbb-idmap-userns"}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER,
		Ptrace:     true,
		// Should this thread end before the kill, the process must not run on.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	return cmd.Process.Pid, func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

// Attrs are what else an idmapped mount is: MOUNT_ATTR_RDONLY, _NOSUID, _NODEV, _NOEXEC.
type Attrs uint64

// The attributes of mounts a sandbox reaches.
const (
	ReadOnly Attrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	Writable Attrs = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// Mount mounts directory src at dst (a directory) through userns's mapping, with attrs.
func Mount(src, dst string, userns *os.File, attrs Attrs) error {
	fd, err := clone(src, userns, attrs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmapped mount of %s on %s: %w", src, dst, err)
	}
	return nil
}

// clone answers a detached idmapped mount of src.
func clone(src string, userns *os.File, attrs Attrs) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("idmapped mount of %s: open_tree: %w", src, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | uint64(attrs), Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmapped mount of %s: mount_setattr: %w", src, err)
	}
	return fd, nil
}

// Check reports whether this host can make an idmapped mount of dir (its kernel, its file
// system, and the calling process's privileges).
func Check(dir string) error {
	ns, err := Userns(0, 0, 1)
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := clone(dir, ns, ReadOnly)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// CheckOverlay is Check for a directory that will be a layer of an overlay mount, which
// takes idmapped layers from Linux 5.19.
func CheckOverlay(dir string) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return fmt.Errorf("kernel release %q: %w", release, err)
	}
	if major < 5 || major == 5 && minor < 19 {
		return fmt.Errorf("Linux %s: overlayfs takes idmapped layers from 5.19", release)
	}
	return Check(dir)
}
