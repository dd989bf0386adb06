// Package controltest has a fake Runner for tests of the control plane and the API that are
// about records, idempotency and HTTP rather than isolation. The fake runs nothing: it
// answers by the code it is given. Tests of real runs use a real driver.
package controltest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/host"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Runner is a fake control.Runner. By the code it gets:
//
//	"block"        waits until Release or its ctx ends (then: killed)
//	"sleep:<dur>"  sleeps, then succeeds
//	"raise"        fails with a traceback on stderr
//	"oom"          ends as oom
//	"timeout"      ends as timed_out
//	anything else  succeeds, its result the input
type Runner struct {
	mu      sync.Mutex
	runs    map[string]int // runs per command id
	started chan string
	release chan struct{}
	// Held are the sandbox ids Reap finds, as if a crash left them.
	Held   []string
	Reaped []string
}

// New returns a fake runner.
func New() *Runner {
	return &Runner{runs: map[string]int{}, started: make(chan string, 1000), release: make(chan struct{})}
}

// Started receives each command id as its run starts.
func (r *Runner) Started() <-chan string { return r.started }

// Release lets every blocked run finish.
func (r *Runner) Release() { close(r.release) }

// Runs is how many times the command ran.
func (r *Runner) Runs(commandID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[commandID]
}

// Total is how many runs there were.
func (r *Runner) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.runs {
		n += v
	}
	return n
}

// RunOnce answers by spec.Code.
func (r *Runner) RunOnce(ctx context.Context, spec host.RunSpec) host.Outcome {
	r.mu.Lock()
	r.runs[spec.CommandID]++
	r.mu.Unlock()
	r.started <- spec.CommandID
	t0 := time.Now()
	out := host.Outcome{SandboxStarted: t0, CommandStarted: t0, EndReason: store.EndRunFinished}
	zero := 0
	finish := func() host.Outcome {
		out.CommandEnded = time.Now()
		out.Usage = store.Usage{VCPUMs: 1, GiBMs: float64(spec.Limits.MemoryMiB) / 1024}
		out.Ended = host.Ended(host.Ending{At: time.Now(), Usage: out.Usage})
		out.Stdout.Head = host.MaskString(out.Stdout.Head, host.Secrets(spec.Env))
		out.Stdout.Bytes = int64(len(out.Stdout.Head))
		return out
	}
	code := strings.TrimSpace(spec.Code)
	switch {
	case code == "block":
		select {
		case <-r.release:
		case <-ctx.Done():
			out.Status, out.EndReason, out.Error = store.CommandKilled, store.EndServerShutdown, "the server stopped"
			return finish()
		}
	case strings.HasPrefix(code, "sleep:"):
		d, _ := time.ParseDuration(strings.TrimPrefix(code, "sleep:"))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			out.Status, out.EndReason = store.CommandKilled, store.EndServerShutdown
			return finish()
		}
	case code == "raise":
		one := 1
		out.Status, out.ExitCode, out.Error = store.CommandFailed, &one, "ValueError: boom"
		out.Stderr = store.Output{Head: "Traceback (most recent call last):\nValueError: boom\n", Bytes: 52}
		return finish()
	case code == "oom":
		k := 137
		out.Status, out.ExitCode, out.Signal, out.Error = store.CommandOOM, &k, "SIGKILL", "out of memory"
		return finish()
	case code == "timeout":
		out.Status, out.Error = store.CommandTimedOut, "timed out"
		return finish()
	case code == "echo-env":
		for _, v := range spec.Env {
			out.Stdout.Head += v + "\n"
		}
	}
	out.Status, out.OK, out.ExitCode = store.CommandSucceeded, true, &zero
	out.Result = spec.Input
	if len(out.Result) == 0 {
		out.Result = json.RawMessage("null")
	}
	return finish()
}

// Reap reports the held sandboxes keep does not claim as destroyed.
func (r *Runner) Reap(ctx context.Context, keep func(string) bool) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out, left []string
	for _, id := range r.Held {
		if keep(id) {
			left = append(left, id)
			continue
		}
		out = append(out, id)
	}
	r.Held, r.Reaped = left, append(r.Reaped, out...)
	return out, nil
}
