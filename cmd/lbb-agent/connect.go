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
// Under gVisor the agent also loads the seccomp filter its host put at --seccomp /
// LBB_AGENT_SECCOMP (a raw BPF program, struct sock_filter[]) on all its threads, which every
// process it starts inherits (runsc's own OCI seccomp answers EPERM only).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent/guest"
)

// connectGiveUp: with no host accepting for this long, the agent ends (and the sandbox with
// it): nobody will come back.
const connectGiveUp = 10 * time.Minute

// serveConnect serves one connection to the host's socket after another.
func serveConnect(srv *guest.Server, path, token string, log *slog.Logger) error {
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
