//go:build linux

package ns

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
)

// Requirements lists what the host must have for this driver.
//
// Rootless mode is not supported for now: the driver maps each sandbox onto a range of
// 65536 host ids (an unprivileged user may map only its own id without newuidmap and
// /etc/subuid), attaches loop devices and mounts ext4 for the disk quota (root only), and
// writes cgroup v1 limits (root owns the hierarchies; only v2 with systemd delegation
// could hand a subtree to a user).
func (d *Driver) Requirements() []runtime.Requirement {
	return []runtime.Requirement{
		{Name: "root", Check: func() error {
			if os.Geteuid() != 0 {
				return errors.New("the ns driver needs root (euid 0): it maps each sandbox onto a 65536-id host range, " +
					"mounts a loop-device disk per sandbox and writes cgroup limits; rootless mode is not supported yet")
			}
			return nil
		}},
		{Name: "user namespaces", Check: func() error {
			b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
			if err != nil {
				return fmt.Errorf("kernel without user namespaces (CONFIG_USER_NS): %w", err)
			}
			if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 {
				return errors.New("user namespaces are disabled: sysctl user.max_user_namespaces=0")
			}
			return nil
		}},
		{Name: "overlayfs", Check: func() error { return needFilesystem("overlay") }},
		{Name: "ext4 and loop devices", Check: func() error {
			if err := needFilesystem("ext4"); err != nil {
				return err
			}
			if _, err := os.Stat("/dev/loop-control"); err != nil {
				return fmt.Errorf("no /dev/loop-control (modprobe loop): %w", err)
			}
			if _, err := exec.LookPath("mkfs.ext4"); err != nil {
				return errors.New("mkfs.ext4 not found: install e2fsprogs")
			}
			return nil
		}},
		{Name: "cgroups", Check: func() error {
			m, err := cgroup.Detect("", d.cfg.CgroupParent)
			if err != nil {
				return fmt.Errorf("need controllers %s (and freezer on v1): %w", strings.Join(cgroup.Required, ", "), err)
			}
			_ = m
			return nil
		}},
		{Name: "agent", Check: func() error { return checkStatic(d.cfg.AgentPath) }},
		{Name: "state directory", Check: func() error { return checkSearchable(d.cfg.StateDir) }},
	}
}

func needFilesystem(name string) error {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return nil
		}
	}
	return fmt.Errorf("the kernel has no %s file system (try: modprobe %s)", name, name)
}

// checkStatic requires an executable ELF without an interpreter: the image may have no libc
// that matches, and nothing of the host's is mounted in.
func checkStatic(path string) error {
	if path == "" {
		return errors.New("no agent binary configured (build it: CGO_ENABLED=0 go build ./cmd/lbb-agent)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	if fi.Mode()&0o111 == 0 || !fi.Mode().IsRegular() {
		return fmt.Errorf("agent binary %s is not an executable file (mode %v)", path, fi.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("agent binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("agent binary %s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// checkSearchable requires every existing ancestor of dir to be searchable by others: a
// sandbox's init runs as an unprivileged host id and reaches its mount points through them.
func checkSearchable(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&0o001 == 0 {
			return fmt.Errorf("%s (above the state directory %s) is not searchable by others (mode %v): "+
				"sandboxes, which run as unprivileged host ids, could not reach their files", d, dir, fi.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}
