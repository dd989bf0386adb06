//go:build linux

package gvisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/hostdisk"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/cgroup"
)

// runsc makes and removes each sandbox's cgroups (cgroupsPath /<parent>/<id>); the driver
// reads them for Stats, guards memory (oom.go) and removes what a killed runsc left.

// cgroupMounts answers the mount point of each cgroup v1 controller (and of named
// hierarchies, as "name=…"), and of the v2 hierarchy as "" when there is one.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || len(fields) < 5 {
			continue
		}
		mp := hostdisk.UnescapeMount(fields[4])
		switch fields[sep+1] {
		case "cgroup2":
			if _, ok := out[""]; !ok {
				out[""] = mp
			}
		case "cgroup":
			for _, opt := range strings.Split(fields[sep+3], ",") {
				switch opt {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "xattr":
				default:
					if _, ok := out[opt]; !ok {
						out[opt] = mp
					}
				}
			}
		}
	}
	return out, sc.Err()
}

// cgroupV1 reports whether the host uses cgroup v1 controllers (runsc does then).
func cgroupV1(m map[string]string) bool {
	_, ok := m["memory"]
	return ok
}

// cgroupPaths lists the sandbox's cgroup directories, one per hierarchy.
func cgroupPaths(parent, id string) []string {
	m, err := cgroupMounts()
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, mp := range m {
		p := filepath.Join(mp, parent, id)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// memoryDir is the sandbox's memory cgroup directory and whether it is v1.
func memoryDir(parent, id string) (string, bool, error) {
	m, err := cgroupMounts()
	if err != nil {
		return "", false, err
	}
	if cgroupV1(m) {
		return filepath.Join(m["memory"], parent, id), true, nil
	}
	if mp, ok := m[""]; ok {
		return filepath.Join(mp, parent, id), false, nil
	}
	return "", false, errors.New("no memory cgroup controller")
}

// removeCgroups removes the sandbox's cgroup directories that are left, retrying while the
// kernel still counts a process that is exiting in them.
func removeCgroups(ctx context.Context, parent, id string) error {
	var errs []error
	for _, p := range cgroupPaths(parent, id) {
		for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
			err := unix.Rmdir(p)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p, err))
				break
			}
			select {
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w (%w)", p, err, ctx.Err()))
			case <-time.After(delay):
				continue
			}
			break
		}
	}
	return errors.Join(errs...)
}

// cgroupStats reads the sandbox's CPU and memory accounting (Pids is counted inside).
func cgroupStats(parent, id string) (runtime.Stats, error) {
	var st runtime.Stats
	m, err := cgroupMounts()
	if err != nil {
		return st, err
	}
	if cgroupV1(m) {
		cpu, ok := m["cpuacct"]
		if !ok {
			return st, errors.New("no cpuacct cgroup controller")
		}
		mem := filepath.Join(m["memory"], parent, id)
		if st.CPUNanos, err = cgroup.ReadUint(filepath.Join(cpu, parent, id, "cpuacct.usage")); err != nil {
			return st, err
		}
		if st.MemoryBytes, err = cgroup.ReadUint(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
			return st, err
		}
		if st.MemoryMaxBytes, err = cgroup.ReadUint(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
			return st, err
		}
		st.OOMKills, _ = cgroup.ReadKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
		return st, nil
	}
	dir := filepath.Join(m[""], parent, id)
	usec, err := cgroup.ReadKey(filepath.Join(dir, "cpu.stat"), "usage_usec")
	if err != nil {
		return st, err
	}
	st.CPUNanos = usec * 1000
	if st.MemoryBytes, err = cgroup.ReadUint(filepath.Join(dir, "memory.current")); err != nil {
		return st, err
	}
	st.MemoryMaxBytes, _ = cgroup.ReadUint(filepath.Join(dir, "memory.peak"))
	st.OOMKills, _ = cgroup.ReadKey(filepath.Join(dir, "memory.events"), "oom_kill")
	return st, nil
}
