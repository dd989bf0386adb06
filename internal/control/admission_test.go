package control

import (
	"context"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
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
