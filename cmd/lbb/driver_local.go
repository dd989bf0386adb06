//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// The local driver isolates nothing: code runs as this user with this machine's files and
// network. It is for developing lbb itself without root, so it serves on loopback only.
func init() {
	runtimes["local"] = func(ctx context.Context, cfg config.Config, log *slog.Logger) (runtime.Driver, control.Image, error) {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, control.Image{}, fmt.Errorf("--runtime local isolates nothing and serves only on a loopback address, not %s", cfg.Addr)
		}
		fmt.Fprintln(os.Stderr, "lbb: WARNING: --runtime local runs code WITHOUT ISOLATION, as this user; use it only to develop lbb")
		d := local.New(local.Options{AgentPath: cfg.Agent, StateDir: filepath.Join(cfg.DataDir, "sandboxes"), Logger: log})
		if err := runtime.CheckRequirements(d); err != nil {
			return nil, control.Image{}, err
		}
		img := control.Image{ID: "host", Rootfs: "/"}
		if m, err := images.Current(cfg.ImagesDir); err == nil {
			img = control.Image{ID: m.ID, Rootfs: m.Rootfs, Versions: m.Versions, Missing: m.Missing}
		}
		return d, img, nil
	}
}
