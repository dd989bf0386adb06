package main

// Connect mode, for drivers whose sandboxes are checkpointed and restored (gvisor): instead of
// serving one inherited channel for its whole life, the agent connects to a unix socket its
// host listens on, and connects again whenever that connection ends. A restored sandbox (the
// same one, or a fork) thus gets a fresh session on a fresh connection, while its processes
// keep running; an inherited descriptor cannot be replaced that way.
//
//	lbb-agent --connect /.lbb/chan/agent.sock
//	LBB_AGENT_CONNECT=/.lbb/chan/agent.sock lbb-agent
//
// The socket's directory is reachable by the sandbox's processes too, so each connection
// starts with a secret only the agent knows, LBB_AGENT_TOKEN (from its environment, which
// its processes do not inherit), and a newline; then the protocol as on any channel (Hello,
// HTTP/2). Commands still streaming when a connection ends are killed, as on any channel's
// end (guest.Server.ServeConn); processes that left their group live on.
//
// Connect mode also hardens the agent itself, which under gVisor the kernel does not do:
// it makes itself non-dumpable, so that its processes, which run as the same user, cannot
// reach into it through /proc/1 (mem, environ, fd), and it loads the seccomp filter its
// host put at LBB_AGENT_SECCOMP (a raw BPF program, struct sock_filter[]) on all its threads,
// which every process it starts inherits.
//
// It is picked up here, before main parses its flags, so that main.go stays as it is when
// the mode is not asked for. TODO(agent owner): fold this into main.go as a regular flag.

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/agent/guest"
)

// connectGiveUp: with no host accepting for this long, the agent ends (and the sandbox with
// it): nobody will come back.
const connectGiveUp = 10 * time.Minute

func init() {
	path := connectPath(os.Args[1:])
	if path == "" {
		return
	}
	if err := runConnect(path); err != nil {
		fmt.Fprintln(os.Stderr, "lbb-agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// connectPath finds --connect in args, else $LBB_AGENT_CONNECT.
func connectPath(args []string) string {
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "connect" {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return os.Getenv("LBB_AGENT_CONNECT")
}

func runConnect(path string) error {
	// The same flags as main, and connect; each also as LBB_AGENT_<NAME>.
	fs := flag.NewFlagSet("lbb-agent", flag.ExitOnError)
	fs.String("connect", path, "connect to this unix socket, again after each disconnection")
	fs.Int("fd", 3, "ignored in connect mode")
	workspace := fs.String("workspace", agent.Workspace, "the workspace directory")
	etcDir := fs.String("etc-dir", "/etc", "where identity writes hostname and machine-id")
	pathEnv := fs.String("path", guest.DefaultPath, "the default PATH of processes")
	home := fs.String("home", "/root", "the HOME of processes")
	seccompPath := fs.String("seccomp", "", "load this raw BPF program as the seccomp filter of the agent and its processes")
	verbose := fs.Bool("verbose", false, "log debug messages to stderr")
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv("LBB_AGENT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))); ok {
			fs.Set(f.Name, v)
		}
	})
	fs.Parse(os.Args[1:])
	token := os.Getenv("LBB_AGENT_TOKEN")
	os.Unsetenv("LBB_AGENT_TOKEN")

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	if *seccompPath != "" {
		if err := loadSeccomp(*seccompPath); err != nil {
			return err
		}
	}
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		log.Warn("close_range", "err", err)
	}

	srv, err := guest.New(guest.Options{Workspace: *workspace, EtcDir: *etcDir, Path: *pathEnv, Home: *home, Logger: log})
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

	for {
		conn, err := dialHost(path, log)
		if err != nil {
			srv.Forward(syscall.SIGKILL)
			return err
		}
		if _, err := io.WriteString(conn, token+"\n"); err != nil {
			conn.Close()
			continue
		}
		srv.ServeConn(context.Background(), conn)
		log.Debug("channel closed; connecting again")
	}
}

// dialHost connects to the host's socket, retrying while it is not (yet) there.
func dialHost(path string, log *slog.Logger) (net.Conn, error) {
	deadline := time.Now().Add(connectGiveUp)
	delay := time.Millisecond
	for {
		conn, err := net.Dial("unix", path)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no host on %s for %v: %w", path, connectGiveUp, err)
		}
		if delay < time.Second {
			delay *= 2
		} else {
			log.Debug("waiting for the host", "err", err)
		}
		time.Sleep(min(delay, time.Second))
	}
}

// loadSeccomp installs the raw BPF program in path on every thread of the agent
// (SECCOMP_FILTER_FLAG_TSYNC); the processes it starts inherit it.
func loadSeccomp(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	if len(b) == 0 || len(b)%8 != 0 || len(b)/8 > 0xffff {
		return fmt.Errorf("seccomp filter %s: %d bytes is not a BPF program", path, len(b))
	}
	filter := make([]unix.SockFilter, len(b)/8)
	for i := range filter {
		in := b[i*8:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: load filter: %w", errno)
	}
	if r != 0 {
		return errors.New("seccomp: a thread of the agent could not take the filter")
	}
	return nil
}
