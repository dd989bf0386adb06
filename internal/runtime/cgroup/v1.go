package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/littlebigbrain/lbb/internal/runtime/kfile"
)

// v1Controllers are the hierarchies a sandbox joins; the first three are required.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer", "blkio"}

type v1 struct {
	parent string
	// mounts maps a controller to its hierarchy's mount point; co-mounted controllers
	// ("cpu,cpuacct") share one.
	mounts map[string]string
	// dirs are the distinct hierarchies, in v1Controllers order.
	dirs []string

	memswOnce sync.Once
	hasMemsw  bool
}

func newV1(parent string) (*v1, error) {
	mounts, err := Mounts()
	if err != nil {
		return nil, err
	}
	m := &v1{parent: parent, mounts: map[string]string{}}
	seen := map[string]bool{}
	var missing []string
	for _, c := range v1Controllers {
		mp, ok := mounts[c]
		if !ok {
			missing = append(missing, c)
			continue
		}
		m.mounts[c] = mp
		if !seen[mp] {
			seen[mp] = true
			m.dirs = append(m.dirs, mp)
		}
	}
	for _, c := range Required {
		if _, ok := m.mounts[c]; !ok {
			return nil, fmt.Errorf("cgroup v1: no %s hierarchy mounted (missing: %s): %w",
				c, strings.Join(missing, ", "), ErrUnavailable)
		}
	}
	if _, ok := m.mounts["freezer"]; !ok {
		return nil, fmt.Errorf("cgroup v1: no freezer hierarchy mounted: %w", ErrUnavailable)
	}
	return m, nil
}

func (m *v1) Version() int { return 1 }

func (m *v1) dir(ctl, name string) string {
	return filepath.Join(m.mounts[ctl], m.parent, name)
}

func (m *v1) Paths(name string) []string {
	out := make([]string, 0, len(m.dirs))
	for _, d := range m.dirs {
		out = append(out, filepath.Join(d, m.parent, name))
	}
	return out
}

func (m *v1) Create(name string, l Limits) error {
	return create(m, name, func() error { return m.create(name, l) })
}

func (m *v1) create(name string, l Limits) error {
	for _, d := range m.Paths(name) {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, os.ErrNotExist) { // the parent group is made once, by the first
			if err = os.MkdirAll(filepath.Dir(d), 0o755); err == nil {
				err = os.Mkdir(d, 0o755)
			}
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	mem := m.dir("memory", name)
	if l.MemoryBytes > 0 {
		v := fmt.Sprint(l.MemoryBytes)
		if err := writeFile(mem, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		// memory+swap at the same bound: a sandbox cannot escape its limit into swap.
		if m.memsw(mem) {
			if err := writeFile(mem, "memory.memsw.limit_in_bytes", v); err != nil {
				return err
			}
		} else if err := writeFile(mem, "memory.swappiness", "0"); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(m.dir("pids", name), "pids.max", fmt.Sprint(l.Pids)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		// A new group's period is the kernel's default, 100 ms (default_cfs_period): only the
		// quota is written.
		const period = 100_000
		cpu := m.dir("cpu", name)
		quota := int64(l.CPUs * period)
		if quota < 1000 {
			quota = 1000
		}
		if err := writeFile(cpu, "cpu.cfs_quota_us", fmt.Sprint(quota)); err != nil {
			return err
		}
	}
	if _, ok := m.mounts["blkio"]; ok {
		blk := m.dir("blkio", name)
		for _, io := range l.IO {
			for _, f := range []struct {
				file string
				v    uint64
			}{
				{"blkio.throttle.read_bps_device", io.ReadBPS},
				{"blkio.throttle.write_bps_device", io.WriteBPS},
				{"blkio.throttle.read_iops_device", io.ReadIOPS},
				{"blkio.throttle.write_iops_device", io.WriteIOPS},
			} {
				if f.v == 0 {
					continue
				}
				if err := writeFile(blk, f.file, fmt.Sprintf("%d:%d %d", io.Major, io.Minor, f.v)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// memsw says whether the kernel accounts memory+swap (swapaccount), which is the same for
// every group: asked of the first group made, once.
func (m *v1) memsw(group string) bool {
	m.memswOnce.Do(func() {
		_, err := os.Stat(filepath.Join(group, "memory.memsw.limit_in_bytes"))
		m.hasMemsw = err == nil
	})
	return m.hasMemsw
}

func (m *v1) CloneFD(string) (*os.File, error) { return nil, nil }

func (m *v1) Warm() { warm(filepath.Join(m.mounts["pids"], m.parent)) }

func (m *v1) Add(name string, pid int) error {
	for _, d := range m.Paths(name) {
		if err := writeFile(d, "cgroup.procs", fmt.Sprint(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Procs unions every hierarchy, so a process half-added by a failed Add is still found.
func (m *v1) Procs(name string) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range m.Paths(name) {
		pids, err := ReadProcs(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func (m *v1) Freeze(ctx context.Context, name string) error {
	return m.setFreezer(ctx, name, "FROZEN")
}

func (m *v1) Thaw(ctx context.Context, name string) error {
	return m.setFreezer(ctx, name, "THAWED")
}

func (m *v1) setFreezer(ctx context.Context, name, state string) error {
	d := m.dir("freezer", name)
	if err := writeFile(d, "freezer.state", state); err != nil {
		return err
	}
	return poll(ctx, "freezer "+state, func() (bool, error) {
		b, err := kfile.Read(filepath.Join(d, "freezer.state"))
		if err != nil {
			return false, err
		}
		s := strings.TrimSpace(string(b))
		if s != state {
			// Writing again retries tasks that were busy in the kernel.
			_ = writeFile(d, "freezer.state", state)
		}
		return s == state, nil
	})
}

func (m *v1) Kill(ctx context.Context, name string) error {
	if pids, err := m.Procs(name); err == nil && len(pids) == 0 {
		return nil
	}
	if _, err := os.Stat(m.dir("freezer", name)); errors.Is(err, os.ErrNotExist) {
		return killLoop(ctx, m, name)
	}
	if err := freezeKill(ctx, m, name); err != nil {
		return err
	}
	return killLoop(ctx, m, name)
}

func (m *v1) Stats(name string) (Stats, error) {
	g := Group{V1: true, Memory: m.dir("memory", name), Pids: m.dir("pids", name)}
	if _, ok := m.mounts["cpuacct"]; ok {
		g.CPU = m.dir("cpuacct", name)
	}
	return g.Stats()
}

func (m *v1) Remove(ctx context.Context, name string) error { return remove(ctx, m, name) }

func (m *v1) SetCPUWeight(name string, weight int) error {
	if err := validName(name); err != nil {
		return err
	}
	weight = min(max(weight, 1), 10000)
	return writeFile(m.dir("cpu", name), "cpu.shares", fmt.Sprint(max(weight*1024/100, 2)))
}
