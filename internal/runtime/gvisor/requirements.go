//go:build linux

package gvisor

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
)

// RunscVersion is the gVisor module version the driver is written and tested against; keep it
// in step with RUNSC_VERSION in scripts/install-runsc.sh.
const RunscVersion = "v0.0.0-20260905035102-160fafc42237"

// installHint says how to get the runsc the driver wants.
const installHint = "run scripts/install-runsc.sh"

// Requirements lists what the host must have for this driver: root (runsc sets up namespaces,
// cgroups and the sandbox's user namespace mapping; the disk is a loop-mounted ext4), the
// pinned runsc, static, a memory and a CPU cgroup controller, ext4 and loop devices, and a
// static agent.
func (d *Driver) Requirements() []runtime.Requirement {
	return []runtime.Requirement{
		driverkit.NeedRoot("the gvisor driver needs root (euid 0): runsc sets up the sandbox's namespaces " +
			"and cgroups, and each sandbox's disk is a loop-mounted ext4; rootless runsc is not supported"),
		{Name: "runsc " + d.cfg.Runsc, Check: func() error { return checkRunsc(d.cfg.Runsc) }},
		{Name: "cgroups", Check: func() error {
			m, err := cgroup.Mounts()
			if err != nil {
				return err
			}
			if cgroup.V1(m) {
				for _, c := range []string{"memory", "cpu", "cpuacct"} {
					if _, ok := m[c]; !ok {
						return fmt.Errorf("no %s cgroup controller mounted", c)
					}
				}
				return nil
			}
			mp, ok := m[""]
			if !ok {
				return errors.New("no cgroup hierarchy mounted")
			}
			b, err := os.ReadFile(filepath.Join(mp, "cgroup.controllers"))
			if err != nil {
				return err
			}
			for _, c := range []string{"memory", "cpu"} {
				if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+c+" ") {
					return fmt.Errorf("cgroup v2 without the %s controller", c)
				}
			}
			return nil
		}},
		driverkit.NeedLoopDisks(),
		{Name: "agent", Check: func() error {
			if err := driverkit.CheckStatic(d.cfg.AgentPath, "agent binary", driverkit.AgentHint); err != nil {
				return err
			}
			// Its connect mode (cmd/lbb-agent/connect.go) is how it reaches the host here.
			b, err := os.ReadFile(d.cfg.AgentPath)
			if err != nil {
				return err
			}
			if !bytes.Contains(b, []byte("LBB_AGENT_CONNECT")) {
				return fmt.Errorf("agent binary %s has no connect mode (LBB_AGENT_CONNECT): rebuild it; %s", d.cfg.AgentPath, driverkit.AgentHint)
			}
			return nil
		}},
	}
}

// checkRunsc requires the pinned runsc, statically linked.
func checkRunsc(path string) error {
	if err := driverkit.CheckStatic(path, "runsc", installHint); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("runsc not installed at %s: %s", path, installHint)
		}
		return err
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("runsc %s: %w (%s)", path, err, installHint)
	}
	if info.Main.Path != "gvisor.dev/gvisor" || info.Main.Version != RunscVersion {
		return fmt.Errorf("runsc %s is %s %s, want gvisor.dev/gvisor %s: %s", path, info.Main.Path, info.Main.Version, RunscVersion, installHint)
	}
	return nil
}
