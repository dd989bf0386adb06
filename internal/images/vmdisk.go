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
	if err := Ext4(ctx, Ext4Options{Src: m.Rootfs, Dst: path, MiB: mib, Inodes: files + files/4 + 4096,
		Label: "lbb-" + m.ID, IDBase: m.Recipe.IDBase, IDCount: m.Recipe.IDCount}); err != nil {
		return "", err
	}
	fmt.Fprintf(w, "disk of image %s made in %s: %s\n", m.ID, time.Since(t0).Round(100*time.Millisecond), path)
	return path, nil
}

// Ext4Options say what Ext4 makes.
type Ext4Options struct {
	// Src is the directory copied in; its files belong to host ids IDBase..IDBase+IDCount-1,
	// which the disk stores as 0..IDCount-1.
	Src string
	// Dst is the disk file, written whole (through a temporary file beside it) or not at all.
	Dst             string
	MiB             int64
	Inodes          int
	Label           string
	IDBase, IDCount uint32
}

// Ext4 makes a read-only ext4 disk (mode 0444, root's) of directory o.Src, owners, modes,
// extended attributes and device nodes kept. It needs root and mkfs.ext4.
func Ext4(ctx context.Context, o Ext4Options) error {
	if os.Geteuid() != 0 {
		return errors.New("making an ext4 disk needs root")
	}
	mkfs, err := lookTool("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("making a disk needs mkfs.ext4 (e2fsprogs): %w", err)
	}
	// A temporary name of its own: two makers of one disk race harmlessly to the rename.
	tmp := fmt.Sprintf("%s.%d.tmp", o.Dst, time.Now().UnixNano())
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(o.MiB << 20)
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
		return err
	}
	// mkfs.ext4 -d copies owners as it stats them: it runs in a user namespace that maps the
	// id range back onto 0.., as the sandbox's root, which owns the file it writes.
	if err := os.Chown(tmp, int(o.IDBase), int(o.IDBase)); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0",
		"-N", fmt.Sprint(o.Inodes), "-L", o.Label, "-E", "root_owner=0:0,lazy_itable_init=0",
		"-d", o.Src, tmp)
	cmd.Env = toolEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(o.IDBase), Size: int(o.IDCount)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(o.IDBase), Size: int(o.IDCount)}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 -d %s: %w: %s", o.Src, err, tail(string(out), 10))
	}
	if err := os.Chown(tmp, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.Dst); err != nil {
		return err
	}
	ok = true
	return nil
}

// CountFiles counts the entries under root (root included): a disk of root needs an inode each.
func CountFiles(root string) (int, error) { return countFiles(root) }

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
