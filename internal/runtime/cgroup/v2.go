package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// v2 drives one unified hierarchy. It is chosen only when /sys/fs/cgroup is cgroup2 with
// memory, pids and cpu enabled; the controllers are delegated down to <root>/<parent>.
type v2 struct {
	root, parent string
	io           bool
}

func isCgroup2(root string) bool {
	var st unix.Statfs_t
	return unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

func newV2(root, parent string) (*v2, error) {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		have[c] = true
	}
	for _, c := range Required {
		if !have[c] {
			return nil, fmt.Errorf("cgroup v2: controller %s not enabled in %s: %w", c, root, ErrUnavailable)
		}
	}
	m := &v2{root: root, parent: parent, io: have["io"]}
	// Delegate the controllers to the parent's children. The root's subtree_control may
	// already have them (systemd does this); writing is then a no-op.
	ctls := "+memory +pids +cpu"
	if m.io {
		ctls += " +io"
	}
	pdir := filepath.Join(root, parent)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{root, pdir} {
		if err := writeFile(d, "cgroup.subtree_control", ctls); err != nil {
			return nil, fmt.Errorf("cgroup v2: delegate controllers: %w", err)
		}
	}
	return m, nil
}

func (m *v2) Version() int { return 2 }

func (m *v2) dir(name string) string { return filepath.Join(m.root, m.parent, name) }

func (m *v2) Paths(name string) []string { return []string{m.dir(name)} }

func (m *v2) Create(name string, l Limits) error {
	return create(m, name, func() error { return m.create(name, l) })
}

func (m *v2) create(name string, l Limits) error {
	d := m.dir(name)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if l.MemoryBytes > 0 {
		if err := writeFile(d, "memory.max", fmt.Sprint(l.MemoryBytes)); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
			if err := writeFile(d, "memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if l.Pids > 0 {
		if err := writeFile(d, "pids.max", fmt.Sprint(l.Pids)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		const period = 100_000
		quota := int64(l.CPUs * period)
		if quota < 1000 {
			quota = 1000
		}
		if err := writeFile(d, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
			return err
		}
	}
	if m.io {
		for _, io := range l.IO {
			var kv []string
			for _, f := range []struct {
				k string
				v uint64
			}{{"rbps", io.ReadBPS}, {"wbps", io.WriteBPS}, {"riops", io.ReadIOPS}, {"wiops", io.WriteIOPS}} {
				if f.v > 0 {
					kv = append(kv, fmt.Sprintf("%s=%d", f.k, f.v))
				}
			}
			if len(kv) > 0 {
				if err := writeFile(d, "io.max", fmt.Sprintf("%d:%d %s", io.Major, io.Minor, strings.Join(kv, " "))); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (m *v2) CloneFD(name string) (*os.File, error) {
	fd, err := unix.Open(m.dir(name), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), m.dir(name)), nil
}

// Warm does nothing: on v2 a sandbox's init is born in its group (CloneFD), never moved.
func (m *v2) Warm() {}

func (m *v2) Add(name string, pid int) error {
	return writeFile(m.dir(name), "cgroup.procs", fmt.Sprint(pid))
}

func (m *v2) Procs(name string) ([]int, error) {
	pids, err := ReadProcs(m.dir(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return pids, err
}

func (m *v2) Freeze(ctx context.Context, name string) error { return m.setFrozen(ctx, name, "1") }
func (m *v2) Thaw(ctx context.Context, name string) error   { return m.setFrozen(ctx, name, "0") }

func (m *v2) setFrozen(ctx context.Context, name, v string) error {
	d := m.dir(name)
	if err := writeFile(d, "cgroup.freeze", v); err != nil {
		return err
	}
	return poll(ctx, "cgroup.freeze="+v, func() (bool, error) {
		got, err := ReadKey(filepath.Join(d, "cgroup.events"), "frozen")
		return fmt.Sprint(got) == v, err
	})
}

func (m *v2) Kill(ctx context.Context, name string) error {
	d := m.dir(name)
	if _, err := os.Stat(d); err != nil {
		return err
	}
	// cgroup.kill (Linux 5.14) kills the whole subtree atomically, with no fork race.
	if err := writeFile(d, "cgroup.kill", "1"); err != nil {
		if err := freezeKill(ctx, m, name); err != nil {
			return err
		}
	}
	return killLoop(ctx, m, name)
}

func (m *v2) Stats(name string) (Stats, error) {
	d := m.dir(name)
	return Group{CPU: d, Memory: d, Pids: d}.Stats()
}

func (m *v2) Remove(ctx context.Context, name string) error { return remove(ctx, m, name) }

func (m *v2) SetCPUWeight(name string, weight int) error {
	if err := validName(name); err != nil {
		return err
	}
	return writeFile(m.dir(name), "cpu.weight", fmt.Sprint(min(max(weight, 1), 10000)))
}
