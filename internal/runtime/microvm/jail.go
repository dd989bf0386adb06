//go:build linux

package microvm

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// QEMU runs jailed, as Firecracker's jailer runs Firecracker: the driver re-executes this
// binary with jailArg in fresh mount, pid, network, ipc and uts namespaces; the jail builds a
// root of its own — a tmpfs with /usr (and its merged-/usr links) read-only, /etc/ld.so.cache,
// a /dev of null, zero, urandom (and kvm when used), a /proc of its pid namespace, and the
// machine's files under /vm — pivots into it, waits until the host has put it in the
// sandbox's cgroups, becomes the sandbox's own unprivileged uid (no capabilities,
// no_new_privs) and execs QEMU, which then turns its own seccomp filter on (-sandbox). A QEMU
// that a guest took over holds the machine's files and nothing else of the host's, and has
// no network.
const jailArg = "__lbb_microvm_jail__"

// Descriptors of the jail as Start passes them: the config, then QEMU's (passFDs).
const (
	jailConfigFD = 3
	firstQEMUFD  = 4
)

type jailConfig struct {
	// Root is an empty directory the jail mounts its tmpfs root on (in its own namespace).
	Root string `json:"root"`
	// Files are bound under /vm: name → host path; Writable names those QEMU writes.
	Files    map[string]string `json:"files"`
	Writable []string          `json:"writable"`
	KVM      bool              `json:"kvm"`
	UID      int               `json:"uid"`
	Argv     []string          `json:"argv"`
	// FDs is how many descriptors from firstQEMUFD on QEMU inherits.
	FDs int `json:"fds"`
}

// MaybeJail runs the jail when this process was started as one, and never returns then.
// Call it first thing in main (cmd/lbb registers it as a hook) and in TestMain.
func MaybeJail() {
	if len(os.Args) < 2 || os.Args[1] != jailArg {
		return
	}
	runtime.LockOSThread()
	err := jail()
	fmt.Fprintf(os.Stderr, "microvm jail: %v\n", err)
	os.Exit(1)
}

func jail() error {
	cfgFile := os.NewFile(jailConfigFD, "config")
	dec := json.NewDecoder(io.LimitReader(cfgFile, 1<<20))
	var cfg jailConfig
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := buildJail(cfg); err != nil {
		return err
	}
	// The go signal (EOF): the host has moved this process into the sandbox's cgroups.
	if _, err := io.Copy(io.Discard, cfgFile); err != nil {
		return fmt.Errorf("wait for cgroups: %w", err)
	}
	cfgFile.Close()
	// QEMU's descriptors move down to 3.. (close-on-exec off); every other one closes.
	for i := range cfg.FDs {
		if err := unix.Dup3(firstQEMUFD+i, 3+i, 0); err != nil {
			return fmt.Errorf("descriptor %d: %w", firstQEMUFD+i, err)
		}
	}
	if err := unix.CloseRange(uint(3+cfg.FDs), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(cfg.UID, cfg.UID, cfg.UID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(cfg.UID, cfg.UID, cfg.UID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// Changing the uid cleared the parent-death signal: QEMU dies with the driver's process,
	// as ns sandboxes do (a restarted server reaps what is left).
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("pdeathsig: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	env := []string{"PATH=/usr/bin", "HOME=/"}
	return fmt.Errorf("exec %s: %w", cfg.Argv[0], syscall.Exec(cfg.Argv[0], cfg.Argv, env))
}

func buildJail(cfg jailConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	root := cfg.Root
	r := func(p string) string { return filepath.Join(root, p) }
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("jail root: %w", err)
	}
	for _, d := range []string{"usr", "vm", "dev", "proc", "etc"} {
		if err := os.Mkdir(r(d), 0o755); err != nil {
			return err
		}
	}
	if err := bindRO("/usr", r("usr"), true); err != nil {
		return err
	}
	// Merged /usr: /lib, /lib64, /bin are links into it; on a host where they are
	// directories they are bound as /usr is.
	for _, d := range []string{"lib", "lib64", "bin"} {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, r(d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(r(d), 0o755); err != nil {
				return err
			}
			if err := bindRO("/"+d, r(d), true); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		if err := touch(r("etc/ld.so.cache")); err != nil {
			return err
		}
		if err := bindRO("/etc/ld.so.cache", r("etc/ld.so.cache"), false); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", r("dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return err
	}
	devs := []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"urandom", 1, 9}, {"random", 1, 8}}
	if cfg.KVM {
		devs = append(devs, struct {
			name         string
			major, minor uint32
		}{"kvm", 10, 232})
	}
	for _, d := range devs {
		p := r("dev/" + d.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", r("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	writable := map[string]bool{}
	for _, w := range cfg.Writable {
		writable[w] = true
	}
	for name, src := range cfg.Files {
		dst := r("vm/" + name)
		if err := touch(dst); err != nil {
			return err
		}
		if writable[name] {
			if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s: %w", src, err)
			}
			continue
		}
		if err := bindRO(src, dst, false); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("jail root read-only: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir("/")
}

// bindRO binds src on dst read-only (rec: with what is mounted below src).
func bindRO(src, dst string, rec bool) error {
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("bind %s read-only: %w", src, err)
	}
	return nil
}

func touch(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
