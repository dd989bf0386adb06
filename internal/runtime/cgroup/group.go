package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/littlebigbrain/lbb/internal/runtime/kfile"
	"golang.org/x/sys/unix"
)

// Group names the directories of one group, whoever made it (a Manager, or runsc for the
// gvisor driver): on v1 one per controller, on v2 the same one for all. An empty directory is
// a controller not read.
type Group struct {
	V1                bool
	CPU, Memory, Pids string
}

// GroupOf answers the group parent/name in the hierarchies of m (from Mounts).
func GroupOf(m map[string]string, parent, name string) Group {
	at := func(mp string, ok bool) string {
		if !ok {
			return ""
		}
		return filepath.Join(mp, parent, name)
	}
	if V1(m) {
		cpu, okc := m["cpuacct"]
		mem, okm := m["memory"]
		pids, okp := m["pids"]
		return Group{V1: true, CPU: at(cpu, okc), Memory: at(mem, okm), Pids: at(pids, okp)}
	}
	d := at(m[""], true)
	return Group{CPU: d, Memory: d, Pids: d}
}

// Stats reads the group's accounting.
func (g Group) Stats() (Stats, error) {
	var s Stats
	var errs []error
	get := func(dst *uint64, dir, file, key string) {
		if dir == "" {
			return
		}
		var err error
		if key == "" {
			*dst, err = ReadUint(filepath.Join(dir, file))
		} else {
			*dst, err = ReadKey(filepath.Join(dir, file), key)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if g.V1 {
		get(&s.CPUNanos, g.CPU, "cpuacct.usage", "")
		get(&s.MemoryBytes, g.Memory, "memory.usage_in_bytes", "")
		get(&s.MemoryMaxBytes, g.Memory, "memory.max_usage_in_bytes", "")
		// oom_kill appeared in memory.oom_control in Linux 4.13.
		get(&s.OOMKills, g.Memory, "memory.oom_control", "oom_kill")
	} else {
		var usec uint64
		get(&usec, g.CPU, "cpu.stat", "usage_usec")
		s.CPUNanos = usec * 1000
		get(&s.MemoryBytes, g.Memory, "memory.current", "")
		// memory.peak appeared in Linux 5.19; older kernels report no peak.
		s.MemoryMaxBytes, _ = ReadUint(filepath.Join(g.Memory, "memory.peak"))
		get(&s.OOMKills, g.Memory, "memory.events", "oom_kill")
	}
	get(&s.Pids, g.Pids, "pids.current", "")
	return s, errors.Join(errs...)
}

// The cgroup v1 memory controller's OOM control, for a driver that kills inside a sandbox
// itself rather than let the kernel pick a host process of its group (the gvisor driver:
// the group holds the Sentry, whose death is the whole sandbox's). v2 has no such switch.

// WatchOOM turns the kernel's OOM killer off for the v1 memory group at dir and answers an
// eventfd that becomes readable each time the group runs out of memory, and when the group
// is removed. Tasks that fault meanwhile wait until memory is freed or the limit lifted.
func WatchOOM(dir string) (*os.File, error) {
	if err := kfile.Write(filepath.Join(dir, "memory.oom_control"), []byte("1")); err != nil {
		return nil, fmt.Errorf("memory.oom_control: %w", err)
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	efd := os.NewFile(uintptr(fd), "oom-eventfd")
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		efd.Close()
		return nil, err
	}
	err = writeFile(dir, "cgroup.event_control", fmt.Sprintf("%d %d", fd, ctl.Fd()))
	ctl.Close()
	if err != nil {
		efd.Close()
		return nil, err
	}
	return efd, nil
}

// GiveUpOOM hands the v1 memory group at dir back to the kernel's OOM killer.
func GiveUpOOM(dir string) error {
	return writeFile(dir, "memory.oom_control", "0")
}

// UnderOOM reports whether the v1 memory group at dir is out of memory, its tasks waiting.
func UnderOOM(dir string) bool {
	v, err := ReadKey(filepath.Join(dir, "memory.oom_control"), "under_oom")
	return err == nil && v == 1
}

// MemoryUsage is the v1 memory group's usage in bytes (0 when it cannot be read).
func MemoryUsage(dir string) uint64 {
	v, _ := ReadUint(filepath.Join(dir, "memory.usage_in_bytes"))
	return v
}

// SetMemoryLimit sets the v1 memory group's limit. The kernel refuses a limit below the
// usage with EBUSY (after trying to reclaim).
func SetMemoryLimit(dir string, limit int64) error {
	return kfile.Write(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)))
}

// MovePID moves process pid into the group at dir. A process that has exited meanwhile is
// no error.
func MovePID(dir string, pid int) error {
	err := kfile.Write(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)))
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
