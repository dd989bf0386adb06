//go:build linux

package nsinit

// The zygote's init: the mode of the lbb-agent binary that the ns driver's zygote (package
// zygote) starts as its fork server. It builds a private, read-only view of one image, drops
// every capability but CAP_SYS_ADMIN and execs the image's python3 with the zygote program
// (zygote.py), which imports the harness and the default modules once and forks interpreters
// into sandboxes on the server's request.

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ZygoteArg is argv[1] of the zygote init.
const ZygoteArg = "__lbb_zygote_init__"

// File descriptors of the zygote init, as the server passes them.
const (
	ZygoteFDSocket = 3 // the server's SOCK_SEQPACKET socketpair end: spawn requests, answers
	ZygoteFDConfig = 4 // ZygoteConfig as JSON, then EOF
)

//go:embed zygote.py
var zygoteProgram string

// ZygoteConfig is what the server tells the zygote init.
type ZygoteConfig struct {
	// Image is the image's root file system on the host, bound read-only as the zygote's root.
	Image string `json:"image"`
	// Imports are imported once, before any fork.
	Imports []string `json:"imports"`
	// Env is python's whole environment.
	Env []string `json:"env"`
}

// capSysAdmin is the one capability the zygote keeps: setns into a sandbox's user namespace.
const capSysAdmin = 21

// MaybeZygote runs the zygote init when this process was started as one, and never returns
// then. harness is the python run() harness source (the agent's).
func MaybeZygote(harness string) {
	if len(os.Args) < 2 || os.Args[1] != ZygoteArg {
		return
	}
	runtime.LockOSThread()
	err := zygoteInit(harness)
	fmt.Fprintf(os.Stderr, "zygote init: %v\n", err)
	os.Exit(1)
}

func zygoteInit(harness string) error {
	cfgFile := os.NewFile(ZygoteFDConfig, "config")
	var cfg ZygoteConfig
	if err := json.NewDecoder(io.LimitReader(cfgFile, 1<<20)).Decode(&cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cfgFile.Close()
	if cfg.Image == "" || !filepath.IsAbs(cfg.Image) {
		return fmt.Errorf("image %q: want an absolute path", cfg.Image)
	}
	root := cfg.Image
	// Nothing mounted here propagates to the host; the image is seen read-only.
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := mount(root, root, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	dev := filepath.Join(root, "dev")
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "random", "urandom"} {
		dst := filepath.Join(dev, n)
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
		if err := mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := mount("", root, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return err
	}
	// pivot_root, not chroot: setns(CLONE_NEWUSER) refuses a chrooted caller.
	if err := pivot(root); err != nil {
		return err
	}
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	// Root's capabilities at exec are the bounding set: CAP_SYS_ADMIN alone (no securebits:
	// root must keep it across the exec).
	if err := dropBounds(capSysAdmin); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Every descriptor but 0-2 and the socket closes at exec.
	if err := unix.CloseRange(ZygoteFDSocket+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	py := ""
	for _, p := range []string{"/usr/local/bin/python3", "/usr/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			py = p
			break
		}
	}
	if py == "" {
		return errors.New("the image has no python3")
	}
	imports, _ := json.Marshal(cfg.Imports)
	argv := []string{"python3", "-c", zygoteProgram, harness, string(imports)}
	return fmt.Errorf("exec %s: %w", py, syscall.Exec(py, argv, cfg.Env))
}
