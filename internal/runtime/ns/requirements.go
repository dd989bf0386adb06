//go:build linux

package ns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
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
		driverkit.NeedRoot("the ns driver needs root (euid 0): it maps each sandbox onto a 65536-id host range, " +
			"mounts a loop-device disk per sandbox and writes cgroup limits; rootless mode is not supported yet"),
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
		{Name: "overlayfs", Check: func() error { return driverkit.NeedFilesystem("overlay") }},
		driverkit.NeedLoopDisks(),
		{Name: "cgroups", Check: func() error {
			if _, err := cgroup.Detect("", d.cfg.CgroupParent); err != nil {
				return fmt.Errorf("need controllers %s (and freezer on v1): %w", strings.Join(cgroup.Required, ", "), err)
			}
			return nil
		}},
		{Name: "agent", Check: func() error {
			return driverkit.CheckStatic(d.cfg.AgentPath, "agent binary", driverkit.AgentHint)
		}},
		{Name: "state directory", Check: func() error { return checkSearchable(d.cfg.StateDir) }},
	}
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
