//go:build linux

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

// TestBurstQueues: a burst of one-call runs past the graph's running cap (10 by default) and
// the host's run slots waits for a slot instead of answering 429: every run answers its
// result, and those that waited say so in Server-Timing's queue phase.
func TestBurstQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	s := startServer(t, "--run-slots", "2", "--log-level", "warn")
	const n = 16
	body := `{"run": {"code": "def run(input, config):\n    return sum(input)\n", "input": [1, 2, 3]}}`
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprint("burst-", i)}, body)
		}()
	}
	wg.Wait()
	queue := regexp.MustCompile(`queue;dur=([0-9.]+)`)
	waited := 0
	for i, r := range replies {
		if r.status != 200 {
			t.Fatalf("run %d: %d %s", i, r.status, r.body)
		}
		if m := r.obj(t); m["ok"] != true || fmt.Sprint(m["result"]) != "6" {
			t.Fatalf("run %d: %s", i, r.body)
		}
		if m := queue.FindStringSubmatch(r.header.Get("Server-Timing")); m != nil {
			if ms, _ := strconv.ParseFloat(m[1], 64); ms >= 1 {
				waited++
			}
		}
	}
	// Two slots for sixteen runs: most of them waited.
	if waited < n/2 {
		t.Fatalf("%d of %d runs say they waited for a slot (Server-Timing queue)", waited, n)
	}
}
