package fleet

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

// sizedHost is a fake host that reports the capacity c.
type sizedHost struct {
	*fakeHost
	c hostagent.Capacity
}

func (h sizedHost) Info(ctx context.Context) (hostagent.Info, error) {
	info, err := h.fakeHost.Info(ctx)
	info.Capacity = h.c
	return info, err
}

func TestScore(t *testing.T) {
	f := &Fleet{o: Options{MinMemoryMiB: 256, MinDiskMiB: 1024}}
	roomy := hostagent.Capacity{CPUs: 4, MemoryMiB: 8192, MemoryFreeMiB: 8192, DiskFreeMiB: 64 << 10}
	for _, tc := range []struct {
		name    string
		c       hostagent.Capacity
		running int
		want    float64
		ok      bool
	}{
		{"idle roomy host", roomy, 0, 0, true},
		{"two running per CPU", roomy, 8, 2, true},
		{"half its memory used", hostagent.Capacity{CPUs: 4, MemoryMiB: 8192, MemoryFreeMiB: 4096, DiskFreeMiB: 64 << 10}, 0, 0.5, true},
		{"half of plenty of disk", hostagent.Capacity{CPUs: 4, MemoryMiB: 8192, MemoryFreeMiB: 8192, DiskFreeMiB: 32 << 10}, 0, 0.5, true},
		{"nothing reported but CPUs", hostagent.Capacity{CPUs: 2}, 1, 0.5, true},
		{"memory below the floor", hostagent.Capacity{CPUs: 4, MemoryMiB: 8192, MemoryFreeMiB: 255, DiskFreeMiB: 64 << 10}, 0, 0, false},
		{"disk below the floor", hostagent.Capacity{CPUs: 4, MemoryMiB: 8192, MemoryFreeMiB: 8192, DiskFreeMiB: 1023}, 0, 0, false},
	} {
		got, ok := f.score(tc.c, tc.running)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("%s: score %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPlacement: only running sandboxes load a host; of two hosts as busy the one with more
// free memory gets the sandbox; a host below a floor gets none.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	big := hostagent.Capacity{CPUs: 2, MemoryMiB: 4096, MemoryFreeMiB: 4096, DiskFreeMiB: 10 << 10}
	small := hostagent.Capacity{CPUs: 2, MemoryMiB: 4096, MemoryFreeMiB: 1024, DiskFreeMiB: 10 << 10}
	a, b := sizedHost{newFake("a"), big}, sizedHost{newFake("b"), small}
	f, err := New(ctx, Options{Members: []Member{{ID: "a", Host: a}, {ID: "b", Host: b}}, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	create := func(id string) string {
		t.Helper()
		if _, err := f.Create(ctx, hostagent.CreateRequest{ID: id, Runtime: "ns"}); err != nil {
			t.Fatal(err)
		}
		return f.HostOf(id)
	}
	// a has all its memory free, b a quarter: a takes sandboxes until its load (0.5 each on
	// two CPUs) outweighs b's memory in use (0.75).
	for i, want := range []string{"a", "a", "b"} {
		if got := create("s" + string(rune('1'+i))); got != want {
			t.Fatalf("sandbox %d placed on %s, want %s", i+1, got, want)
		}
	}
	// Stopped sandboxes do not count: with a's two stopped, a takes the next two again.
	f.setRunning("s1", false)
	f.setRunning("s2", false)
	for _, id := range []string{"s4", "s5"} {
		if got := create(id); got != "a" {
			t.Fatalf("%s placed on %s with a's sandboxes stopped, want a", id, got)
		}
	}
	// Below the memory floor a host takes nothing, whatever its load.
	low := sizedHost{newFake("c"), hostagent.Capacity{CPUs: 64, MemoryMiB: 4096, MemoryFreeMiB: 100, DiskFreeMiB: 10 << 10}}
	g, err := New(ctx, Options{Members: []Member{{ID: "c", Host: low}}, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Create(ctx, hostagent.CreateRequest{ID: "x", Runtime: "ns"}); errdefs.CodeOf(err) != "no_host" {
		t.Fatalf("create on a host out of memory: %v, want no_host", err)
	}
}

// TestJoin: a host added to the store joins with its token (a wrong one is refused with a
// stable code) and takes sandboxes; another fleet on the same store picks it up.
func TestJoin(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hosts := map[string]*fakeHost{"h1": newFake("h1")}
	dial := func(id, url string) (hostagent.Host, error) { return hosts[id], nil }
	opts := Options{Store: st, Dial: dial, Heartbeat: 20 * time.Millisecond, Poll: 20 * time.Millisecond}
	f, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Create(ctx, hostagent.CreateRequest{ID: "s0", Runtime: "ns"}); errdefs.CodeOf(err) != "no_host" {
		t.Fatalf("create with no host: %v, want no_host", err)
	}
	secret := "s3cret"
	token := HostToken(secret, "h1")
	if HostOfToken(token) != "h1" {
		t.Fatalf("token %s names %q", token, HostOfToken(token))
	}
	// Not added yet, then added: a token of another secret is refused.
	if err := register(f, token); errdefs.CodeOf(err) != CodeHostToken {
		t.Fatalf("registering a host not added: %v, want %s", err, CodeHostToken)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := st.PutHost(ctx, store.Host{ID: "h1", State: store.HostAdded, TokenHash: HashToken(token), RegisteredAt: now, LastHeartbeat: now}); err != nil {
		t.Fatal(err)
	}
	if err := register(f, HostToken("other", "h1")); errdefs.CodeOf(err) != CodeHostToken || errdefs.ClassOf(err) != errdefs.ClassUnauthorized {
		t.Fatalf("registering with a wrong token: %v, want %s", err, CodeHostToken)
	}
	if err := register(f, token); err != nil {
		t.Fatal(err)
	}
	waitUp := func(f *Fleet, id string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			for _, h := range f.Hosts() {
				if h.ID == id && h.State == store.HostUp {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %s not up: %+v", id, f.Hosts())
			}
		}
	}
	waitUp(f, "h1")
	if _, err := f.Create(ctx, hostagent.CreateRequest{ID: "s1", Runtime: "ns"}); err != nil || !hosts["h1"].holds("s1") {
		t.Fatalf("create on the joined host: %v", err)
	}
	// Registering again (a heartbeat) changes nothing.
	if err := register(f, token); err != nil || len(f.Hosts()) != 1 {
		t.Fatalf("registering again: %v, hosts %+v", err, f.Hosts())
	}
	// At another address (restarted on another port): the member moves, its sandboxes with it.
	if _, err := f.Register(ctx, token, hostagent.Registration{ID: "h1", URL: "http://127.0.0.1:7703"}); err != nil {
		t.Fatal(err)
	}
	if hs := f.Hosts(); len(hs) != 1 || hs[0].URL != "http://127.0.0.1:7703" || f.HostOf("s1") != "h1" {
		t.Fatalf("after moving: %+v, s1 on %q", hs, f.HostOf("s1"))
	}
	waitUp(f, "h1")
	if err := f.Exec(ctx, hostagent.ExecRequest{SandboxID: "s1", CommandID: "c0"}); err != nil {
		t.Fatal(err)
	}
	if hosts, _ := st.ListHosts(ctx); hosts[0].URL != "http://127.0.0.1:7703" {
		t.Fatalf("recorded at %s", hosts[0].URL)
	}
	// Another control plane on the database: the host is its member too, and calls for s1
	// go there.
	g, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	waitUp(g, "h1")
	if err := g.Exec(ctx, hostagent.ExecRequest{SandboxID: "s1", CommandID: "c1"}); err != nil {
		t.Fatal(err)
	}
	// Removed (lbb hosts rm): it leaves both fleets, its sandboxes reported host_lost, and its
	// token joins no more.
	events, err := f.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Kind != hostagent.EventHostLost || e.Sandbox != "s1" {
			t.Fatalf("event %+v, want s1 host_lost", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no host_lost for the removed host's sandbox")
	}
	for deadline := time.Now().Add(5 * time.Second); len(f.Hosts())+len(g.Hosts()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a removed host is still a member: %+v %+v", f.Hosts(), g.Hosts())
		}
	}
	if err := register(f, token); errdefs.CodeOf(err) != CodeHostToken {
		t.Fatalf("registering a removed host: %v, want %s", err, CodeHostToken)
	}
	if hosts, _ := st.ListHosts(ctx); len(hosts) != 0 {
		t.Fatalf("hosts after rm: %+v", hosts)
	}
}

func register(f *Fleet, token string) error {
	_, err := f.Register(context.Background(), token, hostagent.Registration{ID: "h1", URL: "http://127.0.0.1:7702"})
	return err
}

// TestReconcileSparesOthers: a host that two control planes share, found again by the second
// after it was reaped (a host picked up from the store, or one that did not answer at its
// Recover), is reaped of leftovers only: what the first placed there after the second started
// (recorded in the store) and the sandboxes of runs still live in the records stay.
func TestReconcileSparesOthers(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := newFake("h1")
	h.set(func(h *fakeHost) { h.down = true })
	opts := Options{Members: []Member{{ID: "h1", Host: h}}, Store: st, Heartbeat: 20 * time.Millisecond, LostAfter: time.Hour}
	g, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Reap(ctx, nil); err != nil { // g's Recover: h1 does not answer, so it is not reconciled
		t.Fatal(err)
	}
	// Meanwhile another control plane placed a long-lived sandbox there, and a one-call run's
	// sandbox (in its memory only, but live in the records); and junk is left from before.
	if err := st.PutPlacement(ctx, store.Placement{ID: "long", Host: "h1", Kind: store.PlacedSandbox, PlacedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSandbox(ctx, store.Sandbox{ID: "run", Graph: "main", Status: store.SandboxRunning, OneCall: true, Host: "h1", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	h.set(func(h *fakeHost) {
		h.held["long"], h.held["run"], h.held["junk"] = true, true, true
		h.down = false
	})
	for deadline := time.Now().Add(5 * time.Second); h.holds("junk"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("h1 was not reconciled")
		}
	}
	if !h.holds("long") || !h.holds("run") {
		t.Fatalf("the reconcile destroyed another control plane's sandboxes: long %v, run %v", h.holds("long"), h.holds("run"))
	}
}
