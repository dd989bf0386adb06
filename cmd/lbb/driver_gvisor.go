//go:build linux

package main

import (
	"log/slog"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
)

// The gvisor driver runs each sandbox on gVisor's user-space kernel (runsc, installed by
// scripts/install-runsc.sh at gvisor.DefaultRunsc). Its sandboxes live under
// <data-dir>/gvisor, apart from ns's, so that each driver lists and reaps only its own.
func init() {
	runtimes["gvisor"] = runtimeFactory{
		open: func(cfg config.Config, log *slog.Logger) (runtime.Driver, error) {
			if err := checkAgent(cfg); err != nil {
				return nil, err
			}
			if err := traversable(cfg.DataDir); err != nil {
				return nil, err
			}
			d := gvisor.New(gvisor.Config{
				StateDir:  filepath.Join(cfg.DataDir, "gvisor"),
				AgentPath: cfg.Agent,
				Limits:    defaultLimits(cfg),
				Logger:    log,
			})
			return d, runtime.CheckRequirements(d)
		},
		image: buildImage,
	}
}
