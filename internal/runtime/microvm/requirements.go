//go:build linux

package microvm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
)

// installHint says how to get QEMU.
const installHint = "install it: scripts/deps.sh (apt-get install --no-install-recommends qemu-system-x86)"

// Requirements lists what the host must have: root (QEMU's jail: namespaces, a uid per
// sandbox, cgroups), QEMU with the microvm machine, the guest kernel and a static agent
// with the guest's supervisor. Acceleration is no requirement: without a KVM that boots a
// guest the machines run under TCG, and the requirement's name says so (a warning, not a
// failure).
func (d *Driver) Requirements() []runtime.Requirement {
	a := d.accel()
	accel := "acceleration: kvm"
	if a.name == "tcg" {
		accel = "acceleration: tcg (emulated, seconds per boot; " + a.why + ")"
	}
	return []runtime.Requirement{
		driverkit.NeedRoot("the microvm driver needs root (euid 0): it jails QEMU in namespaces of its own, " +
			"as a uid per sandbox, and writes cgroup limits"),
		{Name: "qemu " + d.cfg.QEMU, Check: func() error { return checkQEMU(d.cfg.QEMU) }},
		{Name: "guest kernel", Check: func() error {
			_, err := images.CurrentKernel(d.cfg.ImagesDir)
			return err
		}},
		{Name: "cgroups", Check: func() error {
			if _, err := cgroup.Detect("", d.cfg.CgroupParent); err != nil {
				return fmt.Errorf("need controllers %s (and freezer on v1): %w", strings.Join(cgroup.Required, ", "), err)
			}
			return nil
		}},
		{Name: "agent", Check: func() error {
			if err := driverkit.CheckStatic(d.cfg.AgentPath, "agent binary", driverkit.AgentHint); err != nil {
				return err
			}
			b, err := os.ReadFile(d.cfg.AgentPath)
			if err != nil {
				return err
			}
			if !bytes.Contains(b, []byte("LBB_AGENT_SERIAL")) {
				return fmt.Errorf("agent binary %s has no microvm guest (LBB_AGENT_SERIAL): rebuild it; %s", d.cfg.AgentPath, driverkit.AgentHint)
			}
			return nil
		}},
		{Name: accel, Check: func() error { return nil }},
	}
}

// checkQEMU requires a QEMU that has the microvm machine.
func checkQEMU(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: %w; %s", path, err, installHint)
	}
	out, err := exec.Command(path, "-machine", "help").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -machine help: %w: %s", path, err, out)
	}
	if !bytes.Contains(out, []byte("microvm")) {
		return errors.New(path + " has no microvm machine")
	}
	return nil
}
