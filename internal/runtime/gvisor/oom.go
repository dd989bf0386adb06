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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"golang.org/x/sys/unix"
)

// The memory guard. A sandbox's memory cgroup holds the Sentry and the gofer, and the
// Sentry's memory file holds every process's pages. When the cgroup is full the kernel's OOM
// killer would pick a host process of the cgroup, the Sentry above all: the whole sandbox,
// agent included, would die for one greedy process. So the guard turns the OOM killer off
// for the cgroup (cgroup v1 memory.oom_control) and listens for its OOM events: tasks that
// fault then wait, and the guard kills processes inside through runsc, as the kernel kills
// a process in a container.
//
// Killing inside takes the Sentry's help (runsc ps, runsc kill), and on a full cgroup the
// Sentry cannot be relied on: any of its threads that touches a new page waits like the
// application's do (its Go heap and stacks, the pages it commits for the application, the
// buffers of its control server), and the control server then never answers. So the guard
// first parks the application: the host processes that run the sandbox's code (systrap's
// stubs, everything in the cgroup but the Sentry and the gofer) go into a frozen freezer
// cgroup of their own. Only then does it lift the limit by a little (oomHeadroom): the
// waiting tasks wake, the stubs stop in the freezer before they touch another page, and the
// headroom is the Sentry's to answer with. (Only the stubs that wait on the cgroup are
// parked: systrap makes and recycles stubs through the others, and with every stub parked a
// process started right after a bomb sometimes died with "systrap corrupted memory:
// subprocess died", its stub SIGKILLed.) A killed process frees its memory only once its stub runs
// again: the guard thaws the application and lowers the limit again as soon as the memory
// is back. When other processes took it first, the next round kills again, the limit lifted
// by a little more each time. Victims are chosen without knowing their size (runsc does not
// tell it): the busiest process first, the youngest among equals; after a few rounds that
// do not help, every process but the agent.
//
// The guard gives up, and lets the kernel kill the Sentry (the whole sandbox ends), when
// killing does not free enough (the memory is in tmpfs), or when the Sentry does not answer
// in 10 s. That happens when the Sentry itself fills the memory on a process's behalf (a
// read(2) into a huge buffer: the waiting thread is the Sentry's, it cannot be parked, and
// the read does not end until it is done), and now and then in a later round of several
// greedy processes at once (TestMemoryBombs, TestMemoryBombInSentry).
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
	efd, err := cgroup.WatchOOM(dir)
	if err != nil {
		return nil, err
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
	lifted := false // the limit is above limit: a round's victims have not freed enough yet
	for round := 0; round < oomRounds; round++ {
		if stopped() || (!lifted && !cgroup.UnderOOM(dir)) {
			return
		}
		// Park the application, then give the Sentry room to answer. When the victims of
		// the round before did not free enough (others took what they freed), the limit is
		// still lifted and full: each such round lifts it by another half headroom.
		app, err := d.freezeApp(id)
		if err != nil {
			log.Warn("memory guard: freeze the application", "err", err)
		}
		lift := limit + oomHeadroom + int64(round)*oomHeadroom/2
		if !lifted {
			lift = limit + oomHeadroom
		}
		if err := cgroup.SetMemoryLimit(dir, lift); err != nil {
			log.Warn("memory guard: lift limit", "err", err)
		}
		if err := app.waitFrozen(ctx); err != nil {
			log.Warn("memory guard: freeze the application", "err", err)
		}
		victims, err := d.killVictims(ctx, g, id, tried, round >= oomRounds/2)
		// The victims' stubs must run to take their SIGKILL and free their memory.
		if terr := app.thaw(ctx); terr != nil {
			log.Warn("memory guard: thaw the application", "err", terr)
		}
		if err != nil || len(victims) == 0 {
			if err != nil {
				log.Warn("memory guard: cannot kill", "err", err)
			}
			break
		}
		log.Info("memory limit reached: killed processes", "pids", victims)
		// The kernel takes the limit back only once the usage is below it: try until the
		// victims' memory is back, or others have taken it (then the next round kills again).
		lifted = !retryLimit(dir, limit, time.Second, stopped)
		if !lifted && !cgroup.UnderOOM(dir) {
			return
		}
	}
	if !stopped() && (lifted || cgroup.UnderOOM(dir)) {
		log.Warn("memory guard: killing did not free enough memory; the kernel's OOM killer ends the sandbox")
		_ = cgroup.GiveUpOOM(dir)
		// Lowering the limit fails while the usage is above it: it is the kernel's job now.
		_ = cgroup.SetMemoryLimit(dir, limit)
	}
}

// killVictims lists the processes of sandbox id, picks victims and kills them.
func (d *Driver) killVictims(ctx context.Context, g *memGuard, id string, tried map[int]bool, all bool) ([]int, error) {
	// With the application parked and headroom given, the Sentry answers in milliseconds;
	// a Sentry that does not answer in seconds will not.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ps, err := d.ps(ctx, id)
	if err != nil {
		return nil, err
	}
	var killed []int
	var errs []error
	for _, pid := range pickVictims(ps, tried, all) {
		tried[pid] = true
		if out, err := d.runsc(ctx, id, "kill", "--pid", strconv.Itoa(pid), id, "KILL"); err != nil {
			errs = append(errs, fmt.Errorf("kill %d: %w: %s", pid, err, out))
			continue
		}
		g.kills.Add(1)
		killed = append(killed, pid)
	}
	if len(killed) == 0 {
		return nil, errors.Join(errs...)
	}
	return killed, nil
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

// retryLimit sets the limit to limit, trying again for d while the kernel refuses (EBUSY:
// the usage is above it); it reports whether the limit is set.
func retryLimit(dir string, limit int64, d time.Duration, stopped func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		err := cgroup.SetMemoryLimit(dir, limit)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) || stopped() {
			return false
		}
		if cgroup.MemoryUsage(dir) >= uint64(limit) {
			// Asking while the usage is above makes the kernel reclaim in vain first.
			time.Sleep(pollInterval)
		}
	}
}

// appFreezer is the application of a sandbox parked in a freezer cgroup of its own: its
// host processes but the Sentry and the gofer. nil when the host has no freezer.
type appFreezer struct {
	parent, dir string // the sandbox's freezer cgroup, and the child the application is in
}

// appCgroup is the name of the freezer child cgroup the guard parks the application in.
const appCgroup = "lbb-oom"

// freezeApp moves the host processes of sandbox id that run its code into a child freezer
// cgroup and freezes it. The Sentry, the gofer and runsc stay where they are.
func (d *Driver) freezeApp(id string) (*appFreezer, error) {
	m, err := cgroup.Mounts()
	if err != nil {
		return nil, err
	}
	fz, ok := m["freezer"]
	mem, okm := m["memory"]
	if !ok || !okm {
		return nil, errors.New("no cgroup v1 freezer")
	}
	a := &appFreezer{parent: filepath.Join(fz, d.cfg.CgroupParent, id)}
	a.dir = filepath.Join(a.parent, appCgroup)
	if err := os.Mkdir(a.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	own := map[int]bool{}
	for _, p := range d.processes(id) {
		own[p.pid] = true
	}
	pids, err := cgroup.ReadProcs(filepath.Join(mem, d.cfg.CgroupParent, id))
	if err != nil {
		return a, err
	}
	// Only the stubs that wait on the full cgroup: the others may be busy with the Sentry
	// (systrap makes and recycles stubs through them, and kills one that does not answer in
	// time). When the kernel does not tell where tasks wait, every stub.
	var stubs, waiting []int
	for _, pid := range pids {
		if own[pid] {
			continue
		}
		stubs = append(stubs, pid)
		if waitsOnOOM(pid) {
			waiting = append(waiting, pid)
		}
	}
	if len(waiting) > 0 || !wchanKnown(stubs) {
		stubs = waiting
	}
	var errs []error
	for _, pid := range stubs {
		if err := cgroup.MovePID(a.dir, pid); err != nil {
			errs = append(errs, fmt.Errorf("move %d: %w", pid, err))
		}
	}
	if err := writeFile(filepath.Join(a.dir, "freezer.state"), "FROZEN"); err != nil {
		errs = append(errs, err)
	}
	return a, errors.Join(errs...)
}

// thawLeftApp thaws and removes a freezer child cgroup the guard left behind (it was stopped
// while the application was parked): frozen processes cannot even die.
func (d *Driver) thawLeftApp(ctx context.Context, id string) error {
	m, err := cgroup.Mounts()
	if err != nil {
		return err
	}
	fz, ok := m["freezer"]
	if !ok {
		return nil
	}
	a := &appFreezer{parent: filepath.Join(fz, d.cfg.CgroupParent, id)}
	a.dir = filepath.Join(a.parent, appCgroup)
	if _, err := os.Stat(a.dir); err != nil {
		return nil
	}
	return a.thaw(ctx)
}

// waitFrozen waits (a while) until the application is frozen. Tasks waiting on the full
// cgroup freeze only once the limit is lifted.
func (a *appFreezer) waitFrozen(ctx context.Context) error {
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(filepath.Join(a.dir, "freezer.state"))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("freezer state %s: %w", strings.TrimSpace(string(b)), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// thaw wakes the application, moves its processes back and removes the child cgroup.
func (a *appFreezer) thaw(ctx context.Context) error {
	if a == nil {
		return nil
	}
	var errs []error
	if err := writeFile(filepath.Join(a.dir, "freezer.state"), "THAWED"); err != nil {
		errs = append(errs, err)
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		pids, err := cgroup.ReadProcs(a.dir)
		if err != nil {
			errs = append(errs, err)
			break
		}
		for _, pid := range pids {
			if err := cgroup.MovePID(a.parent, pid); err != nil {
				errs = append(errs, fmt.Errorf("move %d back: %w", pid, err))
			}
		}
		err = unix.Rmdir(a.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			break
		}
		if !errors.Is(err, unix.EBUSY) {
			errs = append(errs, err)
			break
		}
		select {
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("remove %s: %w", a.dir, err))
			return errors.Join(errs...)
		case <-time.After(delay):
		}
	}
	return errors.Join(errs...)
}

// waitsOnOOM reports whether a thread of process pid waits on its memory cgroup's OOM.
func waitsOnOOM(pid int) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, t.Name()))
		if err == nil && strings.HasPrefix(string(b), "mem_cgroup_oom") {
			return true
		}
	}
	return false
}

// wchanKnown reports whether the kernel names where the threads of pids sleep (it answers
// "0" when it hides it).
func wchanKnown(pids []int) bool {
	for _, pid := range pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, t.Name()))
			if err == nil && len(b) > 0 && string(b) != "0" {
				return true
			}
		}
	}
	return false
}

// writeFile writes s to a cgroup file in one write.
func writeFile(path, s string) error {
	return os.WriteFile(path, []byte(s), 0)
}
