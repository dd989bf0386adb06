package driverkit

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// AgentHint says how to build the agent binary.
const AgentHint = "build it: CGO_ENABLED=0 go build ./cmd/lbb-agent"

// NeedRoot requires euid 0; why says what the driver does with it.
func NeedRoot(why string) runtime.Requirement {
	return runtime.Requirement{Name: "root", Check: func() error {
		if os.Geteuid() != 0 {
			return errors.New(why)
		}
		return nil
	}}
}

// NeedLoopDisks requires what a sandbox's disk is made of: ext4 on a loop device, formatted
// by mkfs.ext4.
func NeedLoopDisks() runtime.Requirement {
	return runtime.Requirement{Name: "ext4 and loop devices", Check: func() error {
		if err := NeedFilesystem("ext4"); err != nil {
			return err
		}
		if _, err := os.Stat("/dev/loop-control"); err != nil {
			return fmt.Errorf("no /dev/loop-control (modprobe loop): %w", err)
		}
		if _, err := exec.LookPath("mkfs.ext4"); err != nil {
			return errors.New("mkfs.ext4 not found: install e2fsprogs")
		}
		return nil
	}}
}

// NeedFilesystem requires the kernel to know file system name.
func NeedFilesystem(name string) error {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return nil
		}
	}
	return fmt.Errorf("the kernel has no %s file system (try: modprobe %s)", name, name)
}

// CheckStatic requires an executable ELF without an interpreter at path: the agent runs on an
// image whose libc is not the host's, and runsc re-executes itself where no dynamic loader
// is. what names the file in errors, hint says how to get a good one.
func CheckStatic(path, what, hint string) error {
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
