//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The memory guard. A sandbox's memory cgroup holds the Sentry and the gofer, and the
// Sentry's memory file holds every process's pages. When the cgroup is full the kernel's OOM
// killer would pick a host process of the cgroup, the Sentry above all: the whole sandbox,
// agent included, would die for one greedy process. So the guard turns the OOM killer off
// for the cgroup (cgroup v1 memory.oom_control) and listens for its OOM events: tasks that
// fault then wait, and the guard kills processes inside through runsc, as the kernel kills
// a process in a container. A killed process frees its memory only once it runs again, and
// it is waiting on the full cgroup: the guard lifts the limit by a little (oomHeadroom) until
// the memory is back, then lowers it again. Victims are chosen without knowing their size
// (runsc does not tell it): the busiest process first, the youngest among equals; after a few
// rounds that do not help, every process but the agent. When even that does not free enough
// (the memory is in tmpfs), the guard gives up and lets the kernel kill the Sentry.
//
// On cgroup v2 there is no oom_kill_disable: the guard is off, and an OOM kills the sandbox.

// oomHeadroom is what the limit is lifted by while a killed process frees its memory.
const oomHeadroom = 8 << 20

// oomRounds is how many times the guard kills before it gives up.
const oomRounds = 6

type memGuard struct {
	kills    atomic.Uint64
	efd      *os.File
	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
}

// killed counts the processes the guard killed.
func (g *memGuard) killed() uint64 {
	if g == nil {
		return 0
	}
	return g.kills.Load()
}

// stop ends the guard and waits for it; nil is a guard that never ran.
func (g *memGuard) stop() {
	if g == nil {
		return
	}
	g.stopOnce.Do(func() {
		close(g.stopped)
		g.efd.Close()
	})
	<-g.done
}

// guardMemory starts the guard of sandbox id, whose limit is limit bytes.
func (d *Driver) guardMemory(id string, limit int64) (*memGuard, error) {
	dir, v1, err := memoryDir(d.cfg.CgroupParent, id)
	if err != nil {
		return nil, err
	}
	if !v1 {
		d.cfg.Logger.Debug("cgroup v2: no memory guard; an OOM kills the sandbox", "sandbox", id)
		return nil, nil
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("memory.oom_control: %w", err)
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	efd := os.NewFile(uintptr(fd), "oom-eventfd")
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		efd.Close()
		return nil, err
	}
	err = os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(fmt.Sprintf("%d %d", fd, ctl.Fd())), 0)
	ctl.Close()
	if err != nil {
		efd.Close()
		return nil, fmt.Errorf("cgroup.event_control: %w", err)
	}
	g := &memGuard{efd: efd, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		buf := make([]byte, 8)
		for {
			// An event comes for an OOM, and when the cgroup is removed.
			if _, err := efd.Read(buf); err != nil {
				return
			}
			select {
			case <-g.stopped:
				return
			default:
			}
			if _, err := os.Stat(dir); err != nil {
				return
			}
			d.handleOOM(g, id, dir, limit)
		}
	}()
	return g, nil
}

// handleOOM kills processes of sandbox id until its cgroup is out of OOM.
func (d *Driver) handleOOM(g *memGuard, id, dir string, limit int64) {
	log := d.cfg.Logger.With("sandbox", id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tried := map[int]bool{}
	stopped := func() bool {
		select {
		case <-g.stopped:
			return true
		default:
			return false
		}
	}
	for round := 0; round < oomRounds; round++ {
		if stopped() || !underOOM(dir) {
			return
		}
		ps, err := d.ps(ctx, id)
		if err != nil {
			log.Warn("memory guard: cannot list processes", "err", err)
			break
		}
		victims := pickVictims(ps, tried, round >= oomRounds/2)
		if len(victims) == 0 {
			break
		}
		for _, pid := range victims {
			tried[pid] = true
			if out, err := d.runsc(ctx, id, "kill", "--pid", strconv.Itoa(pid), id, "KILL"); err != nil {
				log.Warn("memory guard: kill", "pid", pid, "err", err, "out", string(out))
				continue
			}
			g.kills.Add(1)
		}
		log.Info("memory limit reached: killed processes", "pids", victims)
		// The victims wait on the full cgroup like everyone: let them run to their end.
		if err := setLimit(dir, limit+oomHeadroom); err != nil {
			log.Warn("memory guard: lift limit", "err", err)
		}
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) && !stopped() && (underOOM(dir) || usage(dir) >= uint64(limit)) {
			time.Sleep(pollInterval)
		}
		if err := lowerLimit(ctx, dir, limit); err != nil {
			log.Warn("memory guard: restore limit", "err", err)
		}
	}
	if !stopped() && underOOM(dir) {
		log.Warn("memory guard: killing did not free enough memory; the kernel's OOM killer ends the sandbox")
		_ = os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("0"), 0)
	}
}

// pickVictims chooses whom to kill: every process but the agent (PID 1) when all is true,
// else the busiest one not tried yet, the youngest among equals.
func pickVictims(ps []runscProcess, tried map[int]bool, all bool) []int {
	var cands []runscProcess
	for _, p := range ps {
		if p.PID != 1 && !tried[p.PID] {
			cands = append(cands, p)
		}
	}
	if all {
		var pids []int
		for _, p := range ps {
			if p.PID != 1 {
				pids = append(pids, p.PID)
			}
		}
		return pids
	}
	if len(cands) == 0 {
		return nil
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].C != cands[j].C {
			return cands[i].C > cands[j].C
		}
		return cands[i].PID > cands[j].PID
	})
	return []int{cands[0].PID}
}

func underOOM(dir string) bool {
	v, err := readKey(filepath.Join(dir, "memory.oom_control"), "under_oom")
	return err == nil && v == 1
}

func usage(dir string) uint64 {
	v, _ := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
	return v
}

func setLimit(dir string, limit int64) error {
	return os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
}

// lowerLimit sets the limit back; the kernel refuses (EBUSY) while usage is above it.
func lowerLimit(ctx context.Context, dir string, limit int64) error {
	for {
		err := setLimit(dir, limit)
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
