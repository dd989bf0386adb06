//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
)

// runsc makes and removes each sandbox's cgroups (cgroupsPath /<parent>/<id>); the driver
// reads them for Stats, guards memory (oom.go) and removes what a killed runsc left.

// cgroupPaths lists the sandbox's cgroup directories, one per hierarchy.
func cgroupPaths(parent, id string) []string {
	m, err := cgroup.Mounts()
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
	m, err := cgroup.Mounts()
	if err != nil {
		return "", false, err
	}
	g := cgroup.GroupOf(m, parent, id)
	if g.Memory == "" {
		return "", false, errors.New("no memory cgroup controller")
	}
	return g.Memory, g.V1, nil
}

// removeCgroups removes the sandbox's cgroup directories that are left, retrying while the
// kernel still counts a process that is exiting in them.
func removeCgroups(ctx context.Context, parent, id string) error {
	var errs []error
	for _, p := range cgroupPaths(parent, id) {
		if err := cgroup.Rmdir(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// cgroupStats reads the sandbox's CPU and memory accounting (Pids is counted inside: the
// host sees the Sentry's threads).
func cgroupStats(parent, id string) (runtime.Stats, error) {
	m, err := cgroup.Mounts()
	if err != nil {
		return runtime.Stats{}, err
	}
	g := cgroup.GroupOf(m, parent, id)
	if g.CPU == "" {
		return runtime.Stats{}, errors.New("no cpuacct cgroup controller")
	}
	g.Pids = ""
	st, err := g.Stats()
	return runtime.Stats(st), err
}

// SetCPUWeight weighs a started sandbox's claim on contended CPU (runtime.Prioritizer): the
// cpu.shares (v1) or cpu.weight (v2) of the cgroup runsc made for it, which holds its Sentry,
// gofer and every process inside. A warm pool builds its slots at a low weight, so that a
// Sentry importing pandas for the next claim does not slow the runs being served.
func (d *Driver) SetCPUWeight(ctx context.Context, id string, weight int) error {
	if _, err := d.sbs.Started(id); err != nil {
		return err
	}
	m, err := cgroup.Detect("", d.cfg.CgroupParent)
	if err != nil {
		return err
	}
	return m.SetCPUWeight(id, weight)
}
