package storetest

import (
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// testBudgets: a grant's and a workflow run's budgets admit runs up to their limits in one
// conditional update each, a run with no budget is admitted, usage adds up, and the usage
// ledger sums by group and by key (with the grants a key minted).
func testBudgets(t *testing.T, s store.Store) {
	at := now()
	must(t, s.CreateKey(ctx, store.Key{ID: "key_w", Name: "w", Hash: "hw", Prefix: "p", Graphs: []string{"main"}, CreatedAt: at}))
	must(t, s.CreateKey(ctx, store.Key{ID: "key_g", Name: "g", Hash: "hg", Prefix: "p", Graphs: []string{"main"}, CreatedAt: at,
		Parent: "key_w", Kind: store.KindGrant, Origin: &store.Origin{Workflow: "wf", Run: "r1", Step: "s", Attempt: "1"},
		MaxRuns: 2, BudgetVCPUMs: 100, SpendCap: &store.SpendCap{GiBMs: 5, Period: store.PeriodDay}}))
	for i, want := range []bool{true, true, false} {
		ok, err := s.ChargeKeyBudget(ctx, "key_g")
		must(t, err)
		if ok != want {
			t.Fatalf("grant run %d: admitted %v, want %v", i+1, ok, want)
		}
	}
	k, err := s.GetKey(ctx, "key_g")
	must(t, err)
	if k.Runs != 2 || k.Kind != store.KindGrant || k.Origin == nil || k.Origin.Attempt != "1" || k.SpendCap == nil || k.SpendCap.GiBMs != 5 {
		t.Fatalf("grant: %+v", k)
	}

	if ok, err := s.ChargeWorkflowRun(ctx, "main", "wf", "none"); err != nil || !ok {
		t.Fatalf("a run without a budget: %v %v", ok, err)
	}
	must(t, s.PutWorkflowBudget(ctx, store.WorkflowBudget{Graph: "main", Workflow: "wf", Run: "r1", Budget: store.Budget{VCPUMs: 10}, CreatedAt: at, UpdatedAt: at}))
	if ok, err := s.ChargeWorkflowRun(ctx, "main", "wf", "r1"); err != nil || !ok {
		t.Fatalf("the first run: %v %v", ok, err)
	}
	// A run given back (it ran nothing) is not counted.
	must(t, s.UncountWorkflowRun(ctx, "main", "wf", "r1"))
	if ok, err := s.ChargeWorkflowRun(ctx, "main", "wf", "r1"); err != nil || !ok {
		t.Fatalf("the first run again: %v %v", ok, err)
	}
	must(t, s.AddWorkflowUsage(ctx, "main", "wf", "r1", 12, 3))
	if ok, err := s.ChargeWorkflowRun(ctx, "main", "wf", "r1"); err != nil || ok {
		t.Fatalf("a run past the budget's CPU time: %v %v", ok, err)
	}
	// Raising the limit keeps what was used.
	must(t, s.PutWorkflowBudget(ctx, store.WorkflowBudget{Graph: "main", Workflow: "wf", Run: "r1", Budget: store.Budget{VCPUMs: 20}, CreatedAt: at, UpdatedAt: at}))
	b, err := s.GetWorkflowBudget(ctx, "main", "wf", "r1")
	must(t, err)
	if b.Used.Runs != 1 || b.Used.VCPUMs != 12 || b.Left.VCPUMs == nil || *b.Left.VCPUMs != 8 || b.Left.Runs != nil {
		t.Fatalf("budget: %+v", b)
	}

	for _, e := range []store.UsageEntry{
		{CommandID: "cmd_1", Graph: "main", SandboxID: "sbx_1", Key: "key_w", Grant: "key_g", Workflow: "wf", At: at, VCPUMs: 10, GiBMs: 1},
		{CommandID: "cmd_2", Graph: "main", SandboxID: "sbx_1", Key: "key_w", Template: "t", At: at.Add(-48 * time.Hour), VCPUMs: 5, GiBMs: 2},
		{CommandID: "cmd_3", Graph: "other", SandboxID: "sbx_2", Key: "key_x", At: at, VCPUMs: 7, GiBMs: 7},
	} {
		must(t, s.AddUsage(ctx, e))
	}
	sums, err := s.SumUsage(ctx, store.UsageQuery{Graph: "main", GroupBy: "workflow"})
	must(t, err)
	if len(sums) != 2 || sums[0].Group != "" || sums[0].VCPUMs != 5 || sums[1].Group != "wf" || sums[1].Commands != 1 {
		t.Fatalf("by workflow: %+v", sums)
	}
	sums, err = s.SumUsage(ctx, store.UsageQuery{Graph: "main", From: at.Add(-time.Hour)})
	must(t, err)
	if len(sums) != 1 || sums[0].Commands != 1 || sums[0].GiBMs != 1 {
		t.Fatalf("the last hour: %+v", sums)
	}
	u, err := s.KeyUsage(ctx, "key_w", at.Add(-time.Hour))
	must(t, err)
	if u.Commands != 1 || u.VCPUMs != 10 {
		t.Fatalf("key_w's last hour: %+v", u)
	}
}
