// Package cgroup places sandboxes in control groups and bounds what they use: memory, pids,
// CPU time and block I/O, plus freezing and killing a whole sandbox at once. It speaks cgroup
// v1 (one hierarchy per controller) and v2 (one unified tree) behind one Manager, chosen by
// Detect from what the host mounts.
package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/littlebigbrain/lbb/internal/runtime/kfile"
	"github.com/moby/sys/mountinfo"
)

// Limits bounds one group. Zero fields are left unlimited.
type Limits struct {
	MemoryBytes int64
	// CPUs is a CFS quota in CPUs (1.5 = 150 ms per 100 ms period).
	CPUs float64
	Pids int64
	IO   []IOLimit
}

// IOLimit throttles one block device.
type IOLimit struct {
	Major, Minor                           uint32
	ReadBPS, WriteBPS, ReadIOPS, WriteIOPS uint64
}

// Stats is a group's accounting.
type Stats struct {
	CPUNanos       uint64
	MemoryBytes    uint64
	MemoryMaxBytes uint64
	OOMKills       uint64
	Pids           uint64
}

// Manager creates and drives the groups of one parent ("lbb"). Names are sandbox ids.
// Every method is safe for concurrent use on different names.
type Manager interface {
	// Version is 1 or 2.
	Version() int
	// Create makes the group and writes its limits; on failure nothing stays.
	Create(name string, l Limits) error
	// Add moves pid (and its threads) into the group.
	Add(name string, pid int) error
	// Warm makes the next Adds cheap; see warm.
	Warm()
	// CloneFD opens the group for clone(CLONE_INTO_CGROUP), so that a child is born in it
	// and needs no Add. It answers nil when the hierarchy cannot (v1: a group per controller).
	CloneFD(name string) (*os.File, error)
	// Procs lists the processes in the group.
	Procs(name string) ([]int, error)
	Freeze(ctx context.Context, name string) error
	Thaw(ctx context.Context, name string) error
	// Kill SIGKILLs everything in the group, freezing it first so nothing forks meanwhile,
	// and waits until the group is empty.
	Kill(ctx context.Context, name string) error
	Stats(name string) (Stats, error)
	// SetCPUWeight sets the group's share of contended CPU against its siblings, in cgroup
	// v2's units: 1..10000, 100 the default (v1: cpu.shares = weight × 1024 / 100).
	SetCPUWeight(name string, weight int) error
	// Remove kills what is left and removes the group. Removing a missing group is no error.
	Remove(ctx context.Context, name string) error
	// Paths lists the group's directories (for tests and diagnostics).
	Paths(name string) []string
}

// ErrUnavailable says the host lacks a controller lbb needs.
var ErrUnavailable = errors.New("cgroup controller unavailable")

// Required are the controllers a sandbox cannot do without.
var Required = []string{"memory", "pids", "cpu"}

// Detect chooses v2 when root ("/sys/fs/cgroup") is a unified hierarchy with the required
// controllers enabled, else v1 from the controllers' mount points in /proc/self/mountinfo.
func Detect(root, parent string) (Manager, error) {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	if parent == "" || strings.Contains(parent, "..") {
		return nil, fmt.Errorf("cgroup: invalid parent %q", parent)
	}
	if isCgroup2(root) {
		return newV2(root, parent)
	}
	return newV1(parent)
}

// Mounts answers where the hierarchies are mounted: each cgroup v1 controller's (and named
// hierarchy's, as "name=…"), and the v2 hierarchy's as "". Co-mounted controllers
// ("cpu,cpuacct") share one.
func Mounts() (map[string]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, mi := range infos {
		if mi.Root != "/" {
			continue // a subtree bound elsewhere: not the hierarchy's root
		}
		if mi.FSType == "cgroup2" {
			if _, ok := out[""]; !ok {
				out[""] = mi.Mountpoint
			}
			continue
		}
		for _, opt := range strings.Split(mi.VFSOptions, ",") {
			switch opt {
			case "rw", "ro", "clone_children", "xattr", "noprefix":
				continue
			}
			if _, ok := out[opt]; !ok && !strings.HasPrefix(opt, "release_agent=") {
				out[opt] = mi.Mountpoint
			}
		}
	}
	return out, nil
}

// V1 reports whether m (from Mounts) has the cgroup v1 memory controller: the host is run
// with v1 hierarchies.
func V1(m map[string]string) bool {
	_, ok := m["memory"]
	return ok
}

func writeFile(dir, name, value string) error {
	p := filepath.Join(dir, name)
	if err := kfile.Write(p, []byte(value)); err != nil {
		return fmt.Errorf("write %s=%q: %w", p, value, err)
	}
	return nil
}

// ReadUint reads a cgroup file holding one number ("max" reads as 0).
func ReadUint(path string) (uint64, error) {
	b, err := kfile.Read(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// ReadKey reads "key value" lines (memory.oom_control, memory.events, cpu.stat).
func ReadKey(path, key string) (uint64, error) {
	b, err := kfile.Read(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q", path, key)
}

// ReadProcs lists the processes in the group at dir.
func ReadProcs(dir string) ([]int, error) {
	b, err := kfile.Read(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// warm takes the kernel's global cgroup migration lock once, without moving anything, by
// asking to move a pid that cannot exist. That lock is a per-cpu rwsem whose first writer
// waits for an RCU grace period (about 10 ms on a small VM); while writers keep coming it
// stays cheap. Called early in a sandbox start, in parallel with the rest, it hides that wait
// from the Add that follows.
func warm(dir string) {
	b, err := kfile.Read("/proc/sys/kernel/pid_max")
	if err != nil {
		return
	}
	_ = kfile.Write(filepath.Join(dir, "cgroup.procs"), bytes.TrimSpace(b))
}
