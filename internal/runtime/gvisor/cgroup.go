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
