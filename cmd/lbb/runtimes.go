//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/microvm"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
)

// The isolating drivers. ns runs each sandbox in namespaces and cgroups of its own, under
// <data-dir>/sandboxes. gvisor runs each on gVisor's user-space kernel (runsc, installed by
// scripts/install-runsc.sh at gvisor.DefaultRunsc), under <data-dir>/gvisor, apart from ns's,
// so that each driver lists and reaps only its own. microvm runs each in a QEMU microvm with
// the guest kernel lbb images build fetched, under <data-dir>/microvm.
func init() {
	runtimes["ns"] = isolating(func(cfg config.Config, log *slog.Logger) runtime.Driver {
		return ns.New(ns.Config{StateDir: filepath.Join(cfg.DataDir, "sandboxes"), AgentPath: cfg.Agent, Limits: defaultLimits(cfg), Logger: log,
			CgroupParent: cfg.CgroupParent})
	})
	runtimes["gvisor"] = isolating(func(cfg config.Config, log *slog.Logger) runtime.Driver {
		return gvisor.New(gvisor.Config{StateDir: filepath.Join(cfg.DataDir, "gvisor"), AgentPath: cfg.Agent, Limits: defaultLimits(cfg), Logger: log,
			CgroupParent: suffixed(cfg.CgroupParent, "-gvisor")})
	})
	microvmFactory := isolating(func(cfg config.Config, log *slog.Logger) runtime.Driver {
		return microvm.New(microvm.Config{StateDir: filepath.Join(cfg.DataDir, "microvm"), AgentPath: cfg.Agent,
			ImagesDir: cfg.ImagesDir, Limits: defaultLimits(cfg), Logger: log, CgroupParent: suffixed(cfg.CgroupParent, "-microvm")})
	})
	open := microvmFactory.open
	microvmFactory.open = func(cfg config.Config, log *slog.Logger) (runtime.Driver, error) {
		// The guest kernel is part of the base image's build; a server that builds the image
		// when it is missing fetches the kernel likewise (once: it is cached).
		if _, err := images.CurrentKernel(cfg.ImagesDir); err != nil {
			if _, err := images.BuildKernel(context.Background(), images.Options{Dir: cfg.ImagesDir, Mirror: cfg.Mirror, Progress: os.Stderr}); err != nil {
				return nil, fmt.Errorf("runtime \"microvm\": %w", err)
			}
		}
		return open(cfg, log)
	}
	runtimes["microvm"] = microvmFactory
}

// isolating is the factory of a driver that isolates: it runs the guest agent in sandboxes
// whose state is under the data directory, on the base image. Both are checked before
// newDriver makes the driver, and the driver's requirements after.
func isolating(newDriver func(cfg config.Config, log *slog.Logger) runtime.Driver) runtimeFactory {
	return runtimeFactory{
		open: func(cfg config.Config, log *slog.Logger) (runtime.Driver, error) {
			if err := checkAgent(cfg); err != nil {
				return nil, err
			}
			if err := traversable(cfg.DataDir); err != nil {
				return nil, err
			}
			d := newDriver(cfg, log)
			return d, runtime.CheckRequirements(d)
		},
		image: buildImage,
	}
}

// checkAgent checks that the guest agent every isolating driver puts in its sandboxes is there.
func checkAgent(cfg config.Config) error {
	if _, err := os.Stat(cfg.Agent); err != nil {
		return fmt.Errorf("the guest agent (--agent, LBB_AGENT): %w; run `make build`", err)
	}
	return nil
}

func defaultLimits(cfg config.Config) runtime.Limits {
	return runtime.Limits{MemoryMiB: cfg.Defaults.MemoryMiB, CPUs: cfg.Defaults.CPUs, Pids: cfg.Defaults.Pids, DiskMiB: cfg.Defaults.DiskMiB}
}

// traversable checks that every directory above the data directory lets others through:
// each sandbox's root is an unprivileged host id that must reach its state there.
func traversable(dataDir string) error {
	for dir := filepath.Dir(dataDir); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("--data-dir %s: sandboxes cannot pass through %s (mode %04o); chmod o+x it, or choose another --data-dir",
				dataDir, dir, fi.Mode().Perm())
		}
		if dir == "/" {
			return nil
		}
	}
}

// suffixed is parent with suffix after it, or "" (the driver's default) for no parent.
func suffixed(parent, suffix string) string {
	if parent == "" {
		return ""
	}
	return parent + suffix
}
