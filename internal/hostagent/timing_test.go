package hostagent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/timing"
)

// TestExecTimings: a command's start in a long-lived sandbox names its phases in the
// request's timings (the command runs on past the request's context): the read that meters
// it before it starts (stats), the guest agent's start of its process (agent), and, when it
// ends, the read after it.
func TestExecTimings(t *testing.T) {
	ctx := t.Context()
	h, _ := newHost(t)
	sb := ids.New(ids.Sandbox)
	if _, err := h.Create(ctx, hostagent.CreateRequest{ID: sb, Limits: runtime.Limits{MemoryMiB: 256, Pids: 64}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy(context.Background(), sb) })

	rctx, tm := timing.New(ctx)
	cmd := ids.New(ids.Command)
	if err := h.Exec(rctx, hostagent.ExecRequest{SandboxID: sb, CommandID: cmd, Argv: []string{"true"}, Timeout: time.Minute,
		HeadBytes: 1 << 10, TailBytes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
	if h := tm.Header(); strings.Count(h, "stats;dur=") != 1 || strings.Count(h, "agent;dur=") != 1 {
		t.Errorf("phases once started: %q, want stats then agent", h)
	}
	end, err := h.Wait(ctx, cmd)
	if err != nil || end.Status != store.CommandSucceeded {
		t.Fatalf("wait: %+v %v", end, err)
	}
	if h := tm.Header(); strings.Count(h, "stats;dur=") != 2 {
		t.Errorf("phases once ended: %q, want the second stats read too", h)
	}
}
