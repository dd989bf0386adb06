//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/hostagent/remote"
)

func init() {
	commands["host"] = command{summary: "Run this machine's host agent for an lbb serve --host-agent (on --listen, default 127.0.0.1:7702)", run: runHost}
}

// runHost runs the host agent on its own: the drivers, warm pool and image of lbb serve,
// served over HTTP/2 to a control plane elsewhere (docs/architecture.md).
func runHost(args []string) error {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7702", "address to serve the host agent on (HTTP/2 in clear text: keep it on loopback or a private network)")
	token := fs.String("token", "", "token a control plane must present (LBB_HOST_TOKEN); required")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: lbb host --token TOKEN [flags]\n\nThe flags of lbb serve that set up sandboxes (--data-dir, --runtime, --pool, …) apply here too, with their LBB_* variables; --listen and --token are LBB_HOST_LISTEN and LBB_HOST_TOKEN.\n\n")
		fs.PrintDefaults()
	}
	getenv := func(k string) string {
		switch k {
		case config.EnvName("listen"):
			k = "LBB_HOST_LISTEN"
		case config.EnvName("token"):
			k = "LBB_HOST_TOKEN"
		}
		return os.Getenv(k)
	}
	cfg, err := config.Load(fs, args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *token == "" {
		return errors.New("--token (or LBB_HOST_TOKEN) is required: whoever presents it runs code here")
	}
	if cfg.HostAgent != "" {
		return errors.New("--host-agent is for lbb serve; lbb host is the host agent")
	}
	log := newLogger(cfg.LogLevel).With("part", "host")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveHost(ctx, cfg, *listen, *token, log)
}

func serveHost(ctx context.Context, cfg config.Config, listen, token string, log *slog.Logger) error {
	if err := prepareDataDir(cfg.DataDir, log); err != nil {
		return err
	}
	// One host agent at a time on a data directory; an lbb serve may share it (its store and
	// blobs).
	lockDir := filepath.Join(cfg.DataDir, "hostagent")
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDataDir(lockDir)
	if err != nil {
		return err
	}
	defer unlock()

	h, cleanup, err := newHostAgent(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := remote.NewHTTPServer(remote.NewServer(h, token, log), log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving the host agent", "addr", ln.Addr().String(), "runtime", cfg.Runtime, "data_dir", cfg.DataDir)
	fmt.Fprintf(os.Stderr, "lbb: host agent on http://%s (runtime %s)\n", ln.Addr(), cfg.Runtime)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The control plane ends its runs before it goes; calls still open here (events,
	// followers) get the grace, then end.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	log.Info("stopped")
	return nil
}

// dialHostAgent reaches the host agent of --host-agent and answers what it offers: lbb serve
// then runs every sandbox there.
func dialHostAgent(ctx context.Context, cfg config.Config) (*remote.Client, hostagent.Info, error) {
	c, err := remote.NewClient(cfg.HostAgent, cfg.HostAgentToken)
	if err != nil {
		return nil, hostagent.Info{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		c.Close()
		return nil, info, fmt.Errorf("host agent %s: %w", cfg.HostAgent, err)
	}
	return c, info, nil
}

// newHostAgent opens this machine's drivers, warm pool and image as lbb serve does and makes
// its host agent; cleanup closes them.
//
// TODO(merge): the hostagent branch provides the local host agent (hostagent.Local, opened
// in serve.go); until it is merged this stub only says so.
func newHostAgent(ctx context.Context, cfg config.Config, log *slog.Logger) (hostagent.Host, func(), error) {
	return nil, nil, errors.New("this lbb has no local host agent yet")
}
