//go:build linux

package microvm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
)

// sandbox is a started machine.
type sandbox struct {
	d    *Driver
	id   string
	cmd  *exec.Cmd // the jail, then QEMU (it execs)
	done chan struct{}
	cg   cgroup.Manager

	monConn net.Conn // QMP
	mon     *qmp
	conn    net.Conn // the channel
	ctlConn net.Conn // the control port

	ctlMu  sync.Mutex
	ctlR   *bufio.Reader
	ctlBad error // set when a request broke off: the line stream is out of step

	frozen atomic.Bool
	// last is the guest's accounting as last read, for a frozen machine, which cannot answer.
	lastMu sync.Mutex
	last   agent.VMStats
}

func (s *sandbox) ID() string            { return s.id }
func (s *sandbox) Conn() net.Conn        { return s.conn }
func (s *sandbox) Done() <-chan struct{} { return s.done }

// InitPID is QEMU's host pid: the machine, with its kernel and every process inside.
func (s *sandbox) InitPID() int { return s.cmd.Process.Pid }

func (s *sandbox) closeConns() {
	for _, c := range []net.Conn{s.monConn, s.conn, s.ctlConn} {
		if c != nil {
			c.Close()
		}
	}
}

// Stats reads the CPU time of QEMU's cgroup on the host (what the sandbox costs, emulation
// included), and memory, OOM kills and processes from the sandbox's cgroup in the guest.
func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	host, err := s.cg.Stats(s.id)
	if err != nil {
		return runtime.Stats{}, err
	}
	st := runtime.Stats{CPUNanos: host.CPUNanos}
	var g agent.VMStats
	if s.frozen.Load() {
		s.lastMu.Lock()
		g = s.last
		s.lastMu.Unlock()
	} else {
		var resp agent.VMResponse
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.control(ctx, agent.VMRequest{Op: agent.VMOpStats}, &resp); err != nil {
			return st, err
		}
		if resp.Stats != nil {
			g = *resp.Stats
		}
		s.lastMu.Lock()
		s.last = g
		s.lastMu.Unlock()
	}
	st.MemoryBytes, st.MemoryMaxBytes, st.OOMKills, st.Pids = g.MemoryBytes, g.MemoryMaxBytes, g.OOMKills, g.Pids
	return st, nil
}

// control sends req to the guest's supervisor and reads its answer into resp (nil: none
// wanted, but an error answered is still an error).
func (s *sandbox) control(ctx context.Context, req agent.VMRequest, resp *agent.VMResponse) error {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if s.ctlBad != nil {
		return s.ctlBad
	}
	if s.ctlR == nil {
		s.ctlR = bufio.NewReaderSize(s.ctlConn, 64<<10)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Minute)
	}
	s.ctlConn.SetDeadline(dl)
	defer s.ctlConn.SetDeadline(time.Time{})
	line, err := func() ([]byte, error) {
		if _, err := s.ctlConn.Write(append(b, '\n')); err != nil {
			return nil, err
		}
		return s.ctlR.ReadBytes('\n')
	}()
	if err != nil {
		s.ctlBad = fmt.Errorf("the guest's control port: %w", err)
		return s.ctlBad
	}
	var r agent.VMResponse
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("the guest's control port said %q: %w", line, err)
	}
	if r.Error != "" {
		return fmt.Errorf("the guest's supervisor: %s: %s", req.Op, r.Error)
	}
	if resp != nil {
		*resp = r
	}
	return nil
}

// reseed gives a restored machine the host's time and fresh entropy, and a fork a machine
// id of its own.
func (s *sandbox) reseed(ctx context.Context, fork bool) error {
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	req := agent.VMRequest{Op: agent.VMOpReseed, Seed: seed, UnixNano: time.Now().UnixNano()}
	if fork {
		req.MachineID = randomHex(16)
	}
	return s.control(ctx, req, nil)
}
