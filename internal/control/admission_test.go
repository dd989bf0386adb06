package control

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TestAdmissionFair: a freed slot goes to graphs in turn, and to keys in turn within a
// graph, whatever order their runs came in; past the bound a run is refused.
func TestAdmissionFair(t *testing.T) {
	a := newAdmission(1, 6)
	first, err := a.enter("big", "k1")
	if err != nil || !first.Granted() {
		t.Fatalf("the first run does not hold the free slot: %v", err)
	}
	type entry struct{ graph, key, name string }
	var tickets []*ticket
	names := map[*ticket]string{}
	// big's burst came first, from two keys; small's single run last.
	for _, e := range []entry{{"big", "k1", "b1"}, {"big", "k1", "b2"}, {"big", "k1", "b3"}, {"big", "k2", "c1"}, {"small", "k3", "s1"}, {"big", "k2", "c2"}} {
		tk, err := a.enter(e.graph, e.key)
		if err != nil || tk.Granted() {
			t.Fatalf("%s: %v, granted %v; want it queued", e.name, err, tk != nil && tk.Granted())
		}
		tickets = append(tickets, tk)
		names[tk] = e.name
	}
	if _, err := a.enter("small", "k3"); errdefs.CodeOf(err) != errdefs.CodeTooManyRuns {
		t.Fatalf("past the bound: %v, want too_many_runs", err)
	}
	if busy, queued := a.depth(); busy != 1 || queued != 6 {
		t.Fatalf("depth %d busy %d queued", busy, queued)
	}
	// A run whose call went away leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tickets[1].wait(ctx); err == nil {
		t.Fatal("a cancelled wait answered nil")
	}
	var order []string
	held := first
	for range 5 {
		held.release()
		held = nil
		for _, tk := range tickets {
			if tk.Granted() && tk.held {
				if held != nil {
					t.Fatal("two runs hold the one slot")
				}
				held = tk
			}
		}
		if held == nil {
			t.Fatalf("no run got the freed slot after %v", order)
		}
		order = append(order, names[held])
	}
	held.release()
	want := []string{"b1", "s1", "c1", "b3", "c2"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if busy, queued := a.depth(); busy != 0 || queued != 0 {
		t.Fatalf("after all: %d busy %d queued", busy, queued)
	}
	// Released twice, nothing changes.
	held.release()
	if busy, _ := a.depth(); busy != 0 {
		t.Fatalf("a second release freed a slot: busy %d", busy)
	}
	tk, _ := a.enter("x", "y")
	select {
	case <-tk.granted:
	case <-time.After(time.Second):
		t.Fatal("a run on an idle host waits")
	}
}

// TestAdmissionFleet: a fleet's run slots are its up hosts' (four per CPU each, bounded by
// memory at the default limit), not the control plane's machine's, and follow its hosts.
func TestAdmissionFleet(t *testing.T) {
	host := func(state string, cpus int, mib int64) fleet.HostState {
		return fleet.HostState{State: state, Info: hostagent.Info{Capacity: hostagent.Capacity{CPUs: cpus, MemoryMiB: mib}}}
	}
	hosts := []fleet.HostState{host(store.HostUp, 2, 64<<10), host(store.HostUp, 4, 64<<10), host(store.HostLost, 8, 64<<10)}
	if got := fleetRunSlots(hosts, 512); got != 8+16 {
		t.Fatalf("slots of hosts of 2 and 4 CPUs up and one lost: %d, want 24", got)
	}
	if got := fleetRunSlots([]fleet.HostState{host(store.HostUp, 8, 2048)}, 512); got != 4 {
		t.Fatalf("slots of a host whose memory holds 4 sandboxes: %d, want 4", got)
	}
	a := newAdmission(1, 10)
	a.capacity = func() int { return fleetRunSlots(hosts, 512) }
	for i := range 24 {
		if tk, err := a.enter("g", "k"); err != nil || !tk.Granted() {
			t.Fatalf("run %d of 24 not granted at once: %v", i, err)
		}
	}
	if tk, err := a.enter("g", "k"); err != nil || tk.Granted() {
		t.Fatalf("the 25th run: %v, granted %v; want it queued", err, tk != nil && tk.Granted())
	}
	hosts = nil // every host lost: still one at a time, which fails to place
	if a.limit() != 1 {
		t.Fatalf("no host up: limit %d, want 1", a.limit())
	}

	// A host comes up while runs wait and none enters or ends: follow grants them.
	var up atomic.Pointer[[]fleet.HostState]
	up.Store(&hosts)
	b := newAdmission(1, 10)
	b.capacity = func() int { return fleetRunSlots(*up.Load(), 512) }
	first, _ := b.enter("g", "k")
	waiting, _ := b.enter("g", "k")
	if !first.Granted() || waiting.Granted() {
		t.Fatalf("no host up: first granted %v, second %v; want only the first", first.Granted(), waiting.Granted())
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go b.follow(ctx, 10*time.Millisecond)
	up.Store(&[]fleet.HostState{host(store.HostUp, 2, 64<<10)})
	wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer wcancel()
	if err := waiting.wait(wctx); err != nil {
		t.Fatalf("a run waiting when a host came up: %v, want it granted", err)
	}
}
