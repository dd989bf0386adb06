package control

import (
	"context"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Admission decides when a one-call run executes. The host runs at most Slots of them at
// once (its capacity, in CPU and memory); a run that finds them taken waits in a bounded
// queue instead of being refused, and is served fairly: a freed slot goes to the next graph
// in turn, and within a graph to the next key in turn, so that one graph's burst cannot
// starve another's single run. A run is refused (429 too_many_runs, Retry-After) only when
// the queue holds Queue runs already.
//
// The queue lives in this process: a run waits in it after its reservation is durable, so
// that a call's wait_ms, its 202 and its replays are those of any run, and a restart marks a
// queued run lost like a running one.
type admission struct {
	mu    sync.Mutex
	slots int // the most that run at once
	// capacity, when set, answers the most that run at once now instead of slots: a fleet's,
	// from its hosts that are up (fleetRunSlots).
	capacity func() int
	bound    int // the most that wait
	busy     int
	queued   int
	// graphs are the graphs with runs waiting, served in turn from next.
	graphs []*graphQueue
	next   int
}

// graphQueue is one graph's waiting runs, by key, served in turn.
type graphQueue struct {
	graph string
	keys  []*keyQueue
	next  int
}

type keyQueue struct {
	key     string
	tickets []*ticket
}

// ticket is one run's place: granted once it holds a slot.
type ticket struct {
	a       *admission
	granted chan struct{}
	// held says the ticket holds a slot (granted and not released); queued that it waits.
	held, queued bool
	since        time.Time
}

// defaultRunSlots is how many one-call runs a host runs at once when not told: four per CPU
// (a run spends most of its time waiting: on its sandbox's mounts and start, its records'
// commits, the agent; with two per CPU, 8 sustained clients on 2 cores ran 4.4 runs/s, with
// four 12.5, at the same CPU per run), and no more than the host's memory holds at the
// default memory limit.
func defaultRunSlots(memoryMiB int64) int {
	return runSlotsFor(goruntime.NumCPU(), hostMemoryMiB(), memoryMiB)
}

// runSlotsFor is defaultRunSlots for a machine of cpus and totalMiB of memory (0: unknown).
func runSlotsFor(cpus int, totalMiB, memoryMiB int64) int {
	n := 4 * cpus
	if totalMiB > 0 && memoryMiB > 0 {
		n = min(n, int(totalMiB/memoryMiB))
	}
	return max(n, 1)
}

// hostFleet is a Host of several machines (internal/fleet).
type hostFleet interface{ Hosts() []fleet.HostState }

// fleetRunSlots is the default run slots of a fleet: those of each host that is up, by its
// CPUs and memory, summed (the hosts run the sandboxes, not the control plane's machine).
func fleetRunSlots(hosts []fleet.HostState, memoryMiB int64) int {
	n := 0
	for _, h := range hosts {
		if h.State == store.HostUp {
			n += runSlotsFor(h.Info.Capacity.CPUs, h.Info.Capacity.MemoryMiB, memoryMiB)
		}
	}
	return n
}

func newAdmission(slots, bound int) *admission {
	return &admission{slots: max(slots, 1), bound: max(bound, 0)}
}

// limit is the most runs that may run at once now.
func (a *admission) limit() int {
	if a.capacity != nil {
		return max(a.capacity(), 1)
	}
	return a.slots
}

// enter takes a slot at once when one is free and no run waits for one, or a place in the
// queue; past the queue's bound it refuses the run.
func (a *admission) enter(graph, key string) (*ticket, error) {
	t := &ticket{a: a, granted: make(chan struct{}), since: time.Now()}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy < a.limit() && a.queued == 0 {
		a.busy++
		t.held = true
		close(t.granted)
		return t, nil
	}
	if a.queued >= a.bound {
		return nil, errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeTooManyRuns,
			"the host runs %d one-call runs and %d more wait, the most that may (--run-slots, --run-queue); retry later with the same Idempotency-Key", a.busy, a.queued)
	}
	a.push(graph, key, t)
	return t, nil
}

func (a *admission) push(graph, key string, t *ticket) {
	gi := slices.IndexFunc(a.graphs, func(g *graphQueue) bool { return g.graph == graph })
	if gi < 0 {
		gi = len(a.graphs)
		a.graphs = append(a.graphs, &graphQueue{graph: graph})
	}
	g := a.graphs[gi]
	ki := slices.IndexFunc(g.keys, func(k *keyQueue) bool { return k.key == key })
	if ki < 0 {
		ki = len(g.keys)
		g.keys = append(g.keys, &keyQueue{key: key})
	}
	g.keys[ki].tickets = append(g.keys[ki].tickets, t)
	t.queued = true
	a.queued++
}

// Granted says the ticket holds a slot.
func (t *ticket) Granted() bool {
	select {
	case <-t.granted:
		return true
	default:
		return false
	}
}

// wait waits for the ticket's slot; when ctx ends first the ticket leaves the queue.
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.granted:
		return nil
	case <-ctx.Done():
		t.release()
		return ctx.Err()
	}
}

// release gives back the ticket's slot, to the next run in turn, or its place in the queue.
// It may be called more than once.
func (t *ticket) release() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case t.queued:
		a.remove(t)
	case t.held:
		t.held = false
		a.busy--
		a.grant()
	}
}

// grant gives free slots to waiting runs: graphs in turn, and keys in turn within each.
func (a *admission) grant() {
	for limit := a.limit(); a.busy < limit && len(a.graphs) > 0; {
		gi := a.next % len(a.graphs)
		g := a.graphs[gi]
		ki := g.next % len(g.keys)
		k := g.keys[ki]
		// The turn moves past this graph and key; remove moves it back when they empty.
		a.next, g.next = gi+1, ki+1
		t := k.tickets[0]
		a.remove(t)
		a.busy++
		t.held = true
		close(t.granted)
	}
}

// remove takes a waiting ticket out of the queue.
func (a *admission) remove(t *ticket) {
	t.queued = false
	a.queued--
	for gi, g := range a.graphs {
		for ki, k := range g.keys {
			for ti, x := range k.tickets {
				if x != t {
					continue
				}
				k.tickets = append(k.tickets[:ti], k.tickets[ti+1:]...)
				if len(k.tickets) == 0 {
					g.keys = append(g.keys[:ki], g.keys[ki+1:]...)
					if ki < g.next {
						g.next--
					}
				}
				if len(g.keys) == 0 {
					a.graphs = append(a.graphs[:gi], a.graphs[gi+1:]...)
					if gi < a.next {
						a.next--
					}
				}
				return
			}
		}
	}
}

// regrant gives slots to waiting runs when the capacity grew (a fleet's host came up):
// nothing else grants them but a run that enters or ends.
func (a *admission) regrant() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.grant()
}

// follow regrants every interval until ctx ends: a capacity that changes by itself (a
// fleet's) is looked at again, so that waiting runs start once hosts come up.
func (a *admission) follow(ctx context.Context, interval time.Duration) {
	if a.capacity == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.regrant()
		}
	}
}

// depth answers how many runs hold a slot and how many wait.
func (a *admission) depth() (busy, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.busy, a.queued
}

// hostMemoryMiB is the host's memory (MemTotal), or 0 when unknown.
func hostMemoryMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			return kib >> 10
		}
	}
	return 0
}
