package sdkgo_test

import (
	"context"
	"errors"
	"testing"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
	"github.com/littlebigbrain/lbb/sdk/go/step"
)

// TestGrantsBudgetsUsage: the Go SDK mints a grant for a step, whose call carries the
// step's origin and key; a workflow run's budget refuses the next run with 402
// budget_exceeded; usage sums the commands; a revoked grant answers grant_revoked.
func TestGrantsBudgetsUsage(t *testing.T) {
	c := newLevel3Client(t)
	ctx := context.Background()
	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Budgets.Put(ctx, "wf", "r1", lbb.Budget{Runs: 1}); err != nil {
		t.Fatal(err)
	}
	s := step.Step{Workflow: "wf", Run: "r1", ID: "one", Attempt: 1, Budget: &lbb.Budget{Runs: 5}}
	cmd, err := step.Exec(ctx, c, s, sb.ID, lbb.ExecParams{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.IdempotencyKey != s.Key() || cmd.Origin.Workflow != "wf" || cmd.Origin.Step != "one" || cmd.Origin.Grant == "" || cmd.Usage.GiBMs < 0 {
		t.Fatalf("the step's command: %+v", cmd)
	}
	// The same step again (a retry): the same record, nothing new counted.
	again, err := step.Exec(ctx, c, step.Step{Workflow: "wf", Run: "r1", ID: "one", Attempt: 2}, sb.ID, lbb.ExecParams{Argv: []string{"true"}})
	if err != nil || again.ID != cmd.ID {
		t.Fatalf("a retry of the step: %v, %v", again, err)
	}
	_, err = step.Exec(ctx, c, step.Step{Workflow: "wf", Run: "r1", ID: "two"}, sb.ID, lbb.ExecParams{Argv: []string{"true"}})
	var e *lbb.Error
	if !errors.As(err, &e) || e.Code != "budget_exceeded" {
		t.Fatalf("a step past the workflow's budget: %v", err)
	}
	b, err := c.Budgets.Get(ctx, "wf", "r1")
	if err != nil || b.Used.Runs != 1 || b.Left.Runs != 0 {
		t.Fatalf("the budget: %+v %v", b, err)
	}
	u, err := c.Usage(ctx, lbb.UsageParams{GroupBy: "workflow"})
	if err != nil || u.Total.Commands != 1 || len(u.Groups) != 1 || u.Groups[0].Group != "wf" {
		t.Fatalf("usage: %+v %v", u, err)
	}
	gc, g, err := step.Step{Workflow: "wf", Run: "r2", ID: "x"}.Grant(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Grants.Get(ctx, g.ID); err != nil || got.Token != "" || got.Origin.Run != "r2" {
		t.Fatalf("the grant's record: %+v %v", got, err)
	}
	if _, err := c.Grants.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	_, err = gc.Sandboxes.Get(ctx, sb.ID)
	if !errors.As(err, &e) || e.Code != "grant_revoked" {
		t.Fatalf("a revoked grant: %v", err)
	}
}
