package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A microvm sandbox sees the image as a read-only virtio disk: an ext4 file system made once
// from the rootfs, beside the image's directory as <dir>/<id>.disk<DiskVersion>.ext4, so that
// a change of how it is made gives it another name. Its files belong to ids 0..IDCount-1
// (the rootfs's, shifted back): the guest has its own kernel and no user namespace, and its
// root is id 0.

// DiskVersion names how Disk makes the ext4; bump it when that changes.
const DiskVersion = 1

// DiskPath is where the ext4 of image m lives.
func DiskPath(dir string, m Manifest) string {
	return filepath.Join(dir, fmt.Sprintf("%s.disk%d.ext4", m.ID, DiskVersion))
}

// Disk answers the ext4 of image m, made when missing. It needs root and mkfs.ext4.
func Disk(ctx context.Context, o Options, m Manifest) (string, error) {
	dir, w := o.dir(), o.progress()
	path := DiskPath(dir, m)
	if _, err := os.Stat(path); err == nil {
		fmt.Fprintf(w, "disk of image %s is cached at %s\n", m.ID, path)
		return path, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("making the image's disk needs root")
	}
	mkfs, err := lookTool("mkfs.ext4")
	if err != nil {
		return "", fmt.Errorf("making the image's disk needs mkfs.ext4 (e2fsprogs): %w", err)
	}
	unlock, err := lockDir(ctx, dir, w)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	t0 := time.Now()
	files, err := countFiles(m.Rootfs)
	if err != nil {
		return "", err
	}
	// Room for the files, their inodes and ext4's own metadata; the guest never writes it.
	mib := (m.SizeBytes*5/4)>>20 + 128
	fmt.Fprintf(w, "disk of image %s: ext4 of %d MiB, %d files, from %s…\n", m.ID, mib, files, m.Rootfs)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	err = f.Truncate(mib << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if err != nil {
		return "", err
	}
	base, count := m.Recipe.IDBase, m.Recipe.IDCount
	// mkfs.ext4 -d copies owners as it stats them: it runs in a user namespace that maps the
	// image's id range back onto 0.., as the sandbox's root, which owns the file it writes.
	if err := os.Chown(tmp, int(base), int(base)); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0",
		"-N", fmt.Sprint(files+files/4+4096), "-L", "lbb-"+m.ID, "-E", "root_owner=0:0,lazy_itable_init=0",
		"-d", m.Rootfs, tmp)
	cmd.Env = toolEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(count)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(count)}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mkfs.ext4 -d %s: %w: %s", m.Rootfs, err, tail(string(out), 10))
	}
	if err := os.Chown(tmp, 0, 0); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	ok = true
	fmt.Fprintf(w, "disk of image %s made in %s: %s\n", m.ID, time.Since(t0).Round(100*time.Millisecond), path)
	return path, nil
}

func countFiles(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(_ string, _ fs.DirEntry, err error) error {
		n++
		return err
	})
	return n, err
}

// disksOf lists the disk files of image id in dir, whatever their version.
func disksOf(dir, id string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, id+".disk*.ext4"))
	var out []string
	for _, p := range m {
		if !strings.HasSuffix(p, ".tmp") {
			out = append(out, p)
		}
	}
	return out
}
