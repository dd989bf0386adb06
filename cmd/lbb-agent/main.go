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
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/agent/guest"
	"github.com/littlebigbrain/lbb/internal/agent/vmguest"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/nsinit"
	"github.com/littlebigbrain/lbb/internal/runtime/spawn"
)

func main() {
	// Started by the ns driver as its spawn helper (argv[1] spawn.HelperArg): start sandbox
	// inits in user namespaces of their own, for the driver. Never returns then.
	spawn.MaybeHelper()
	// Started by the ns driver as a sandbox's init (argv[1] nsinit.Arg): build the sandbox's
	// root, drop every privilege and exec this binary again as the agent. Never returns then.
	nsinit.MaybeInit()
	// Started by the ns driver as an image's zygote (argv[1] nsinit.ZygoteArg): exec python as it.
	nsinit.MaybeZygote(guest.PythonHarness())
	// In a microvm guest this process is its supervisor or the sandbox's init first.
	vmguest.Main()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lbb-agent:", err)
		os.Exit(1)
	}
}

// agentThreads is how many OS threads the agent makes at start and keeps idle. A fork bomb
// takes every pid of the sandbox's pids limit (threads count too): a Go runtime that then
// needs one more thread for a blocking system call dies ("newosproc"), and the sandbox's PID 1
// with it. Threads made now stay with the runtime, idle, for when they are needed.
const agentThreads = 8

// reserveThreads makes the runtime start n threads at once (each goroutine holds its own
// locked thread until all are running), then lets them go idle: an unlocked thread is kept.
func reserveThreads(n int) {
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	for range n {
		go func() {
			goruntime.LockOSThread()
			started.Done()
			release.Wait()
			goruntime.UnlockOSThread()
		}()
	}
	started.Wait()
	release.Done()
}

// ignoreSignals catches, and drops, the signals the agent does not use whose default would
// end it: as PID 1 it must outlive a process inside that signals it (the seccomp filter
// drops signals to pid 1, not those sent to its threads' ids). Caught rather than ignored:
// an ignored signal stays ignored in the processes the agent starts.
func ignoreSignals() {
	drop := make(chan os.Signal, 1)
	signal.Notify(drop, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM,
		syscall.SIGVTALRM, syscall.SIGPIPE, syscall.SIGTRAP, syscall.SIGABRT, syscall.SIGSYS, syscall.SIGILL,
		syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSTKFLT, syscall.SIGXCPU, syscall.SIGXFSZ,
		syscall.SIGIO, syscall.SIGPWR)
	go func() {
		for range drop {
		}
	}()
}

// options are the agent's flags, each also settable as LBB_AGENT_<NAME>.
type options struct {
	fd, uid                       int
	connect, seccomp, remove      string
	workspace, etcDir, path, home string
	verbose, serial               bool
}

func run() error {
	var o options
	fs := flag.NewFlagSet("lbb-agent", flag.ExitOnError)
	fs.IntVar(&o.fd, "fd", 3, "the channel's file descriptor")
	fs.StringVar(&o.connect, "connect", "", "instead of --fd: connect to this unix socket, again after each disconnection (also LBB_AGENT_CONNECT; see connect.go)")
	fs.StringVar(&o.seccomp, "seccomp", "", "load this raw BPF program as the seccomp filter of the agent and its processes")
	fs.IntVar(&o.uid, "uid", 0, "run as this real uid (effective uid 0, CAP_SETUID alone kept), so that the processes it starts (uid 0) cannot signal it; needs CAP_SETUID and CAP_SETPCAP (see uid.go)")
	fs.StringVar(&o.remove, "remove", "", "remove these files (comma-separated) at start: devices a sandbox must not have that its kernel (gVisor's) always makes")
	fs.StringVar(&o.workspace, "workspace", agent.Workspace, "the workspace directory")
	fs.StringVar(&o.etcDir, "etc-dir", "/etc", "where identity writes hostname and machine-id")
	fs.StringVar(&o.path, "path", guest.DefaultPath, "the default PATH of processes")
	fs.StringVar(&o.home, "home", "/root", "the HOME of processes")
	fs.BoolVar(&o.verbose, "verbose", false, "log debug messages to stderr")
	fs.BoolVar(&o.serial, "serial", false, "the channel fd is a virtio-serial port: serve one host after another on it (see serial.go)")
	if v, ok := os.LookupEnv("LBB_CHANNEL_FD"); ok {
		fs.Set("fd", v)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv("LBB_AGENT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))); ok {
			fs.Set(f.Name, v)
		}
	})
	fs.Parse(os.Args[1:])
	// Read (and drop) the connect token before anything can start a process.
	token := os.Getenv("LBB_AGENT_TOKEN")
	os.Unsetenv("LBB_AGENT_TOKEN")

	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// Non-dumpable: the processes the agent starts run as the same user, and must not reach
	// into it through /proc/1 (mem, environ, fd). (ns also makes the binary unreadable,
	// which does the same; under gVisor only this does.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	if o.uid != 0 {
		if err := ownUID(o.uid); err != nil {
			return err
		}
	}
	if o.seccomp != "" {
		if err := loadSeccomp(o.seccomp); err != nil {
			return err
		}
	}
	for _, p := range strings.Split(o.remove, ",") {
		if err := os.RemoveAll(p); p != "" && err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}

	// The fd channel becomes a net.Conn on a close-on-exec duplicate; then every inherited
	// descriptor above stderr is marked close-on-exec, so that no process the agent starts
	// inherits the channel or anything else the host left open.
	var conn net.Conn
	var port *serialPort
	if o.serial {
		p, err := openSerialPort(o.fd)
		if err != nil {
			return err
		}
		port = p
	} else if o.connect == "" {
		f := os.NewFile(uintptr(o.fd), "channel")
		c, err := net.FileConn(f)
		if err != nil {
			return fmt.Errorf("channel fd %d: %w", o.fd, err)
		}
		f.Close()
		conn = c
	}
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		log.Warn("close_range", "err", err)
	}

	reserveThreads(agentThreads)

	// On a serial port the sandbox is a machine that can end without warning (its QEMU
	// killed): what a command or a file call wrote is synced to the disk before it answers.
	srv, err := guest.New(guest.Options{Workspace: o.workspace, EtcDir: o.etcDir, Path: o.path, Home: o.home,
		RootProcesses: o.uid != 0, SyncWorkspace: o.serial, Reconnects: o.serial || o.connect != "", Logger: log})
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
	ignoreSignals()

	if o.connect != "" {
		return serveConnect(srv, o.connect, token, log)
	}
	if port != nil {
		return port.serve(srv, log)
	}
	// Serve until the host closes the channel; the sandbox ends with it.
	srv.ServeConn(context.Background(), conn)
	return nil
}
