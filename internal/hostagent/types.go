package hostagent

import (
	"context"
	"io"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// execution is one process or run in a started sandbox.
type execution struct {
	run     *agent.RunRequest
	exec    *agent.ExecRequest
	stdin   io.Reader
	timeout time.Duration
	limits  runtime.Limits
	// killed reports whether the caller signalled the command (its end is then killed).
	killed func() bool
	// started is called once the agent has started the process (or said it cannot).
	started func()
	// hold, when not nil, takes every byte of the output too, for the command's starter.
	hold *output.Hold
	// egress is the sandbox's, whose share the command's end says (nil: none).
	egress *egress.Sandbox
	// backstops is the set of the sandbox's backstop deadlines, held while it is paused
	// (nil: a deadline of its own).
	backstops *agent.Deadlines
	// reattach, when set, answers the guest agent the stream moved to after the channel
	// broke (and the stdin to give it), or nil: see Local.moveStream.
	reattach func(ctx context.Context) (*agent.Client, io.Reader)
	// attachTo, when set, starts by attaching to the stream of this detached process (a
	// fork's copy of its source's command) from now on, instead of starting a process.
	attachTo string
	// timings, when not nil, are the request's that started the command (Exec): its start's
	// phases (stats, agent) go to that request's Server-Timing, whose context the command
	// outlives.
	timings *timing.Timings
	// kernel, when set, is a process the warm pool started: its stream is taken on
	// instead of starting one.
	kernel *pool.Running
}

// procID is the process's id in the guest agent.
func (e execution) procID() string {
	switch {
	case e.kernel != nil:
		return e.kernel.ID
	case e.attachTo != "":
		return e.attachTo
	case e.exec != nil:
		return e.exec.ID
	case e.run != nil:
		return e.run.ID
	}
	return ""
}

// outcome is how an execution ended: the command's end, the infrastructure failure folded
// into it, and the sandbox's CPU time at the end.
type outcome struct {
	CommandEnd
	err      error
	cpuNanos uint64
	// cmdCPUNanos is the CPU time the sandbox used while the command ran.
	cmdCPUNanos uint64
}

func (o *outcome) fail(status string, err error) outcome {
	o.Status, o.err, o.Error = status, err, err.Error()
	return *o
}
