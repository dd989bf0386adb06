// Package agenttest is what tests that drive a guest agent through agent.Client share:
// running a command or a run to its end and reading what it wrote.
package agenttest

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Wait waits for p to end and answers its stdout, stderr and Exit; a broken stream fails t.
func Wait(t testing.TB, p *agent.Process) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	ex, err := p.Wait(&out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), ex
}

// Exec runs req to its end (stdin nil means none); a request the agent refuses fails t.
func Exec(ctx context.Context, t testing.TB, c *agent.Client, req agent.ExecRequest, stdin io.Reader) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	p, err := c.Exec(ctx, req, stdin)
	if err != nil {
		t.Fatal(err)
	}
	return Wait(t, p)
}

// Run calls req to its end; a request the agent refuses fails t.
func Run(ctx context.Context, t testing.TB, c *agent.Client, req agent.RunRequest) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	p, err := c.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return Wait(t, p)
}

// Process is a guest agent run as a plain process (no sandbox) on one end of a socketpair,
// with a client on the other.
type Process struct {
	C   *agent.Client
	Cmd *exec.Cmd
	// Exited is closed once the agent has exited and been waited for.
	Exited chan struct{}
}

// StartProcess runs the agent binary bin with args on a fresh socketpair (its fd 3) and
// answers once it said hello. The caller closes C (the agent exits then).
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, guestEnd := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	p := &Process{Cmd: exec.Command(bin, args...), Exited: make(chan struct{})}
	p.Cmd.ExtraFiles = []*os.File{guestEnd}
	p.Cmd.Stderr = os.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Cmd.Wait(); close(p.Exited) }()
	guestEnd.Close()
	conn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := agent.WaitReady(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if p.C, err = agent.NewClient(conn); err != nil {
		t.Fatal(err)
	}
	return p
}
