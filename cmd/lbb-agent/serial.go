package main

// Serial mode, for the microvm driver: the channel (fd 3) is a virtio-serial port of the
// guest's kernel, not a socket. A port outlives its host's connection: when the host side
// closes (the driver detaches before it saves the machine, or the machine was restored under
// a new QEMU), reads end (EOF), and writes block until a host is there again. So the agent
// serves one session after another on it, each starting with its Hello, which the next host
// reads first:
//
//	lbb-agent --serial --fd 3
//	LBB_AGENT_SERIAL=1 LBB_CHANNEL_FD=3 lbb-agent
//
// Between two sessions the agent closes the port and opens it again: QEMU tells the driver
// (QMP VSERPORT_CHANGE), which then knows that the agent let the old session go and waits for
// a new host; a machine saved at that point resumes into a new session wherever it is
// restored. Commands still streaming when a session ends are killed, as on any channel's end
// (guest.Server.ServeConn).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent/guest"
)

type serialPort struct {
	f *os.File
	// path reopens the port: an O_PATH descriptor of its device, which the sandbox's /dev
	// does not have.
	path int
}

func openSerialPort(fd int) (*serialPort, error) {
	p, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("serial port fd %d: %w", fd, err)
	}
	// Non-blocking, so that the Go poller waits on it (and deadlines work).
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	unix.Close(fd)
	return &serialPort{f: os.NewFile(uintptr(nfd), "channel"), path: p}, nil
}

func (p *serialPort) serve(srv *guest.Server, log *slog.Logger) error {
	for {
		srv.ServeConn(context.Background(), &portConn{File: p.f})
		p.f.Close()
		log.Debug("channel session ended; waiting for the next host")
		f, err := p.reopen()
		if err != nil {
			srv.Forward(unix.SIGKILL)
			return fmt.Errorf("reopen the serial port: %w", err)
		}
		p.f = f
	}
}

// reopen opens the port again. A port has one opener at a time (EBUSY), and the old
// descriptor is released only once the session's last reader has returned: that may take a
// moment.
func (p *serialPort) reopen() (*os.File, error) {
	deadline := time.Now().Add(30 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", p.path), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), "channel"), nil
		}
		if err != unix.EBUSY || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(delay)
	}
}

// portConn is a serial port as a net.Conn.
type portConn struct{ *os.File }

func (portConn) LocalAddr() net.Addr  { return portAddr{} }
func (portConn) RemoteAddr() net.Addr { return portAddr{} }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return "channel" }
