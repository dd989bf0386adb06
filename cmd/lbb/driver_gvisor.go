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
	runtimes["gvisor"] = isolating(func(cfg config.Config, log *slog.Logger) runtime.Driver {
		return gvisor.New(gvisor.Config{StateDir: filepath.Join(cfg.DataDir, "gvisor"), AgentPath: cfg.Agent, Limits: defaultLimits(cfg), Logger: log})
	})
}
