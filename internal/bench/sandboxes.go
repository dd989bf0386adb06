package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// execOK runs argv in sandbox id through the API and checks it exited 0.
func execOK(ctx context.Context, c *lbb.Client, id string, argv ...string) error {
	cmd, err := c.Sandboxes.Exec(ctx, id, lbb.ExecParams{Argv: argv})
	if err != nil {
		return err
	}
	if cmd.ExitCode == nil || *cmd.ExitCode != 0 {
		return fmt.Errorf("%v: status %s", argv, cmd.Status)
	}
	return nil
}

// CreateAndExec times the TTI shape: create a sandbox, run argv in it, through the API. Each
// sandbox is deleted (untimed) before the next; before each, ready (when not nil, untimed)
// waits for the server to be at idle with its pool refilled, as seed 002 measures it.
func CreateAndExec(ctx context.Context, c *lbb.Client, n int, ready func(), argv ...string) Sample {
	s := Sample{Name: "lbb"}
	for i := 0; i < n; i++ {
		if ready != nil {
			ready()
		}
		t0 := time.Now()
		sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{Base: "lbb/node"})
		if err != nil {
			s.Errors++
			continue
		}
		err = execOK(ctx, c, sb.ID, argv...)
		d := time.Since(t0)
		c.Sandboxes.Delete(ctx, sb.ID)
		if err != nil {
			s.Errors++
			continue
		}
		s.Durs = append(s.Durs, d)
	}
	return s
}

// ExecRoundTrip times argv run again and again in one running sandbox through the API.
func ExecRoundTrip(ctx context.Context, c *lbb.Client, n int, argv ...string) (Sample, error) {
	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{Base: "lbb/shell"})
	if err != nil {
		return Sample{}, err
	}
	defer c.Sandboxes.Delete(ctx, sb.ID)
	return Time("lbb", n, func() error { return execOK(ctx, c, sb.ID, argv...) }), nil
}

// Idle holds n idle sandboxes, measures what they cost in memory (the RSS their cgroups
// account, summed), and times one-call runs while they are held.
func Idle(ctx context.Context, c *lbb.Client, n, runs int, cgroupParent string, before func()) (Sample, string, error) {
	var (
		mu   sync.Mutex
		ids  []string
		errs int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
	)
	t0 := time.Now()
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{Base: "lbb/shell", ExpiresInSeconds: 3600})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				return
			}
			ids = append(ids, sb.ID)
		}()
	}
	wg.Wait()
	created := time.Since(t0)
	defer func() {
		for _, id := range ids {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.Sandboxes.Delete(context.Background(), id)
			}()
		}
		wg.Wait()
	}()
	time.Sleep(2 * time.Second) // let start-up pages settle
	rss, usage, groups := cgroupMemory(cgroupParent, ids)
	s := OneCallPaced(ctx, c, fmt.Sprintf("lbb, %d idle held", len(ids)), runs, lbb.RunParams{Code: pySum, Input: []int{1, 2, 3}}, nil, before)
	extra := fmt.Sprintf("%d idle sandboxes (%d failed to start) made in %v; their cgroups: %.2f GiB RSS, %.2f GiB charged in all (%.1f MiB RSS each), over %d cgroups",
		len(ids), errs, created.Round(time.Millisecond), float64(rss)/(1<<30), float64(usage)/(1<<30), float64(rss)/float64(max(1, len(ids)))/(1<<20), groups)
	return s, extra, nil
}

// cgroupMemory sums total_rss and usage_in_bytes over the cgroup v1 memory groups of the
// sandboxes ids under parent (not the warm pool's slots beside them).
func cgroupMemory(parent string, ids []string) (rss, usage uint64, groups int) {
	for _, id := range ids {
		d := filepath.Join("/sys/fs/cgroup/memory", parent, id)
		st, err := os.ReadFile(filepath.Join(d, "memory.stat"))
		if err != nil {
			continue
		}
		groups++
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "total_rss "); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				rss += n
			}
		}
		if b, err := os.ReadFile(filepath.Join(d, "memory.usage_in_bytes")); err == nil {
			n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			usage += n
		}
	}
	return rss, usage, groups
}

// busySandbox creates a sandbox made with p and, with busy, starts one command in it that
// prints a counter every 100 ms (its output followed by nobody).
func busySandbox(ctx context.Context, c *lbb.Client, p lbb.CreateParams, busy bool) (*lbb.Sandbox, *lbb.Command, error) {
	sb, err := c.Sandboxes.Create(ctx, p)
	if err != nil || !busy {
		return sb, nil, err
	}
	cmd, err := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done"}, WaitMs: -1})
	if err != nil {
		c.Sandboxes.Delete(ctx, sb.ID)
		return nil, nil, err
	}
	return sb, cmd, nil
}

func busyName(busy bool) string {
	if busy {
		return "lbb, one command running"
	}
	return "lbb, idle"
}

// stillRunning checks a busy sandbox's command runs.
func stillRunning(ctx context.Context, c *lbb.Client, cmd *lbb.Command, after string) error {
	if cmd == nil {
		return nil
	}
	if got, err := c.Commands.Get(ctx, cmd.ID, -1); err != nil || got.Status != "running" {
		return fmt.Errorf("the command after %s: %v %v", after, got, err)
	}
	return nil
}

// SnapshotFork times snapshots (each but the last deleted, untimed) and forks of the last
// (all deleted after, untimed) of a sandbox made with p, n times each; busy runs one command in it,
// which a snapshot carries on (gvisor).
func SnapshotFork(ctx context.Context, c *lbb.Client, n int, p lbb.CreateParams, busy bool) (snap, fork Sample, err error) {
	sb, cmd, err := busySandbox(ctx, c, p, busy)
	if err != nil {
		return snap, fork, err
	}
	defer c.Sandboxes.Delete(ctx, sb.ID)
	var last string
	snap = Time(busyName(busy), n, func() error {
		sn, err := c.Sandboxes.Snapshot(ctx, sb.ID, lbb.SnapshotRequest{})
		if err != nil {
			return err
		}
		if last != "" {
			c.DeleteSnapshot(ctx, last)
		}
		last = sn.ID
		return nil
	})
	if last == "" {
		return snap, fork, fmt.Errorf("no snapshot was taken")
	}
	var forks []string
	fork = Time(busyName(busy), n, func() error {
		f, err := c.Sandboxes.Fork(ctx, sb.ID, lbb.ForkRequest{Snapshot: last})
		if err != nil {
			return err
		}
		forks = append(forks, f.ID)
		return nil
	})
	// Deleted after, so that no deletion weighs on a timed call.
	for _, id := range forks {
		c.Sandboxes.Delete(ctx, id)
	}
	return snap, fork, stillRunning(ctx, c, cmd, fmt.Sprintf("%d snapshots", n))
}

// PauseResume times a pause and the resume after it, of a sandbox made with p, n times; busy
// runs one command in it meanwhile (a counter printing every 100 ms, its output followed by
// nobody), which a pause keeps running. It checks the command still runs at the end.
func PauseResume(ctx context.Context, c *lbb.Client, n int, p lbb.CreateParams, busy bool) (Sample, error) {
	sb, cmd, err := busySandbox(ctx, c, p, busy)
	if err != nil {
		return Sample{}, err
	}
	defer c.Sandboxes.Delete(ctx, sb.ID)
	s := Time(busyName(busy), n, func() error {
		if _, err := c.Sandboxes.Pause(ctx, sb.ID); err != nil {
			return err
		}
		_, err := c.Sandboxes.Resume(ctx, sb.ID)
		return err
	})
	return s, stillRunning(ctx, c, cmd, fmt.Sprintf("%d pauses", n))
}

// CellRoundTrip times a trivial cell (1 + 1) again and again in one warm Python context
// through the API.
func CellRoundTrip(ctx context.Context, c *lbb.Client, n int) (Sample, error) {
	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{})
	if err != nil {
		return Sample{}, err
	}
	defer c.Sandboxes.Delete(ctx, sb.ID)
	cell := func() error {
		r, err := c.Code.Run(ctx, sb.ID, lbb.CellParams{Code: "1 + 1"})
		if err == nil && r.Text() != "2" {
			err = fmt.Errorf("the cell answered %q (%s)", r.Text(), r.Status)
		}
		return err
	}
	if err := cell(); err != nil { // starts the context, untimed
		return Sample{}, err
	}
	return Time("lbb", n, cell), nil
}

// FirstCell times what a person sees of a new code interpreter: create a sandbox of
// lbb/code-interpreter and run its first cell (its kernel starting with the sandbox).
func FirstCell(ctx context.Context, c *lbb.Client, n int, ready func()) Sample {
	s := Sample{Name: "lbb"}
	for i := 0; i < n; i++ {
		if ready != nil {
			ready()
		}
		t0 := time.Now()
		sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{Base: "lbb/code-interpreter"})
		if err != nil {
			s.Errors++
			continue
		}
		r, err := c.Code.Run(ctx, sb.ID, lbb.CellParams{Code: "1 + 1"})
		d := time.Since(t0)
		c.Sandboxes.Delete(ctx, sb.ID)
		if err != nil || r.Text() != "2" {
			s.Errors++
			continue
		}
		s.Durs = append(s.Durs, d)
	}
	return s
}
