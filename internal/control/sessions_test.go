package control_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// TestSessionsConcurrent: calls of one session at once make one sandbox; the others answer it
// (200), never a second sandbox. Calls that
// race a stop of it answer it resumed or busy. A session's stop on a driver without disks
// records no archive.
func TestSessionsConcurrent(t *testing.T) {
	e := setup3(t, nil)
	type answer struct {
		outcome idempotency.Outcome
		sb      store.Sandbox
		err     error
	}
	open := func(n int) []answer {
		out := make([]answer, n)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() {
				resp, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{Session: "s-1", Size: "standard-1"}, "", "")
				out[i] = answer{outcome: resp.Outcome, err: err}
				if err == nil {
					out[i].err = json.Unmarshal(resp.Body, &out[i].sb)
				}
			})
		}
		wg.Wait()
		return out
	}
	var id string
	createdN := 0
	answers := open(6)
	for _, a := range answers {
		if a.err == nil && a.outcome == idempotency.Created {
			createdN++
			id = a.sb.ID
		}
	}
	if createdN != 1 {
		t.Fatalf("%d calls created the session's sandbox, want 1: %+v", createdN, answers)
	}
	// In one process the calls take turns: the others find it running.
	for i, a := range answers {
		if a.err != nil || a.sb.ID != id || a.sb.Session != "s-1" || a.sb.Size != "standard-1" || a.sb.Status != store.SandboxRunning {
			t.Fatalf("call %d: %d %+v %v", i, a.outcome, a.sb, a.err)
		}
	}
	if page, _, err := e.st.ListSandboxes(ctx, "main", store.SandboxFilter{}, store.Page{}); err != nil || len(page) != 1 {
		t.Fatalf("sandboxes: %d %v", len(page), err)
	}

	// Calls racing a stop answer the sandbox running again, or busy.
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := e.svc.StopSandbox(ctx, "main", id); err != nil && errdefs.CodeOf(err) != errdefs.CodeSessionBusy {
			t.Errorf("stop: %v", err)
		}
	})
	for i, a := range open(4) {
		if a.err != nil && errdefs.CodeOf(a.err) != errdefs.CodeSessionBusy || a.err == nil && (a.sb.ID != id || a.sb.Status != store.SandboxRunning) {
			t.Errorf("call %d racing a stop: %d %+v %v", i, a.outcome, a.sb, a.err)
		}
	}
	wg.Wait()
	sb, err := e.svc.StopSandbox(ctx, "main", id)
	if err != nil || sb.Status != store.SandboxStopped || sb.Workspace != nil {
		t.Fatalf("stop on a driver without disks: %+v %v", sb, err)
	}
	if a := open(1)[0]; a.err != nil || a.outcome != idempotency.Done || a.sb.Status != store.SandboxRunning {
		t.Fatalf("resume by session: %+v", a)
	}
	if _, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{Session: "s-1", Size: "large"}, "", ""); errdefs.CodeOf(err) != errdefs.CodeSessionMismatch {
		t.Fatalf("another size: %v", err)
	}
	if _, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{Session: "s 1"}, "", ""); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("an invalid name: %v", err)
	}
}
