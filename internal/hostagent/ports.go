package hostagent

import (
	"context"
	"net"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// DialPort connects to a port on a running sandbox's loopback through its channel (a
// preview's connection). The connection lasts until Close or the sandbox's end.
func (h *Local) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.InvalidArgument("port must be from 1 to 65535")
	}
	_, l, sctx, err := h.running(sandboxID)
	if err != nil {
		return nil, err
	}
	// The stream outlives the call that opened it (a pooled connection of the preview's
	// proxy): it is bound to the sandbox's life, and ended by Close.
	cctx, cancel := context.WithCancel(sctx)
	stop := context.AfterFunc(ctx, cancel)
	st, err := l.agent.DialPort(cctx, port)
	stop()
	if err != nil {
		cancel()
		if agent.IsCode(err, agent.CodePortRefused) {
			return nil, errdefs.Unavailable("%s", err.(*agent.Error).Message)
		}
		return nil, agentError(err)
	}
	return &portConn{Stream: st, cancel: cancel, port: port}, nil
}

// portConn is a stream to a port in a sandbox, as a net.Conn. Deadlines are not kept: its
// users (an HTTP proxy) end it with Close.
type portConn struct {
	*agent.Stream
	cancel context.CancelFunc
	port   int
}

func (c *portConn) Close() error {
	c.Stream.Close()
	c.cancel()
	return nil
}

func (c *portConn) LocalAddr() net.Addr              { return portAddr(0) }
func (c *portConn) RemoteAddr() net.Addr             { return portAddr(c.port) }
func (c *portConn) SetDeadline(time.Time) error      { return nil }
func (c *portConn) SetReadDeadline(time.Time) error  { return nil }
func (c *portConn) SetWriteDeadline(time.Time) error { return nil }

type portAddr int

func (portAddr) Network() string  { return "lbb" }
func (a portAddr) String() string { return "sandbox-port:" + itoa(int(a)) }

func itoa(n int) string { return (&net.TCPAddr{Port: n}).String()[1:] }
