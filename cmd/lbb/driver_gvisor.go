//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
)

// The gvisor driver runs each sandbox on gVisor's user-space kernel (runsc, installed by
// scripts/install-runsc.sh at gvisor.DefaultRunsc). Its sandboxes live under
// <data-dir>/gvisor, apart from ns's, so that each driver lists and reaps only its own.
func init() {
	runtimes["gvisor"] = func(ctx context.Context, cfg config.Config, log *slog.Logger) (runtime.Driver, control.Image, error) {
		if _, err := os.Stat(cfg.Agent); err != nil {
			return nil, control.Image{}, fmt.Errorf("the guest agent (--agent, LBB_AGENT): %w; run `make build`", err)
		}
		if err := traversable(cfg.DataDir); err != nil {
			return nil, control.Image{}, err
		}
		d := gvisor.New(gvisor.Config{
			StateDir:  filepath.Join(cfg.DataDir, "gvisor"),
			AgentPath: cfg.Agent,
			Limits:    runtime.Limits{MemoryMiB: cfg.Defaults.MemoryMiB, CPUs: cfg.Defaults.CPUs, Pids: cfg.Defaults.Pids, DiskMiB: cfg.Defaults.DiskMiB},
			Logger:    log,
		})
		if err := runtime.CheckRequirements(d); err != nil {
			return nil, control.Image{}, err
		}
		img, err := buildImage(ctx, cfg)
		return d, img, err
	}
}
