// Package controltest has a fake host agent for tests of the control plane and the API that
// are about records, idempotency and HTTP rather than isolation. The fake runs nothing: it
// answers one-call runs by the code it is given. Long-lived sandboxes go to a real host agent
// when one is given (Over), else are unavailable. Tests of real runs use a real driver.
package controltest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Runner runs one-call runs for a fake host agent (On). By the code a run gets:
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

// On returns a fake host agent: r runs its one-call runs and reaps its Held sandboxes; h
// serves the rest (long-lived sandboxes), or with h nil they are unavailable.
func (r *Runner) On(h hostagent.Host) hostagent.Host {
	if h == nil {
		h = unavailable{}
	}
	return &fake{Host: h, r: r}
}

// fake is the host agent On answers.
type fake struct {
	hostagent.Host
	r *Runner
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

func (f *fake) Claim(ctx context.Context, req hostagent.RunRequest) error { return nil }

func (f *fake) Unclaim(ctx context.Context, sandboxID string) error { return nil }

func (f *fake) Release(ctx context.Context, sandboxID string) (hostagent.Ending, error) {
	return hostagent.Ending{At: time.Now()}, nil
}

// Reap reaps the runner's Held sandboxes, then what the real host agent holds.
func (f *fake) Reap(ctx context.Context, keep []string) ([]string, error) {
	reaped, _ := f.r.Reap(ctx, keep)
	more, err := f.Host.Reap(ctx, keep)
	return append(reaped, more...), err
}

func (f *fake) Run(ctx context.Context, req hostagent.RunRequest) (hostagent.RunResult, error) {
	return f.r.Run(ctx, req)
}

// Run answers by req.Code.
func (r *Runner) Run(ctx context.Context, req hostagent.RunRequest) (hostagent.RunResult, error) {
	r.mu.Lock()
	r.runs[req.CommandID]++
	r.mu.Unlock()
	r.started <- req.CommandID
	t0 := time.Now()
	out := hostagent.RunResult{SandboxStarted: t0, EndReason: store.EndRunFinished}
	out.Started = t0
	zero := 0
	finish := func() (hostagent.RunResult, error) {
		out.Ended = time.Now()
		out.Usage = store.Usage{VCPUMs: 1, GiBMs: float64(req.Limits.MemoryMiB) / 1024}
		out.Stdout.Head = hostagent.MaskString(out.Stdout.Head, hostagent.Secrets(req.Env))
		out.Stdout.Bytes = int64(len(out.Stdout.Head))
		return out, nil
	}
	code := strings.TrimSpace(req.Code)
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
		for _, v := range req.Env {
			out.Stdout.Head += v + "\n"
		}
	}
	out.Status, out.OK, out.ExitCode = store.CommandSucceeded, true, &zero
	out.Result = req.Input
	if len(out.Result) == 0 {
		out.Result = json.RawMessage("null")
	}
	return finish()
}

// Reap reports the held sandboxes keep does not name as destroyed.
func (r *Runner) Reap(ctx context.Context, keep []string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out, left []string
	for _, id := range r.Held {
		if slices.Contains(keep, id) {
			left = append(left, id)
			continue
		}
		out = append(out, id)
	}
	r.Held, r.Reaped = left, append(r.Reaped, out...)
	return out, nil
}

// unavailable is a host agent without long-lived sandboxes.
type unavailable struct{}

var errNoSandboxes = errdefs.Unavailable("this server runs one-call runs only: it has no host for long-lived sandboxes")

func (unavailable) Info(context.Context) (hostagent.Info, error)      { return hostagent.Info{}, nil }
func (unavailable) Claim(context.Context, hostagent.RunRequest) error { return errNoSandboxes }
func (unavailable) Unclaim(context.Context, string) error             { return nil }
func (unavailable) Run(context.Context, hostagent.RunRequest) (hostagent.RunResult, error) {
	return hostagent.RunResult{}, errNoSandboxes
}
func (unavailable) Release(context.Context, string) (hostagent.Ending, error) {
	return hostagent.Ending{At: time.Now()}, nil
}
func (unavailable) Create(context.Context, hostagent.CreateRequest) (hostagent.Sandbox, error) {
	return hostagent.Sandbox{}, errNoSandboxes
}
func (unavailable) Resume(context.Context, hostagent.ResumeRequest) (hostagent.Sandbox, error) {
	return hostagent.Sandbox{}, errNoSandboxes
}
func (unavailable) Stop(context.Context, string) (store.Usage, error) { return store.Usage{}, nil }
func (unavailable) ArchiveWorkspace(context.Context, string) (hostagent.Workspace, error) {
	return hostagent.Workspace{}, errNoSandboxes
}
func (unavailable) Destroy(context.Context, string) (store.Usage, error) { return store.Usage{}, nil }
func (unavailable) Pause(context.Context, string) (hostagent.Paused, error) {
	return hostagent.Paused{}, errNoSandboxes
}
func (unavailable) Snapshot(context.Context, string, string) (hostagent.SnapshotInfo, error) {
	return hostagent.SnapshotInfo{}, errNoSandboxes
}
func (unavailable) DeleteSnapshot(context.Context, string) error { return nil }
func (unavailable) Fork(context.Context, hostagent.ForkRequest) (hostagent.Sandbox, error) {
	return hostagent.Sandbox{}, errNoSandboxes
}
func (unavailable) Usage(context.Context, string) (store.Usage, error) {
	return store.Usage{}, errNoSandboxes
}
func (unavailable) SetExpiry(context.Context, string, time.Time) error { return nil }
func (unavailable) SetGrant(context.Context, string, *egress.Grant) error {
	return errNoSandboxes
}
func (unavailable) Exec(context.Context, hostagent.ExecRequest) error { return errNoSandboxes }
func (unavailable) Wait(context.Context, string) (hostagent.CommandEnd, error) {
	return hostagent.CommandEnd{}, errNoSandboxes
}
func (unavailable) Signal(context.Context, string, string) error { return errNoSandboxes }
func (unavailable) DialPort(context.Context, string, int) (net.Conn, error) {
	return nil, errNoSandboxes
}
func (unavailable) Resize(context.Context, string, hostagent.PtySize) error { return errNoSandboxes }
func (unavailable) WriteStdin(context.Context, string, io.Reader, bool) (hostagent.StdinResult, error) {
	return hostagent.StdinResult{}, errNoSandboxes
}
func (unavailable) ReadOutput(context.Context, string, string, int64, int) (int64, []byte, error) {
	return 0, nil, errNoSandboxes
}
func (unavailable) ReadHeld(context.Context, hostagent.HeldRead) (hostagent.HeldOutput, error) {
	return hostagent.HeldOutput{}, errNoSandboxes
}
func (unavailable) WriteFile(context.Context, string, string, io.Reader) (hostagent.FileEntry, error) {
	return hostagent.FileEntry{}, errNoSandboxes
}
func (unavailable) OpenFile(context.Context, string, string) (hostagent.FileEntry, io.ReadCloser, error) {
	return hostagent.FileEntry{}, nil, errNoSandboxes
}
func (unavailable) StatFile(context.Context, string, string) (hostagent.FileEntry, error) {
	return hostagent.FileEntry{}, errNoSandboxes
}
func (unavailable) ListFiles(context.Context, string, string, bool) ([]hostagent.FileEntry, error) {
	return nil, errNoSandboxes
}
func (unavailable) RemoveFile(context.Context, string, string, bool) error { return errNoSandboxes }
func (unavailable) MakeDir(context.Context, string, string) (hostagent.FileEntry, error) {
	return hostagent.FileEntry{}, errNoSandboxes
}
func (unavailable) Sandboxes(context.Context) ([]string, error)      { return nil, nil }
func (unavailable) Reap(context.Context, []string) ([]string, error) { return nil, nil }
func (unavailable) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	ch := make(chan hostagent.Event)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

// The fake builds template layers with the host agent it wraps, when that can.

func (f *fake) builder() (hostagent.LayerBuilder, error) {
	lb, ok := f.Host.(hostagent.LayerBuilder)
	if !ok {
		return nil, errdefs.New(errdefs.ClassUnavailable, errdefs.CodeNotSupported, "no layer builder")
	}
	return lb, nil
}

func (f *fake) BuildLayer(ctx context.Context, req hostagent.LayerBuildRequest, log io.Writer) (layers.Info, error) {
	lb, err := f.builder()
	if err != nil {
		return layers.Info{}, err
	}
	return lb.BuildLayer(ctx, req, log)
}

func (f *fake) LayerKey(r layers.Recipe) string {
	if lb, err := f.builder(); err == nil {
		return lb.LayerKey(r)
	}
	return layers.Key("fake", r)
}

func (f *fake) LayerLog(ctx context.Context, key string) ([]byte, error) {
	lb, err := f.builder()
	if err != nil {
		return nil, err
	}
	return lb.LayerLog(ctx, key)
}

func (f *fake) GCLayers(ctx context.Context, keep []string) ([]string, error) {
	lb, err := f.builder()
	if err != nil {
		return nil, nil
	}
	return lb.GCLayers(ctx, keep)
}
