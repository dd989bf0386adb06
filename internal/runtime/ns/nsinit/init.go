//go:build linux

// Package nsinit is the sandbox side of the ns driver: the init that builds a sandbox's root
// file system inside its fresh namespaces, drops every privilege and execs the agent. It is
// its own package, importing nothing of the server, so that the small static lbb-agent binary
// can be that init (cmd/lbb-agent calls MaybeInit first): exec'ing the server's 40 MB binary
// for it cost each sandbox ~10 ms more CPU (its Go runtime and package initialisation, and its
// page faults), the largest item of a slot's start.
package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/seccomp/compiled"
)

// The sandbox init is the agent binary (or a test binary that calls MaybeInit), executed by
// the ns driver's Start with Arg as argv[1] inside fresh user, mount, pid, net, ipc and uts
// namespaces. It reads its config, builds the root
// file system and pivots into it, waits until the host has put it in the sandbox's cgroups,
// then drops every privilege and execs the agent as PID 1.
const Arg = "__lbb_ns_init__"

// File descriptors of the init, as Start passes them.
const (
	FDChannel = 3 // the agent's end of the channel; the only one the agent keeps
	FDConfig  = 4 // Config as a JSON line, then EOF once the init is in its cgroups
	FDStatus  = 5 // close-on-exec: EOF means the agent was exec'd, else an error message
)

// agentPath is where the agent binary is bind-mounted inside the sandbox.
const agentPath = "/.lbb/agent"

// Config is what Start tells the init, on FDConfig.
type Config struct {
	Hostname string `json:"hostname"`
	// Image, Upper, Work and Root are host paths: the overlay's lower, upper and work
	// directories and its mount point. Agent is the agent binary on the host. The init
	// reaches them as the sandbox's root, an unprivileged id on the host: through the state
	// directory (searchable by others) and the sandbox's own (by its group).
	Image string `json:"image"`
	// Layer is a template layer stacked over Image ("": none).
	Layer   string   `json:"layer,omitempty"`
	Upper   string   `json:"upper"`
	Work    string   `json:"work"`
	Root    string   `json:"root"`
	Agent   string   `json:"agent"`
	TmpMiB  int64    `json:"tmp_mib"`
	DiskMiB int64    `json:"disk_mib"`
	NoFile  uint64   `json:"nofile"`
	Env     []string `json:"env"`
	// WritableRoot: a build sandbox (runtime.Spec.WritableRoot).
	WritableRoot bool `json:"writable_root,omitempty"`
}

// MaybeInit runs the sandbox init when this process was started as one, and never returns
// then. Call it first thing in main (cmd/lbb-agent does) and in TestMain.
func MaybeInit() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	// Credentials, Landlock and seccomp below are per thread; the exec must come from the
	// same thread that dropped them.
	runtime.LockOSThread()
	err := sandboxInit()
	status := os.NewFile(FDStatus, "status")
	fmt.Fprintf(status, "sandbox init: %v", err)
	os.Exit(1)
}

func sandboxInit() error {
	if os.Getpid() != 1 {
		return errors.New("not PID 1 of a new pid namespace; only the ns driver starts the init")
	}
	cfgFile := os.NewFile(FDConfig, "config")
	dec := json.NewDecoder(io.LimitReader(cfgFile, 1<<20))
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := buildRoot(&cfg); err != nil {
		return err
	}
	if err := setupNetwork(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := pivot(cfg.Root); err != nil {
		return err
	}
	maskProc()
	// Wait for the go signal (EOF): the host has moved this process into the sandbox's
	// cgroups. Nothing of the sandbox's has run yet.
	if _, err := io.Copy(io.Discard, cfgFile); err != nil {
		return fmt.Errorf("wait for cgroups: %w", err)
	}
	cfgFile.Close()
	// Make the sandbox's cgroups the root of its cgroup namespace.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	return execAgent(&cfg)
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
	}
	return nil
}

// buildRoot mounts the sandbox's root file system at cfg.Root.
func buildRoot(cfg *Config) error {
	// Nothing mounted from here on propagates back to the host.
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	// The image is the read-only lower layer; the upper layer lives on the sandbox's disk.
	// userxattr: overlay metadata goes to user.overlay.* xattrs, which a user namespace may set.
	lower := cfg.Image
	if cfg.Layer != "" {
		lower = cfg.Layer + ":" + cfg.Image
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, cfg.Upper, cfg.Work)
	if err := mount("overlay", cfg.Root, "overlay", 0, opts); err != nil {
		return err
	}
	root := cfg.Root
	r := func(p string) string { return filepath.Join(root, p) }
	// The upper layer persists across restarts and is the sandbox's to write: a symlink it
	// left at a mount point would steer this init, which still sees the host's tree, to a
	// host path (another sandbox's layer, whose ids this user namespace shares). Every
	// mount point must be a real directory (or file) right under the root. Nothing of the
	// sandbox's runs now, so what is checked stays so until it is used.
	for _, d := range []string{"proc", "sys", "dev", "tmp", "workspace", ".lbb"} {
		if err := ensure(r(d), true); err != nil {
			return err
		}
	}
	if err := ensure(r(agentPath), false); err != nil {
		return err
	}
	if err := bindFile(cfg.Agent, r(agentPath), true); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := mount("proc", r("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	// sysfs shows the sandbox's own network namespace (only lo). A kernel that refuses it
	// (a host whose /sys is partly hidden) leaves /sys empty.
	_ = unix.Mount("sysfs", r("sys"), "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "")
	if err := buildDev(r("dev"), cfg.TmpMiB); err != nil {
		return err
	}
	tmp := fmt.Sprintf("mode=1777,size=%dm", cfg.TmpMiB)
	return mount("tmpfs", r("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmp)
}

// ensure makes path a directory (dir) or an empty file when it is missing, and fails when it
// is anything else: a symlink above all.
func ensure(path string, dir bool) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && dir:
		return os.Mkdir(path, 0o755)
	case errors.Is(err, os.ErrNotExist):
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o755)
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

// bindFile bind-mounts the host file src over dst, which exists.
func bindFile(src, dst string, readOnly bool) error {
	if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if !readOnly {
		return nil
	}
	// A remount in a user namespace must keep the flags the source mount has locked.
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range []struct{ st, ms int64 }{
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if st.Flags&f.st != 0 {
			flags |= uintptr(f.ms)
		}
	}
	return mount("", dst, "", flags, "")
}

// buildDev makes a minimal /dev: host device nodes bound in (a user namespace cannot mknod),
// a private devpts, /dev/shm and the usual links.
func buildDev(dev string, shmMiB int64) error {
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_STRICTATIME, "mode=755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		dst := filepath.Join(dev, n)
		if err := ensure(dst, false); err != nil {
			return err
		}
		if err := bindFile("/dev/"+n, dst, false); err != nil {
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

// setupNetwork brings up lo, the only interface of a new network namespace.
func setupNetwork() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// pivot makes root the root and detaches the old one (the host's tree) entirely.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; unmounting "." then
	// removes the old root without needing a directory for it (runc does the same).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// maskProc hides the parts of /proc that tell about the host or poke at it, as runc does.
// Best effort: a path missing from this kernel is skipped (its mount fails; no stat first).
// The directories share one empty read-only tmpfs, mounted at the first and bound at the
// others (a bind keeps the mount's flags, and its superblock is read-only): each tmpfs of its
// own was a superblock more to make at every sandbox's start and to shut down at its end.
func maskProc() {
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
		"/proc/latency_stats", "/proc/timer_stats", "/proc/kallsyms", "/proc/kmsg"} {
		_ = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
	}
	empty := ""
	for _, p := range []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware", "/sys/devices/virtual/powercap"} {
		if empty != "" {
			_ = unix.Mount(empty, p, "", unix.MS_BIND, "")
			continue
		}
		if unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0") == nil {
			empty = p
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, "") == nil {
			_ = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}
	}
}

// execAgent drops every privilege and becomes the agent.
func execAgent(cfg *Config) error {
	// stdin is the sandbox's /dev/null; stdout and stderr stay the host's log pipe.
	null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	if err := unix.Dup3(null, 0, 0); err != nil {
		return err
	}
	unix.Close(null)
	// Every descriptor but 0-2 and the channel closes at exec: nothing of the host's leaks in
	// (not the config pipe, not a descriptor the host process inherited without CLOEXEC).
	if err := unix.CloseRange(FDChannel+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	if _, err := unix.FcntlInt(FDChannel, unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("channel fd: %w", err)
	}
	h := newHardening(cfg.NoFile, cfg.DiskMiB, cfg.WritableRoot)
	if err := h.apply(); err != nil {
		return err
	}
	wd, err := os.Getwd()
	if err != nil || wd != "/" {
		return fmt.Errorf("cwd %q is not the sandbox root: %v", wd, err)
	}
	argv := []string{agentPath}
	return fmt.Errorf("exec %s: %w", agentPath, syscall.Exec(agentPath, argv, cfg.Env))
}

func newHardening(noFile uint64, diskMiB int64, writableRoot bool) hardening {
	h := hardening{
		NoFile:        noFile,
		FileSizeBytes: uint64(diskMiB) << 20,
		// /etc/machine-id is the sandbox's own (the agent gives it a fresh one at boot and at a
		// warm pool's claim); written in place, it is copied up to the sandbox's writable
		// layer, so it lasts as long as the disk. The rest of /etc stays the image's.
		Writable: []string{"/workspace", "/tmp", "/dev", "/root", "/var/tmp", "/run", "/proc", "/etc/machine-id"},
	}
	if writableRoot {
		h.Writable = []string{"/"}
	}
	return h
}

// hardening is what the calling thread gives up before it execs the agent. The thread must
// be locked (runtime.LockOSThread): capabilities, no_new_privs, Landlock and seccomp are per
// thread, and the exec must come from the same one.
type hardening struct {
	NoFile uint64
	// FileSizeBytes bounds every file: a write beyond it raises SIGXFSZ (EFBIG where the
	// signal is ignored), so not even a sparse file outgrows the disk.
	FileSizeBytes uint64
	// Writable trees keep write access under Landlock; everything else is read and exec.
	Writable []string
}

func (h hardening) apply() error {
	if err := h.setRlimits(); err != nil {
		return err
	}
	if err := dropCapabilityBounds(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, err := (landlockPolicy{Writable: h.Writable}).restrictThread(); err != nil {
		return err
	}
	if err := clearCapabilities(); err != nil {
		return err
	}
	// Last: the filter denies nothing the steps above need, but it is the final word.
	return compiled.Load()
}

// rlimits are the limits set, as (resource, value) pairs.
func (h hardening) rlimits() [][2]uint64 {
	lims := [][2]uint64{{unix.RLIMIT_CORE, 0}}
	if h.NoFile != 0 {
		lims = append(lims, [2]uint64{unix.RLIMIT_NOFILE, h.NoFile})
	}
	if h.FileSizeBytes != 0 {
		lims = append(lims, [2]uint64{unix.RLIMIT_FSIZE, h.FileSizeBytes})
	}
	return lims
}

func (h hardening) setRlimits() error {
	for _, l := range h.rlimits() {
		if err := unix.Setrlimit(int(l[0]), &unix.Rlimit{Cur: l[1], Max: l[1]}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l[0], err)
		}
	}
	return nil
}

// lastCap reads the kernel's highest capability number with plain system calls: os.ReadFile
// would start the Go runtime's network poller in the init for this one file (an epoll
// instance, an eventfd and a poller thread: about a millisecond of each sandbox's start).
func lastCap() int {
	fd, err := unix.Open("/proc/sys/kernel/cap_last_cap", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	defer unix.Close(fd)
	var b [16]byte
	k, err := unix.Read(fd, b[:])
	if err != nil || k <= 0 {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b[:k])))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}

const secbits = 1<<0 | 1<<1 | // SECBIT_NOROOT(_LOCKED): root gets no capabilities at exec
	1<<2 | 1<<3 | // SECBIT_NO_SETUID_FIXUP(_LOCKED)
	1<<5 | // SECBIT_KEEP_CAPS_LOCKED
	1<<6 | 1<<7 // SECBIT_NO_CAP_AMBIENT_RAISE(_LOCKED)

// dropCapabilityBounds empties the bounding and ambient sets and locks root's special
// treatment away, so that no execve can hand a capability back.
func dropCapabilityBounds() error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	return dropBounds(-1)
}

// dropBounds drops every capability but keep (-1: none) from the bounding set and clears
// the ambient set.
func dropBounds(keep int) error {
	last := lastCap() // once: each read of /proc/sys costs a path walk in procfs
	for c := 0; c <= last; c++ {
		if c == keep {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// clearCapabilities empties the effective, permitted and inheritable sets of this thread.
func clearCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
