//go:build linux

package gvisor

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
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
		{Name: "root", Check: func() error {
			if os.Geteuid() != 0 {
				return errors.New("the gvisor driver needs root (euid 0): runsc sets up the sandbox's namespaces " +
					"and cgroups, and each sandbox's disk is a loop-mounted ext4; rootless runsc is not supported")
			}
			return nil
		}},
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
		{Name: "agent", Check: func() error {
			const hint = "build it: CGO_ENABLED=0 go build ./cmd/lbb-agent"
			if err := checkStatic(d.cfg.AgentPath, "agent binary", hint); err != nil {
				return err
			}
			// Its connect mode (cmd/lbb-agent/connect.go) is how it reaches the host here.
			b, err := os.ReadFile(d.cfg.AgentPath)
			if err != nil {
				return err
			}
			if !bytes.Contains(b, []byte("LBB_AGENT_CONNECT")) {
				return fmt.Errorf("agent binary %s has no connect mode (LBB_AGENT_CONNECT): rebuild it; %s", d.cfg.AgentPath, hint)
			}
			return nil
		}},
	}
}

// checkRunsc requires the pinned runsc, statically linked.
func checkRunsc(path string) error {
	if err := checkStatic(path, "runsc", installHint); err != nil {
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

// checkStatic requires an executable ELF without an interpreter: runsc re-executes itself
// where no dynamic loader is (it fails with "error executing umounter" otherwise), and the
// agent runs on an image whose libc is not the host's.
func checkStatic(path, what, hint string) error {
	if path == "" {
		return fmt.Errorf("no %s configured (%s)", what, hint)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if fi.Mode()&0o111 == 0 || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s is not an executable file (mode %v)", what, path, fi.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s %s is dynamically linked; it must be static (CGO_ENABLED=0): %s", what, path, hint)
		}
	}
	return nil
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
