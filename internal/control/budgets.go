package control

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Budgets bound what the runs of one workflow run, or of one grant, may use: runs started,
// CPU time (vcpu_ms) and reserved memory over time (gib_ms). A run that would start past one
// is refused, 402 budget_exceeded, before anything runs; a run (or a command) that runs
// under one is metered from its sandbox's cgroup every budgetTick while it runs and stopped,
// status budget_exceeded, once what it used reaches what its budgets had left when it
// started. Runs under one budget at the same time each may use what was left then, so
// together they overshoot by up to that much times their number; one alone overshoots by
// at most a tick of its usage. Every ended command's usage is added to its budgets and to
// the usage ledger (GET /v1/usage), and its record says what the budgets had left after it.

// budgetTick is how often a running command under a budget is metered.
const budgetTick = 100 * time.Millisecond

// errBudget is why a run under a budget was stopped.
var errBudget = errors.New("its budget ran out")

// WorkflowBudgetRequest is the body of PUT /v1/budgets/{workflow}/{run}.
type WorkflowBudgetRequest = store.Budget

// PutWorkflowBudget sets the budget of one run of a workflow; what its runs used so far
// stays counted.
func (s *Service) PutWorkflowBudget(ctx context.Context, graph, workflow, run string, b store.Budget) (store.WorkflowBudget, error) {
	if workflow == "" || run == "" {
		return store.WorkflowBudget{}, errdefs.InvalidArgument("a budget is for one run of a workflow: /v1/budgets/{workflow}/{run}")
	}
	if b.Runs < 0 || b.VCPUMs < 0 || b.GiBMs < 0 {
		return store.WorkflowBudget{}, errdefs.InvalidArgument("a budget's runs, vcpu_ms and gib_ms must not be negative")
	}
	now := s.now()
	if err := s.st.PutWorkflowBudget(ctx, store.WorkflowBudget{Graph: graph, Workflow: workflow, Run: run, Budget: b,
		CreatedAt: now, UpdatedAt: now}); err != nil {
		return store.WorkflowBudget{}, err
	}
	return s.st.GetWorkflowBudget(ctx, graph, workflow, run)
}

// GetWorkflowBudget answers a workflow run's budget, what its runs used and what is left.
func (s *Service) GetWorkflowBudget(ctx context.Context, graph, workflow, run string) (store.WorkflowBudget, error) {
	return s.st.GetWorkflowBudget(ctx, graph, workflow, run)
}

// allowance is what the budgets a run starts under had left when it started: the least of
// them in each unit, 0 for no limit.
type allowance struct {
	vcpuMs, gibMs float64
}

func (a allowance) limited() bool { return a.vcpuMs > 0 || a.gibMs > 0 }

func (a *allowance) narrow(r store.Remaining) {
	if r.VCPUMs != nil && (a.vcpuMs == 0 || *r.VCPUMs < a.vcpuMs) {
		a.vcpuMs = max(*r.VCPUMs, 1e-9)
	}
	if r.GiBMs != nil && (a.gibMs == 0 || *r.GiBMs < a.gibMs) {
		a.gibMs = max(*r.GiBMs, 1e-9)
	}
}

func (a allowance) spent(u store.Usage) bool {
	return a.vcpuMs > 0 && u.VCPUMs >= a.vcpuMs || a.gibMs > 0 && u.GiBMs >= a.gibMs
}

// chargeBudgets counts a run that is about to start against its grant's budget and its
// workflow run's, in one transaction, and answers what they have left; at a spent budget
// it answers 402 budget_exceeded and counts nothing.
func (s *Service) chargeBudgets(ctx context.Context, c Caller, o store.Origin) (allowance, error) {
	var a allowance
	if err := s.checkSpend(ctx, c.Key); err != nil {
		return a, err
	}
	grant := c.Key.Kind == store.KindGrant // its runs are counted, within its budget if it has one
	wf := o.Workflow != "" && o.Run != ""
	if !grant && !wf {
		return a, nil
	}
	err := s.st.WithTx(ctx, func(q store.Queries) error {
		if grant {
			ok, err := q.ChargeKeyBudget(ctx, c.Key.ID)
			if err != nil {
				return err
			}
			k, err := q.GetKey(ctx, c.Key.ID)
			if err != nil {
				return err
			}
			if !ok {
				return errdefs.New(errdefs.ClassPaymentRequired, errdefs.CodeBudgetExceeded,
					"grant %s has spent its budget (%s); nothing ran", k.ID, describeSpent(grantBudget(k), grantSpent(k)))
			}
			k.Runs-- // what was left before this run
			a.narrow(grantBudget(k).Left(grantSpent(k)))
		}
		if wf {
			ok, err := q.ChargeWorkflowRun(ctx, c.Graph, o.Workflow, o.Run)
			if err != nil {
				return err
			}
			b, err := q.GetWorkflowBudget(ctx, c.Graph, o.Workflow, o.Run)
			if errdefs.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
			if !ok {
				return errdefs.New(errdefs.ClassPaymentRequired, errdefs.CodeBudgetExceeded,
					"run %s of workflow %s has spent its budget (%s); nothing ran", o.Run, o.Workflow, describeSpent(b.Budget, b.Used))
			}
			a.narrow(b.Budget.Left(b.Used))
		}
		return nil
	})
	return a, err
}

// uncharge gives back the run chargeBudgets counted for a call that then ran nothing.
func (s *Service) uncharge(ctx context.Context, c Caller, o store.Origin) {
	ctx = context.WithoutCancel(ctx)
	if c.Key.Kind == store.KindGrant {
		if err := s.st.UncountKeyRun(ctx, c.Key.ID); err != nil {
			s.log.Error("giving back a grant's run", "key", c.Key.ID, "err", err)
		}
	}
	if o.Workflow != "" && o.Run != "" {
		if err := s.st.UncountWorkflowRun(ctx, c.Graph, o.Workflow, o.Run); err != nil {
			s.log.Error("giving back a workflow run's run", "workflow", o.Workflow, "run", o.Run, "err", err)
		}
	}
}

func describeSpent(b store.Budget, u store.Spent) string {
	var parts []string
	if b.Runs > 0 {
		parts = append(parts, fmtUnit("runs", float64(u.Runs), float64(b.Runs)))
	}
	if b.VCPUMs > 0 {
		parts = append(parts, fmtUnit("vcpu_ms", u.VCPUMs, b.VCPUMs))
	}
	if b.GiBMs > 0 {
		parts = append(parts, fmtUnit("gib_ms", u.GiBMs, b.GiBMs))
	}
	return joinComma(parts)
}

// watchBudget meters a running command's sandbox every budgetTick and calls stop once what
// the command used (the sandbox's usage since base, where base is what it had used when the
// command started; nil for a one-call run) reaches a. It answers a function that ends the watch and reports
// whether it stopped the command.
func (s *Service) watchBudget(sandboxID string, a allowance, base *store.Usage, stop func()) func() bool {
	if !a.limited() {
		return func() bool { return false }
	}
	done := make(chan struct{})
	var hit atomic.Bool
	oneCall := base == nil
	if oneCall {
		base = &store.Usage{}
	}
	based := false
	go func() {
		t := time.NewTicker(budgetTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			u, err := s.host.Usage(ctx, sandboxID)
			cancel()
			if err != nil {
				continue
			}
			if oneCall && !based {
				// A one-call run's sandbox used CPU to start (a pooled one before its claim):
				// the run is metered from the first reading on.
				if u.VCPUMs == 0 && u.GiBMs == 0 {
					continue
				}
				base.VCPUMs, based = u.VCPUMs, true
			}
			if a.spent(store.Usage{VCPUMs: u.VCPUMs - base.VCPUMs, GiBMs: u.GiBMs - base.GiBMs}) {
				hit.Store(true)
				stop()
				return
			}
		}
	}()
	return func() bool {
		close(done)
		return hit.Load()
	}
}

// meter records an ended command's usage: on its record, in the usage ledger, and against
// its grant's and workflow run's budgets, and writes on the record what they have left.
func (s *Service) meter(ctx context.Context, q store.Queries, cmd *store.Command, u store.Usage) error {
	u.Egress = nil
	if s.cfg.Prices.Set() {
		u.Cost = s.cfg.Prices.Cost(u.VCPUMs, u.GiBMs)
	}
	cmd.Usage = &u
	e := store.UsageEntry{CommandID: cmd.ID, Graph: cmd.Graph, SandboxID: cmd.SandboxID, Key: cmd.Origin.Key,
		Grant: cmd.Origin.Grant, Workflow: cmd.Origin.Workflow, Run: cmd.Origin.Run, At: s.now(), VCPUMs: u.VCPUMs, GiBMs: u.GiBMs}
	if cmd.Template != nil {
		e.Template = cmd.Template.Name
	}
	if cmd.FinishedAt != nil {
		e.At = *cmd.FinishedAt
	}
	if err := q.AddUsage(ctx, e); err != nil {
		if errdefs.IsConflict(err) {
			return nil // metered already
		}
		return err
	}
	s.metrics.vcpuMs.WithLabelValues(cmd.Graph).Add(u.VCPUMs)
	s.metrics.gibMs.WithLabelValues(cmd.Graph).Add(u.GiBMs)
	var left store.BudgetLeft
	if cmd.Origin.Grant != "" {
		if err := q.AddKeyUsage(ctx, cmd.Origin.Grant, u.VCPUMs, u.GiBMs); err != nil {
			return err
		}
		if k, err := q.GetKey(ctx, cmd.Origin.Grant); err == nil && grantBudget(k) != (store.Budget{}) {
			r := grantBudget(k).Left(grantSpent(k))
			left.Grant = &r
		}
	}
	if cmd.Origin.Workflow != "" && cmd.Origin.Run != "" {
		if err := q.AddWorkflowUsage(ctx, cmd.Graph, cmd.Origin.Workflow, cmd.Origin.Run, u.VCPUMs, u.GiBMs); err != nil {
			return err
		}
		if b, err := q.GetWorkflowBudget(ctx, cmd.Graph, cmd.Origin.Workflow, cmd.Origin.Run); err == nil {
			left.Workflow = &b.Left
		}
	}
	if left != (store.BudgetLeft{}) {
		cmd.Budget = &left
	}
	return nil
}

// UsageQuery is GET /v1/usage's: a graph, a window and a grouping.
type UsageQuery = store.UsageQuery

// UsageReport answers GET /v1/usage.
type UsageReport struct {
	Graph   string           `json:"graph"`
	From    *time.Time       `json:"from,omitempty"`
	To      *time.Time       `json:"to,omitempty"`
	GroupBy string           `json:"group_by,omitempty"`
	Total   store.UsageSum   `json:"total"`
	Groups  []store.UsageSum `json:"groups,omitempty"`
}

// Usage sums the usage ledger of a graph: every ended command's CPU time and reserved
// memory, over a window, grouped by key, template, workflow or day.
func (s *Service) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	switch q.GroupBy {
	case "", "key", "template", "workflow", "day":
	default:
		return UsageReport{}, errdefs.InvalidArgument("group_by %q: want key, template, workflow or day", q.GroupBy)
	}
	sums, err := s.st.SumUsage(ctx, q)
	if err != nil {
		return UsageReport{}, err
	}
	r := UsageReport{Graph: q.Graph, GroupBy: q.GroupBy}
	if !q.From.IsZero() {
		r.From = &q.From
	}
	if !q.To.IsZero() {
		r.To = &q.To
	}
	for i, g := range sums {
		if s.cfg.Prices.Set() {
			sums[i].Cost = s.cfg.Prices.Cost(g.VCPUMs, g.GiBMs)
		}
		r.Total.Commands += g.Commands
		r.Total.VCPUMs += g.VCPUMs
		r.Total.GiBMs += g.GiBMs
	}
	if s.cfg.Prices.Set() {
		r.Total.Cost = s.cfg.Prices.Cost(r.Total.VCPUMs, r.Total.GiBMs)
	}
	if q.GroupBy != "" {
		r.Groups = sums
	}
	return r, nil
}

func fmtUnit(name string, used, limit float64) string {
	return name + " " + strconvF(used) + " of " + strconvF(limit)
}

func strconvF(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func joinComma(parts []string) string { return strings.Join(parts, ", ") }

// GetSandbox answers a sandbox's record; a running one's usage is what its ended lives used
// and what this one has used so far, read from its cgroup now (the record itself is
// updated when the life ends).
func (s *Service) GetSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	sb, err := s.st.GetSandbox(ctx, graph, id)
	if err != nil || sb.Status != store.SandboxRunning || sb.OneCall || s.lookupHeld(id) == nil {
		return sb, err
	}
	if u, err := s.host.Usage(ctx, id); err == nil {
		addUsage(&sb, u)
	}
	return sb, nil
}
