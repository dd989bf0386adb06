//go:build linux

package hostids

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestClaimKeepRelease(t *testing.T) {
	g := Registry{Dir: filepath.Join(t.TempDir(), "ids")}
	owners := t.TempDir()
	owner := func(name string) string {
		p := filepath.Join(owners, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Claims made at once are all different.
	const n = 64
	ranges := make([]Range, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := g.Claim(owner(string(rune('a'+i%26)) + string(rune('a'+i/26))))
			if err != nil {
				t.Error(err)
			}
			ranges[i] = r
		})
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for _, r := range ranges {
		if r.Count != Shared.Count || r.Base <= Shared.Base || r.Base+r.Count > 1<<31 || seen[r.Base] {
			t.Fatalf("range %+v (of %v)", r, ranges)
		}
		seen[r.Base] = true
	}

	a := owner("keeper")
	r, err := g.Claim(a)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Keep(r, a); !ok || err != nil {
		t.Fatalf("keep by its owner: %v %v", ok, err)
	}
	if held := g.HeldBy(a); len(held) != 1 || held[0] != r {
		t.Fatalf("held by its owner: %v, want %v", held, r)
	}
	if ok, _ := g.Keep(r, owner("other")); ok {
		t.Fatal("another owner kept a held range")
	}
	// A claim whose owner is gone is free; one whose owner still exists is not.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	b := owner("successor")
	if ok, err := g.Keep(r, b); !ok || err != nil {
		t.Fatalf("a stale claim was not taken over: %v %v", ok, err)
	}
	if err := g.Release(r, a); err != nil {
		t.Fatal(err)
	}
	if ok, _ := g.Keep(r, owner("third")); ok {
		t.Fatal("a release by a former owner freed the range")
	}
	if err := g.Release(r, b); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Keep(r, owner("third")); !ok || err != nil {
		t.Fatalf("a released range: %v %v", ok, err)
	}
	if ok, _ := g.Keep(Shared, a); ok {
		t.Fatal("the shared range was claimed")
	}
}

func TestSweep(t *testing.T) {
	g := Registry{Dir: filepath.Join(t.TempDir(), "ids")}
	live, gone := filepath.Join(t.TempDir(), "live"), filepath.Join(t.TempDir(), "gone")
	for _, d := range []string{live, gone} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rl, err := g.Claim(live)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(gone); err != nil {
		t.Fatal(err)
	}
	os.Remove(gone)
	if err := g.Sweep(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(g.Dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || len(g.HeldBy(live)) != 1 || g.HeldBy(live)[0] != rl { // the lock file and live's claim
		t.Fatalf("after a sweep: %v", names)
	}
}
