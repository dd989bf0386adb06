// Package agenttest is what tests that drive a guest agent through agent.Client share:
// running a command or a run to its end and reading what it wrote.
package agenttest

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Wait waits for p to end and answers its stdout, stderr and Exit; a broken stream fails t.
func Wait(t testing.TB, p *agent.Process) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	var out, errb bytes.Buffer
	ex, err := p.Wait(&out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), ex
}

// Exec runs req to its end (stdin nil means none); a request the agent refuses fails t.
func Exec(ctx context.Context, t testing.TB, c *agent.Client, req agent.ExecRequest, stdin io.Reader) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	p, err := c.Exec(ctx, req, stdin)
	if err != nil {
		t.Fatal(err)
	}
	return Wait(t, p)
}

// Run calls req to its end; a request the agent refuses fails t.
func Run(ctx context.Context, t testing.TB, c *agent.Client, req agent.RunRequest) (stdout, stderr string, ex agent.Exit) {
	t.Helper()
	p, err := c.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return Wait(t, p)
}
