//go:build linux

// Package hostdisk gives each sandbox a disk of its own on the host: a sparse file holding an
// ext4 file system, loop-mounted while the sandbox runs. Drivers share it.
package hostdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime/kfile"
	"golang.org/x/sys/unix"
)

// A sandbox's disk is a sparse file holding an ext4 file system without a journal: its size
// is the workspace quota, enforced by the file system itself (ENOSPC), with no quota tools.
// Formatting costs tens of milliseconds, so each size is formatted once into a template and
// copied (only its metadata, about 150 KiB, are data; the rest stays a hole).

// mkfsArgs format a template without a journal. No resize_inode: the blocks it reserves for
// growing the file system a thousandfold (127 of a 1 GiB disk's 164 written blocks) are never
// used, since a disk is never resized, and every sandbox's copy of the template copied them
// (656 KiB of data a copy; 144 KiB without).
var mkfsArgs = []string{"-q", "-F", "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard", "-m", "0"}

// Templates formats each size once per driver.
type Templates struct {
	Dir string
	// Journal gives the file systems a journal: a disk whose writer can die mid-write (a
	// microvm's guest kernel, with its QEMU) stays consistent. Its blocks count against the
	// quota.
	Journal bool
	mu      sync.Mutex
}

func (t *Templates) Get(ctx context.Context, mib int64) (string, error) {
	// v2: without resize_inode (see mkfsArgs); a template of before is left unused.
	name := fmt.Sprintf("ext4-v2-%dMiB.img", mib)
	if t.Journal {
		name = fmt.Sprintf("ext4-journal-v2-%dMiB.img", mib)
	}
	p := filepath.Join(t.Dir, name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(t.Dir, ".tmp-")
	if err != nil {
		return "", err
	}
	f.Close()
	tmp := f.Name()
	if err := format(ctx, tmp, mib, t.Journal); err != nil {
		os.Remove(tmp)
		return "", err
	}
	// Another driver on this state directory may have won the race: its file is as good.
	return p, os.Rename(tmp, p)
}

// Format makes path a sparse file of mib MiB holding an empty ext4 without a journal.
func Format(ctx context.Context, path string, mib int64) error { return format(ctx, path, mib, false) }

func format(ctx context.Context, path string, mib int64, journal bool) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(mib << 20) // sparse
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	args := mkfsArgs
	if journal {
		// lazy_journal_init: the journal's blocks stay holes until written.
		args = []string{"-q", "-F", "-O", "^resize_inode", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-m", "0"}
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", append(args, path)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CopySparse copies src to a new file dst, keeping holes: only data extents are copied, in
// the kernel (copy_file_range) where src and dst share a file system.
func CopySparse(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	ifd, ofd := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for roff, woff := data, data; roff < hole; {
			n, err := unix.CopyFileRange(ifd, &roff, ofd, &woff, int(hole-roff), 0)
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
				// Another file system (a checkpoint kept on another disk, an image on a
				// tmpfs): copy through this process.
				if _, err := io.Copy(io.NewOffsetWriter(out, woff), io.NewSectionReader(in, roff, hole-roff)); err != nil {
					return fmt.Errorf("copy: %w", err)
				}
				break
			}
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
		}
		off = hole
	}
	return nil
}

// attachLoop binds a free loop device to img with autoclear: the device detaches itself when
// its last user (the mount) goes away, so nothing needs to remember it. The returned device
// is open; the caller closes it after mounting.
func attachLoop(img string) (dev string, fd int, err error) {
	backing, err := unix.Open(img, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("open %s: %w", img, err)
	}
	defer unix.Close(backing)
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	defer unix.Close(ctl)
	for attempt := 0; attempt < 64; attempt++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev = fmt.Sprintf("/dev/loop%d", n)
		lfd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing)}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], img)
		err = unix.IoctlLoopConfigure(lfd, &cfg)
		if err == nil {
			return dev, lfd, nil
		}
		unix.Close(lfd)
		if errors.Is(err, unix.EBUSY) {
			continue // another attacher won the race for this device
		}
		return "", -1, fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
	}
	return "", -1, errors.New("no free loop device after 64 attempts")
}

// Mount loop-mounts img at target and returns the loop device's number. It names the device
// in target's ".loop" file (beside the mount point, which a driver keeps on a tmpfs) for
// WaitDetached.
func Mount(img, target string) (major, minor uint32, err error) {
	dev, fd, err := attachLoop(img)
	if err != nil {
		return 0, 0, err
	}
	// Closing the device after the mount lets autoclear detach it on unmount; closing it
	// without a mount (the mount failed) detaches it now.
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, err
	}
	// Name the device beside target before mounting, so that WaitDetached can watch this one
	// device instead of scanning every loop device of the host (hundreds once sandboxes have
	// come and gone), also after a crash.
	if err := writeDeviceFile(target, img, unix.Major(st.Rdev), unix.Minor(st.Rdev)); err != nil {
		return 0, 0, err
	}
	// noinit_itable: the lazy inode table zeroing would fill the sparse file for nothing.
	if err := unix.Mount(dev, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable"); err != nil {
		return 0, 0, fmt.Errorf("mount %s on %s: %w", dev, target, err)
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev), nil
}

// unmount unmounts target if it is a mount point, retrying briefly while it is busy.
func Unmount(ctx context.Context, target string) error {
	for delay := time.Millisecond; ; delay *= 2 {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		if err == nil {
			continue // stacked mounts: unmount until none is left
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not a mount point (any more)
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		if delay > 100*time.Millisecond {
			delay = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unmount %s: %w (%w)", target, err, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// MountsUnder lists the mount points at or below dir in this mount namespace. It runs on
// every start and stop: it reads the mount table with plain system calls and decodes only
// the mount points that match (what mountinfo.PrefixFilter keeps).
func MountsUnder(dir string) ([]string, error) {
	b, err := kfile.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	prefix := escapeMountpoint(filepath.Clean(dir)) + "/"
	var out []string
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		// ID parent major:minor root mountpoint ...
		f := line
		for range 4 {
			if _, f, _ = bytes.Cut(f, []byte{' '}); len(f) == 0 {
				break
			}
		}
		mp, _, _ := bytes.Cut(f, []byte{' '})
		if len(mp) == 0 || len(mp)+1 < len(prefix) ||
			string(mp[:len(prefix)-1]) != prefix[:len(prefix)-1] ||
			len(mp) >= len(prefix) && mp[len(prefix)-1] != '/' {
			continue
		}
		out = append(out, unescapeMountpoint(mp))
	}
	return out, nil
}

// IsMounted says whether path is a mount point in this mount namespace, with one statx
// (STATX_ATTR_MOUNT_ROOT): MountsUnder reads the whole mount table, hundreds of kilobytes the
// kernel formats anew on each read on a host with many mounts, too dear for every start and
// stop. A path that does not exist is no mount point. A kernel that does not report the
// attribute (before 5.8) is answered from the mount table.
func IsMounted(path string) (bool, error) {
	var st unix.Statx_t
	for {
		err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, 0, &st)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return false, nil
		}
		if err != nil {
			return false, &os.PathError{Op: "statx", Path: path, Err: err}
		}
		break
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		m, err := MountsUnder(path)
		return slices.Contains(m, filepath.Clean(path)), err
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// escapeMountpoint writes p as the kernel does in mountinfo: space, tab, newline and
// backslash as \ooo.
func escapeMountpoint(p string) string {
	if !strings.ContainsAny(p, " \t\n\\") {
		return p
	}
	var sb strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&sb, "\\%03o", c)
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

func unescapeMountpoint(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && isOctal(b[i+1]) && isOctal(b[i+2]) && isOctal(b[i+3]) {
			out = append(out, (b[i+1]-'0')<<6|(b[i+2]-'0')<<3|(b[i+3]-'0'))
			i += 3
			continue
		}
		out = append(out, b[i])
	}
	return string(out)
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// WaitDetached waits until no loop device is backed by img. The kernel detaches an
// autoclear device only once the last reference to its filesystem is gone, and the
// sandbox's dying mount namespace drops its copy of the mount asynchronously, after the
// init is reaped. Until then a Start could attach a second device to the same file and
// mount the same ext4 twice; and Destroy must leave no device behind.
//
// It watches the device Mount last attached to img at target (named in target's ".loop"
// file, or in img's, where builds before it named the device): an img Mount never attached
// has nothing to wait for.
func WaitDetached(ctx context.Context, img, target string) error {
	b, err := kfile.Read(target + deviceSuffix)
	if errors.Is(err, os.ErrNotExist) {
		b, err = kfile.Read(img + deviceSuffix)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	dev := strings.TrimSpace(string(b))
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var devs []string
		if backedBy(dev, img) {
			devs = []string{dev}
		}
		if len(devs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loop devices %v still hold %s", devs, img)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loop devices %v still hold %s: %w", devs, img, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// deviceSuffix names the file beside a mount point that says which loop device Mount
// attached there.
const deviceSuffix = ".loop"

func writeDeviceFile(target, img string, major, minor uint32) error {
	if err := os.WriteFile(target+deviceSuffix, fmt.Appendf(nil, "%d:%d\n", major, minor), 0o600); err != nil {
		return fmt.Errorf("naming the loop device of %s: %w", img, err)
	}
	return nil
}

// backedBy says whether block device dev ("major:minor") is a loop device backed by img.
// A detached loop device has no loop/ directory in sysfs.
func backedBy(dev, img string) bool {
	b, err := kfile.Read("/sys/dev/block/" + dev + "/loop/backing_file")
	if err != nil {
		return false
	}
	return strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == img
}

// LoopDevicesFor lists loop devices whose backing file is img.
func LoopDevicesFor(img string) []string {
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == img {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(m))))
		}
	}
	return out
}
