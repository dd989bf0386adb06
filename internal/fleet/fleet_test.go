package fleet

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

// fakeHost is a machine in memory: the sandboxes it holds, and whether it answers. The
// methods a test does not use are the nil interface's (they panic).
type fakeHost struct {
	hostagent.Host
	name string

	mu   sync.Mutex
	down bool
	// cut, when not nil, makes every call wait for it to close, whatever its context: a
	// host cut off by the network.
	cut      chan struct{}
	boot     string
	held     map[string]bool
	commands map[string]string
	reaps    [][]string
}

func newFake(name string) *fakeHost {
	return &fakeHost{name: name, boot: "1", held: map[string]bool{}, commands: map[string]string{}}
}

func (h *fakeHost) unreachable() error {
	if h.down {
		return errdefs.New(errdefs.ClassUnavailable, hostagent.CodeUnreachable, "host agent %s: connection refused", h.name)
	}
	return nil
}

// wait blocks while the host is cut off.
func (h *fakeHost) wait() {
	h.mu.Lock()
	cut := h.cut
	h.mu.Unlock()
	if cut != nil {
		<-cut
	}
}

func (h *fakeHost) Info(context.Context) (hostagent.Info, error) {
	h.wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return hostagent.Info{Default: "ns", Offered: []string{"ns"}, Boot: h.boot, Capacity: hostagent.Capacity{CPUs: 2}}, h.unreachable()
}

func (h *fakeHost) Create(_ context.Context, req hostagent.CreateRequest) (hostagent.Sandbox, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.unreachable(); err != nil {
		return hostagent.Sandbox{}, err
	}
	h.held[req.ID] = true
	return hostagent.Sandbox{ID: req.ID, Runtime: "ns"}, nil
}

func (h *fakeHost) Destroy(_ context.Context, id string) (store.Usage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.unreachable(); err != nil {
		return store.Usage{}, err
	}
	delete(h.held, id)
	return store.Usage{}, nil
}

func (h *fakeHost) DeleteSnapshot(context.Context, string) error { return nil }

func (h *fakeHost) Exec(_ context.Context, req hostagent.ExecRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.unreachable(); err != nil {
		return err
	}
	if !h.held[req.SandboxID] {
		return errdefs.NotFound("sandbox %s is not on %s", req.SandboxID, h.name)
	}
	h.commands[req.CommandID] = req.SandboxID
	return nil
}

func (h *fakeHost) Wait(_ context.Context, id string) (hostagent.CommandEnd, error) {
	h.wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.unreachable(); err != nil {
		return hostagent.CommandEnd{}, err
	}
	if _, ok := h.commands[id]; !ok {
		return hostagent.CommandEnd{}, errdefs.NotFound("command %s is not on %s", id, h.name)
	}
	return hostagent.CommandEnd{Status: store.CommandSucceeded, OK: true, Error: h.name}, nil
}

func (h *fakeHost) Reap(_ context.Context, keep []string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.unreachable(); err != nil {
		return nil, err
	}
	h.reaps = append(h.reaps, slices.Clone(keep))
	var gone []string
	for id := range h.held {
		if !slices.Contains(keep, id) {
			delete(h.held, id)
			gone = append(gone, id)
		}
	}
	return gone, nil
}

func (h *fakeHost) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	ch := make(chan hostagent.Event)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (h *fakeHost) set(f func(h *fakeHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *fakeHost) holds(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[id]
}

// TestFleet places sandboxes on both hosts and routes their calls there; a host that stops
// answering is lost (its sandboxes reported host_lost, calls for them host_lost, new ones
// elsewhere); when it answers again after a restart it is reaped of what is no longer placed.
// The placements outlive the fleet in the store.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b := newFake("a"), newFake("b")
	f, err := New(ctx, Options{Members: []Member{{ID: "a", Host: a}, {ID: "b", Host: b}}, Store: st,
		Heartbeat: 20 * time.Millisecond, LostAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Reap(ctx, nil); err != nil { // as a control plane's Recover
		t.Fatal(err)
	}
	events, err := f.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}

	on := map[string][]string{}
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		if _, err := f.Create(ctx, hostagent.CreateRequest{ID: id, Runtime: "ns"}); err != nil {
			t.Fatal(err)
		}
		switch {
		case a.holds(id):
			on["a"] = append(on["a"], id)
		case b.holds(id):
			on["b"] = append(on["b"], id)
		}
	}
	if len(on["a"]) != 2 || len(on["b"]) != 2 {
		t.Fatalf("placed %v, want two on each host", on)
	}
	for h, ids := range on {
		for _, id := range ids {
			if err := f.Exec(ctx, hostagent.ExecRequest{SandboxID: id, CommandID: "c-" + id}); err != nil {
				t.Fatal(err)
			}
			if end, err := f.Wait(ctx, "c-"+id); err != nil || end.Error != h {
				t.Fatalf("wait for c-%s: %v %v, want an answer of %s", id, end, err, h)
			}
		}
	}
	ps, err := st.ListPlacements(ctx, "a")
	if err != nil || len(ps) != 2 {
		t.Fatalf("placements on a in the store: %v %v", ps, err)
	}

	// a stops answering: a call to it fails host_lost at once, and a is lost after
	// LostAfter, each of its sandboxes reported.
	a.set(func(h *fakeHost) { h.down = true })
	if err := f.Exec(ctx, hostagent.ExecRequest{SandboxID: on["a"][0], CommandID: "x"}); errdefs.CodeOf(err) != hostagent.CodeHostLost {
		t.Fatalf("exec on a dead host: %v, want host_lost", err)
	}
	var lost []string
	timeout := time.After(5 * time.Second)
	for len(lost) < 2 {
		select {
		case e := <-events:
			if e.Kind != hostagent.EventHostLost {
				t.Fatalf("event %+v", e)
			}
			lost = append(lost, e.Sandbox)
		case <-timeout:
			t.Fatalf("host-lost events: %v, want %v", lost, on["a"])
		}
	}
	slices.Sort(lost)
	if !slices.Equal(lost, on["a"]) {
		t.Fatalf("host-lost events for %v, want %v", lost, on["a"])
	}
	hs, err := st.ListHosts(ctx)
	if err != nil || len(hs) != 2 || hs[0].State != store.HostLost || hs[1].State != store.HostUp {
		t.Fatalf("hosts in the store: %+v %v", hs, err)
	}
	if _, err := f.Wait(ctx, "c-"+on["a"][1]); errdefs.CodeOf(err) != hostagent.CodeHostLost {
		t.Fatalf("wait on a lost host: %v", err)
	}
	for _, id := range []string{"s5", "s6"} {
		if _, err := f.Create(ctx, hostagent.CreateRequest{ID: id}); err != nil || !b.holds(id) {
			t.Fatalf("a new sandbox while a is lost: %v, on b: %v", err, b.holds(id))
		}
	}
	// The control plane ends the first of a's sandboxes, keeps the other (stopped: its disk).
	if _, err := f.Destroy(ctx, on["a"][0]); err != nil {
		t.Fatalf("destroying a sandbox of a lost host: %v", err)
	}

	// a comes back restarted: reaped of what is no longer placed there.
	a.set(func(h *fakeHost) { h.down, h.boot = false, "2" })
	deadline := time.Now().Add(5 * time.Second)
	for a.holds(on["a"][0]) {
		if time.Now().After(deadline) {
			t.Fatal("host a was not reconciled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !a.holds(on["a"][1]) {
		t.Fatalf("reconciling a destroyed %s, which is still placed there", on["a"][1])
	}
	for i := 0; ; i++ {
		id := "n" + string(rune('0'+i))
		if _, err := f.Create(ctx, hostagent.CreateRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		if a.holds(id) {
			break
		}
		if i == 5 {
			t.Fatal("no new sandbox went to a after it came back")
		}
	}

	// b goes silent and comes back in the same life: it is not reaped (its warm pool
	// stays), only what the control plane let go of meanwhile is destroyed there.
	reaps := len(b.reaps)
	b.set(func(h *fakeHost) { h.down = true })
	deadline = time.Now().Add(5 * time.Second)
	for e := range events {
		if e.Kind == hostagent.EventHostLost && e.Sandbox == "s5" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b was not lost")
		}
	}
	if _, err := f.Destroy(ctx, "s5"); err != nil {
		t.Fatal(err)
	}
	b.set(func(h *fakeHost) { h.down = false })
	for b.holds("s5") {
		if time.Now().After(deadline) {
			t.Fatal("s5 was not destroyed when b answered again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !b.holds("s6") || len(b.reaps) != reaps {
		t.Fatalf("b after a silence: holds s6 %v, reaped %d times (was %d)", b.holds("s6"), len(b.reaps), reaps)
	}

	// Another fleet on the same store (a restarted control plane) knows where they are.
	f2, err := New(ctx, Options{Members: []Member{{ID: "a", Host: a}, {ID: "b", Host: b}}, Store: st, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := f2.Exec(ctx, hostagent.ExecRequest{SandboxID: on["b"][0], CommandID: "again"}); err != nil {
		t.Fatal(err)
	}
	if end, err := f2.Wait(ctx, "again"); err != nil || end.Error != "b" {
		t.Fatalf("after a restart: %v %v", end, err)
	}
}

// TestFleetCutOff: a host that answers nothing at all (cut off by the network, its calls
// hanging) is lost after LostAfter, and a call under way to it answers host_lost then.
func TestFleetCutOff(t *testing.T) {
	ctx := context.Background()
	a, b := newFake("a"), newFake("b")
	f, err := New(ctx, Options{Members: []Member{{ID: "a", Host: a}, {ID: "b", Host: b}},
		Heartbeat: 20 * time.Millisecond, LostAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var onA string
	for _, id := range []string{"s1", "s2"} {
		if _, err := f.Create(ctx, hostagent.CreateRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		if a.holds(id) {
			onA = id
		}
	}
	if err := f.Exec(ctx, hostagent.ExecRequest{SandboxID: onA, CommandID: "c"}); err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	defer close(cut)
	a.set(func(h *fakeHost) { h.cut = cut })
	t0 := time.Now()
	_, err = f.Wait(ctx, "c")
	if errdefs.CodeOf(err) != hostagent.CodeHostLost {
		t.Fatalf("wait on a host cut off: %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("wait answered after %s", d)
	}
	if _, err := f.Create(ctx, hostagent.CreateRequest{ID: "s3"}); err != nil || !b.holds("s3") {
		t.Fatalf("a new sandbox with a cut off: %v", err)
	}
}
