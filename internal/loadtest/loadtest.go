// Package loadtest is lbb's load check: many concurrent one-call runs against a server,
// then the records are counted — every run has exactly one command record, none is lost,
// none ran twice (a replay of every key answers the same command) — with latency and
// throughput figures.
package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Options configure a check.
type Options struct {
	Client *lbb.Client
	// N runs, Concurrency at a time (default: all at once).
	N           int
	Concurrency int
	// Log receives progress; nil discards it.
	Log io.Writer
}

// Result is what a check measured and found.
type Result struct {
	N           int
	Concurrency int
	Succeeded   int
	Failed      int
	Lost        int
	// Records counts command records found for the check's keys; RunTwice counts keys with
	// more than one, and Mismatched replays that answered another command.
	Records    int
	RunTwice   int
	Mismatched int
	Errors     []string
	Wall       time.Duration
	Latencies  []time.Duration
	P50, P99   time.Duration
	RunsPerSec float64
}

// OK reports whether the check passed: every run succeeded once, none lost, none twice.
func (r Result) OK() bool {
	return r.Succeeded == r.N && r.Lost == 0 && r.RunTwice == 0 && r.Mismatched == 0 && r.Records == r.N && len(r.Errors) == 0
}

// String is the report for people.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d one-call runs, %d at a time, in %s: %.1f runs/s, latency p50 %s p99 %s\n",
		r.N, r.Concurrency, r.Wall.Round(time.Millisecond), r.RunsPerSec, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond))
	fmt.Fprintf(&b, "succeeded %d, failed %d, lost %d, command records %d, run twice %d, replays answering another command %d\n",
		r.Succeeded, r.Failed, r.Lost, r.Records, r.RunTwice, r.Mismatched)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	if r.OK() {
		b.WriteString("PASS\n")
	} else {
		b.WriteString("FAIL\n")
	}
	return b.String()
}

const sumCode = "def run(input, config):\n    return sum(input)\n"

// Run runs the check.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.N <= 0 {
		o.N = 100
	}
	if o.Concurrency <= 0 || o.Concurrency > o.N {
		o.Concurrency = o.N
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	res := Result{N: o.N, Concurrency: o.Concurrency, Latencies: make([]time.Duration, o.N)}
	prefix := fmt.Sprintf("load-%d-", time.Now().UnixNano())
	keys := make([]string, o.N)
	cmds := make([]string, o.N)
	var mu sync.Mutex
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(res.Errors) < 20 {
			res.Errors = append(res.Errors, fmt.Sprintf(format, a...))
		}
	}

	logf("%d one-call runs, %d at a time…", o.N, o.Concurrency)
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	start := make(chan struct{})
	t0 := time.Now()
	for i := range o.N {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
		wg.Go(func() {
			<-start
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			run, err := o.Client.Sandboxes.Run(ctx, lbb.RunParams{Code: sumCode, Input: []int{i, 1}, IdempotencyKey: keys[i], WaitMs: 120000})
			res.Latencies[i] = time.Since(t)
			if err != nil {
				fail("run %d: %v", i, err)
				return
			}
			cmds[i] = run.Command
			mu.Lock()
			defer mu.Unlock()
			switch {
			case run.Status == lbb.StatusLost:
				res.Lost++
			case run.OK && string(run.Result) == fmt.Sprint(i+1):
				res.Succeeded++
			default:
				res.Failed++
				if len(res.Errors) < 20 {
					res.Errors = append(res.Errors, fmt.Sprintf("run %d: %s %s result %s", i, run.Status, run.Error, run.Result))
				}
			}
		})
	}
	close(start)
	wg.Wait()
	res.Wall = time.Since(t0)
	res.RunsPerSec = float64(o.N) / res.Wall.Seconds()
	lat := bench.Sample{Durs: res.Latencies}
	res.P50, res.P99 = lat.Quantile(0.5), lat.Quantile(0.99)

	logf("counting records…")
	perKey := map[string]int{}
	ours := map[string]bool{}
	for _, k := range keys {
		ours[k] = true
	}
	for cursor := ""; ; {
		l, err := o.Client.Commands.List(ctx, lbb.ListParams{Limit: 1000, Cursor: cursor})
		if err != nil {
			return res, fmt.Errorf("listing commands: %w", err)
		}
		for _, c := range l.Data {
			if ours[c.IdempotencyKey] {
				perKey[c.IdempotencyKey]++
				res.Records++
				if c.Status == lbb.StatusLost {
					res.Lost++
				}
			}
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	for _, n := range perKey {
		if n > 1 {
			res.RunTwice++
		}
	}

	logf("replaying every key…")
	for i := range o.N {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			run, err := o.Client.Sandboxes.Run(ctx, lbb.RunParams{Code: sumCode, Input: []int{i, 1}, IdempotencyKey: keys[i], WaitMs: 120000})
			if err != nil {
				fail("replay %d: %v", i, err)
				return
			}
			if !run.Replayed || run.Command != cmds[i] {
				mu.Lock()
				res.Mismatched++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res, nil
}

// JSON is the result for scripts.
func (r Result) JSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return json.MarshalIndent(map[string]any{
		"n": r.N, "concurrency": r.Concurrency, "succeeded": r.Succeeded, "failed": r.Failed, "lost": r.Lost, "records": r.Records,
		"run_twice": r.RunTwice, "replay_mismatched": r.Mismatched, "errors": r.Errors,
		"wall_ms": ms(r.Wall), "p50_ms": ms(r.P50), "p99_ms": ms(r.P99), "runs_per_s": r.RunsPerSec, "ok": r.OK(),
	}, "", "  ")
}
