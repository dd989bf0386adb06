// Command lbb-agent is the guest agent: PID 1 inside a sandbox, serving the agent protocol on
// the one channel its host gave it (fd 3). It imports nothing of the server.
//
// Outside a sandbox (tests, the local development driver) it runs as a plain process:
//
//	lbb-agent --fd 3 --workspace /tmp/ws --etc-dir /tmp/etc
//
// Each flag may also be given as LBB_AGENT_<NAME> (LBB_AGENT_FD, LBB_AGENT_WORKSPACE, …);
// LBB_CHANNEL_FD, which drivers set, is the same as LBB_AGENT_FD. Flags win.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/agent/guest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lbb-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("lbb-agent", flag.ExitOnError)
	fd := fs.Int("fd", 3, "the channel's file descriptor")
	workspace := fs.String("workspace", agent.Workspace, "the workspace directory")
	etcDir := fs.String("etc-dir", "/etc", "where identity writes hostname and machine-id")
	path := fs.String("path", guest.DefaultPath, "the default PATH of processes")
	home := fs.String("home", "/root", "the HOME of processes")
	verbose := fs.Bool("verbose", false, "log debug messages to stderr")
	if v, ok := os.LookupEnv("LBB_CHANNEL_FD"); ok {
		fs.Set("fd", v)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv("LBB_AGENT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))); ok {
			fs.Set(f.Name, v)
		}
	})
	fs.Parse(os.Args[1:])

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// The channel becomes a net.Conn on a close-on-exec duplicate; then every inherited
	// descriptor above stderr is marked close-on-exec, so that no process the agent starts
	// inherits the channel or anything else the host left open.
	f := os.NewFile(uintptr(*fd), "channel")
	conn, err := net.FileConn(f)
	if err != nil {
		return fmt.Errorf("channel fd %d: %w", *fd, err)
	}
	f.Close()
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		log.Warn("close_range", "err", err)
	}

	srv, err := guest.New(guest.Options{Workspace: *workspace, EtcDir: *etcDir, Path: *path, Home: *home, Logger: log})
	if err != nil {
		return err
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range sigs {
			srv.Forward(sig.(syscall.Signal))
		}
	}()

	// Serve until the host closes the channel; the sandbox ends with it.
	srv.ServeConn(context.Background(), conn)
	return nil
}
