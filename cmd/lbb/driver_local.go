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
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// The local driver isolates nothing: code runs as this user with this machine's files and
// network. It is for developing lbb itself without root, so it serves on loopback only, and
// only when it is the server's default (--runtime local): no call can pick it otherwise.
// Its sandboxes live under <data-dir>/local, apart from ns's.
func init() {
	runtimes["local"] = runtimeFactory{
		onlyDefault: "it isolates nothing; a server runs it only as its default (--runtime local)",
		open: func(cfg config.Config, log *slog.Logger) (runtime.Driver, error) {
			host, _, _ := net.SplitHostPort(cfg.Addr)
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return nil, fmt.Errorf("--runtime local isolates nothing and serves only on a loopback address, not %s", cfg.Addr)
			}
			fmt.Fprintln(os.Stderr, "lbb: WARNING: --runtime local runs code WITHOUT ISOLATION, as this user; use it only to develop lbb")
			d := local.New(local.Options{AgentPath: cfg.Agent, StateDir: filepath.Join(cfg.DataDir, "local"), Logger: log})
			return d, runtime.CheckRequirements(d)
		},
		// The host's own root when no base image is built: the other drivers cannot run then.
		image: func(ctx context.Context, cfg config.Config) (baseImage, error) {
			if m, err := images.Current(cfg.ImagesDir); err == nil {
				return imageOf(m), nil
			}
			return baseImage{Image: hostagent.Image{ID: "host"}, Rootfs: "/"}, nil
		},
	}
}
