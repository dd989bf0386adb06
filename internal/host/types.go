// Package host is the layer between the control plane and an isolation driver: it gets
// started sandboxes from a Provider, talks to their guest agents, captures output into what
// records keep, enforces timeouts, classifies how a command ended, meters usage, and reaps
// what a crash left behind. It knows runtime.Driver only as an interface.
package host

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// RunSpec is one run(input, config) in a sandbox of its own.
type RunSpec struct {
	SandboxID string
	CommandID string
	// Image is the root filesystem directory.
	Image  string
	Limits runtime.Limits
	// Runtime names the driver to run on (runtime.Spec.Runtime); "" is the default one.
	Runtime string

	Language string
	Code     string
	Input    json.RawMessage
	Config   json.RawMessage
	// Env values reach the code and are masked in everything returned.
	Env     map[string]string
	Timeout time.Duration

	// HeadBytes and TailBytes are how much of each stream to keep.
	HeadBytes, TailBytes int
	// Files are put into the workspace before the run (a template's Files).
	Files []WorkspaceFile
	// ReleaseAfter, when set, holds the sandbox's destruction until it is closed (at most a
	// minute): the caller records and answers the run first, and the destroy's work (killing,
	// unmounting, removing cgroups) does not compete with it.
	ReleaseAfter <-chan struct{}
	// Claim, when set, is the sandbox Host.Claim acquired for this run; RunOnce takes it
	// over (and destroys it at the end) instead of acquiring one.
	Claim *Claim
}

// WorkspaceFile is a file to put into a workspace: Path inside /workspace, and its bytes.
type WorkspaceFile struct {
	Path string
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// Outcome is how a run ended, ready for its records.
type Outcome struct {
	// Status is a command status (store.Command*).
	Status   string
	OK       bool
	Result   json.RawMessage
	Error    string
	ExitCode *int
	Signal   string
	Stdout   store.Output
	Stderr   store.Output

	SandboxStarted time.Time
	CommandStarted time.Time
	CommandEnded   time.Time
	// EndReason says why the sandbox ended (store.End*).
	EndReason string
	// Usage is the sandbox's, up to the command's end.
	Usage store.Usage
	// Ended receives one Ending once the sandbox is destroyed (at once when none started).
	Ended <-chan Ending
	// Err is an infrastructure failure (the sandbox did not start, the agent broke off),
	// already folded into Status and Error.
	Err error

	cpuNanos uint64
}

// Ending is how a sandbox's life ended.
type Ending struct {
	At    time.Time
	Usage store.Usage
	// Err says the sandbox could not be destroyed cleanly.
	Err error
}

// Ended returns a channel that has e, for outcomes whose sandbox is already gone.
func Ended(e Ending) <-chan Ending {
	ch := make(chan Ending, 1)
	ch <- e
	return ch
}

type agentExit = agent.Exit

func agentRun(spec RunSpec) agent.RunRequest {
	return agent.RunRequest{ID: spec.CommandID, Language: spec.Language, Code: spec.Code, Input: spec.Input,
		Config: spec.Config, Env: spec.Env, TimeoutMs: spec.Timeout.Milliseconds()}
}
