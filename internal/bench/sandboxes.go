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
	rss, usage, groups := cgroupMemory(cgroupParent)
	s := OneCallPaced(ctx, c, fmt.Sprintf("lbb, %d idle held", len(ids)), runs, lbb.RunParams{Code: pySum, Input: []int{1, 2, 3}}, nil, before)
	extra := fmt.Sprintf("%d idle sandboxes (%d failed to start) made in %v; their cgroups: %.2f GiB RSS, %.2f GiB charged in all (%.1f MiB RSS each), over %d cgroups",
		len(ids), errs, created.Round(time.Millisecond), float64(rss)/(1<<30), float64(usage)/(1<<30), float64(rss)/float64(max(1, len(ids)))/(1<<20), groups)
	return s, extra, nil
}

// cgroupMemory sums total_rss and usage_in_bytes over the cgroup v1 memory groups under parent.
func cgroupMemory(parent string) (rss, usage uint64, groups int) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/memory", parent, "*"))
	for _, d := range dirs {
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
