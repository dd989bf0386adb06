//go:build linux

package vmguest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// The sandbox init is the supervisor's child, PID 1 of a pid namespace and in a mount
// namespace of its own, in the sandbox's cgroup, still root with every capability. It builds
// the sandbox's file system on the overlay, switches into it, gives up every privilege and
// execs the agent (the initramfs's /init, bound read-only at /.lbb/agent) on the channel port.
//
// The root is read-only but for what the sandbox keeps on its disk (/workspace, /root,
// /var/tmp, /etc/machine-id: the same places ns's Landlock rules leave writable) and its
// memory file systems (/tmp, /dev/shm, /run). Its /dev holds null, zero, full, random,
// urandom and tty and nothing else: no port, disk or console of the machine.
const sandboxInitArg = "__lbb_vm_sandbox_init__"

// agentPath is where the agent is inside the sandbox; seccompPath is its filter there.
const (
	agentPath   = "/.lbb/agent"
	seccompPath = "/.lbb/seccomp"
)

type sandboxConfig struct {
	agent.VMConfig
}

func sandboxInit() {
	// Credentials and capabilities are per thread; the exec must come from this one.
	runtime.LockOSThread()
	err := buildSandbox()
	fmt.Fprintf(os.Stderr, "lbb-agent (sandbox init): %v\n", err)
	os.Exit(1)
}

func buildSandbox() error {
	cfgFile := os.NewFile(4, "config")
	var cfg sandboxConfig
	if err := json.NewDecoder(io.LimitReader(cfgFile, 1<<20)).Decode(&cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cfgFile.Close()
	unix.Umask(0o022)
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	r := func(p string) string { return filepath.Join(rootDir, p) }
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "workspace", "root", "var/tmp", ".lbb"} {
		if err := ensure(r(d), true); err != nil {
			return err
		}
	}
	for _, f := range []string{agentPath, seccompPath, "/etc/machine-id"} {
		if err := ensure(r(f), false); err != nil {
			return err
		}
	}
	// What the sandbox writes and keeps: bound onto themselves, so that they stay writable
	// when the root's mount is made read-only below.
	for _, p := range []string{"workspace", "root", "var/tmp", "etc/machine-id"} {
		if err := mount(r(p), r(p), "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for src, dst := range map[string]string{"/init": agentPath, agent.VMSeccompFile: seccompPath} {
		if err := mount(src, r(dst), "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := mount("", r(dst), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return err
		}
	}
	if err := mount("proc", r("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mount("sysfs", r("sys"), "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := buildDev(r("dev"), cfg.TmpMiB); err != nil {
		return err
	}
	tmp := fmt.Sprintf("mode=1777,size=%dm", cfg.TmpMiB)
	if err := mount("tmpfs", r("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmp); err != nil {
		return err
	}
	if err := mount("tmpfs", r("run"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755,size=16m"); err != nil {
		return err
	}
	if err := mount("", rootDir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := switchRoot(rootDir); err != nil {
		return err
	}
	maskProc()
	// The sandbox's cgroup (this process's) is the root of what it sees of cgroups.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	if err := dropPrivileges(cfg.VMConfig); err != nil {
		return err
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"HOSTNAME=" + cfg.Hostname,
		"LBB_SANDBOX_ID=" + cfg.SandboxID,
		"LBB_CHANNEL_FD=3",
		"LBB_AGENT_SERIAL=1",
		"LBB_AGENT_SECCOMP=" + seccompPath,
	}
	return fmt.Errorf("exec %s: %w", agentPath, syscall.Exec(agentPath, []string{agentPath}, env))
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// ensure makes path a directory (dir) or an empty file when it is missing, and fails when it
// is anything else: the upper layer is the sandbox's to write, and a symlink it left at a
// mount point would steer a mount.
func ensure(path string, dir bool) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && dir:
		return os.MkdirAll(path, 0o755)
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return unix.Close(fd)
	case err != nil:
		return err
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("sandbox root: %s is a %v, want a plain %s", path, fi.Mode().Type(), map[bool]string{true: "directory", false: "file"}[dir])
	}
	return nil
}

// buildDev makes the sandbox's /dev: a few device nodes of the guest's kernel, a private
// devpts, /dev/shm and the usual links.
func buildDev(dev string, shmMiB int64) error {
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_STRICTATIME, "mode=755,size=64k"); err != nil {
		return err
	}
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		p := filepath.Join(dev, n.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return err
	}
	if err := mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("mode=1777,size=%dm", shmMiB)); err != nil {
		return err
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// switchRoot makes root the root. The initramfs (the kernel's rootfs) cannot be pivoted
// away, so, as initramfs tools do, the new root is moved over it and chrooted into: what is
// left of the initramfs lies under the new root, out of reach of paths, and the supervisor's
// mounts of this namespace are detached first. (The sandbox's processes can neither chroot
// nor mount: no capabilities, and the seccomp filter.)
func switchRoot(root string) error {
	for _, m := range []string{"/sys/fs/cgroup", "/sys", "/proc", "/dev", baseDir, diskDir, layerDir} {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !(m == layerDir && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT))) {
			return fmt.Errorf("detach %s: %w", m, err)
		}
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.Mount(root, "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// maskProc hides the parts of /proc that tell about the kernel or poke at it, as runc does.
func maskProc() {
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
		"/proc/latency_stats", "/proc/timer_stats", "/proc/kallsyms", "/proc/kmsg"} {
		if _, err := os.Lstat(p); err == nil {
			_ = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
	}
	for _, p := range []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware", "/sys/devices/virtual/powercap"} {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			_ = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if _, err := os.Lstat(p); err == nil {
			if unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, "") == nil {
				_ = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
			}
		}
	}
}

// dropPrivileges sets the sandbox's rlimits and gives up, for this thread and what it execs,
// every capability and the means to regain one.
func dropPrivileges(cfg agent.VMConfig) error {
	for _, l := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, cfg.NoFile}, {unix.RLIMIT_FSIZE, uint64(cfg.DiskMiB) << 20}} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.v, Max: l.v}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	const secbits = 1<<0 | 1<<1 | // SECBIT_NOROOT(_LOCKED): root gets no capabilities at exec
		1<<2 | 1<<3 | // SECBIT_NO_SETUID_FIXUP(_LOCKED)
		1<<5 | // SECBIT_KEEP_CAPS_LOCKED
		1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE(_LOCKED)
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		fmt.Sscan(strings.TrimSpace(string(b)), &last)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
