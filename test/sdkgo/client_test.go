package sdkgo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/littlebigbrain/lbb/internal/config"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func TestRun(t *testing.T) {
	c, r := newClient(t, nil)
	ctx := context.Background()
	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "def run(input, config):\n    return input", Input: []int{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	if err := run.Decode(&got); err != nil || len(got) != 3 || !run.OK || run.Replayed || run.IdempotencyKey == "" {
		t.Fatalf("%+v %v", run, err)
	}
	again, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "def run(input, config):\n    return input", Input: []int{1, 2, 3}, IdempotencyKey: run.IdempotencyKey})
	if err != nil || !again.Replayed || again.Command != run.Command || r.Total() != 1 {
		t.Fatalf("replay: %+v %v", again, err)
	}
	_, err = c.Sandboxes.Run(ctx, lbb.RunParams{Code: "other", IdempotencyKey: run.IdempotencyKey})
	if lbb.StatusOf(err) != 422 || lbb.CodeOf(err) != "idempotency_key_reused" {
		t.Fatalf("a reused key: %v", err)
	}
	cmd, err := c.Commands.Get(ctx, run.Command, 0)
	if err != nil || cmd.Status != lbb.StatusSucceeded || cmd.Sandbox != run.Sandbox {
		t.Fatalf("command: %+v %v", cmd, err)
	}
	sb, err := c.Sandboxes.Get(ctx, run.Sandbox)
	if err != nil || sb.Status != "destroyed" || sb.EndReason != "run_finished" {
		t.Fatalf("sandbox: %+v %v", sb, err)
	}
	_, err = c.Commands.Get(ctx, "cmd_01aaaaaaaaaaaaaaaaaaaaaaaa", 0)
	var e *lbb.Error
	if !lbb.IsNotFound(err) || !errors.As(err, &e) || e.RequestID == "" {
		t.Fatalf("a missing command: %v", err)
	}
	if _, err := c.WithGraph("nope").Commands.Get(ctx, run.Command, 0); !lbb.IsNotFound(err) {
		t.Fatalf("another graph: %v", err)
	}
}

// TestRunPastWait: the server answers 202 while the run goes on; Run asks again with the
// same key until it ends, and the code runs once.
func TestRunPastWait(t *testing.T) {
	c, r := newClient(t, nil)
	run, err := c.Sandboxes.Run(context.Background(), lbb.RunParams{Code: "sleep:600ms", Input: 5, WaitMs: 100})
	if err != nil || !run.OK || string(run.Result) != "5" || r.Total() != 1 {
		t.Fatalf("%+v %v runs=%d", run, err, r.Total())
	}
}

// TestRetryTooMany: a 429 (the host's run slots taken and no room to wait: too_many_runs)
// is retried with the same key.
func TestRetryTooMany(t *testing.T) {
	c, r := newClient(t, func(cfg *config.Config) { cfg.RunSlots, cfg.RunQueue = 1, 0 })
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "sleep:300ms"})
		first <- err
	}()
	<-r.Started()
	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "x", Input: 1})
	if err != nil || !run.OK {
		t.Fatalf("%+v %v", run, err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestTemplatesAndKeys(t *testing.T) {
	c, _ := newClient(t, nil)
	ctx := context.Background()
	for _, code := range []string{"x", "y", "y"} { // the last save is the newest again: no version of its own
		if _, err := c.Sandboxes.Templates.Create(ctx, lbb.TemplateParams{Name: "normalize", Code: code, Config: map[string]string{"unit": "cm"}}); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := c.Sandboxes.Templates.Get(ctx, "normalize")
	if err != nil || tpl.Version != 2 || len(tpl.Versions) != 2 {
		t.Fatalf("%+v %v", tpl, err)
	}
	l, err := c.Sandboxes.Templates.List(ctx, lbb.ListParams{})
	if err != nil || len(l.Data) != 1 || len(l.Bases) != 4 {
		t.Fatalf("%+v %v", l, err)
	}
	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{Template: "normalize@1", Input: 1})
	if err != nil || run.Template == nil || run.Template.Version != 1 {
		t.Fatalf("%+v %v", run, err)
	}
	k, err := c.Keys.Create(ctx, lbb.KeyParams{Name: "ci", Graphs: []string{"ci"}})
	if err != nil || k.Secret == "" {
		t.Fatalf("%+v %v", k, err)
	}
	keys, err := c.Keys.List(ctx, lbb.ListParams{})
	if err != nil || len(keys.Data) != 2 || keys.Data[0].Secret != "" {
		t.Fatalf("%+v %v", keys, err)
	}
	if _, err := c.Keys.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	audit, err := c.Audit.List(ctx, lbb.ListParams{})
	if err != nil || len(audit.Data) < 4 {
		t.Fatalf("%+v %v", audit, err)
	}
}
