package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Budgets and the usage ledger. An admission is one conditional UPDATE, so that two calls
// cannot both take a budget's last run.

// within is the condition of a budget with room left; its columns are named by the caller.
func within(maxRuns, runs, maxCPU, cpu, maxMem, mem string) string {
	return fmt.Sprintf(`(%[1]s = 0 OR %[2]s < %[1]s) AND (%[3]s = 0 OR %[4]s < %[3]s) AND (%[5]s = 0 OR %[6]s < %[5]s)`,
		maxRuns, runs, maxCPU, cpu, maxMem, mem)
}

func (q queries) ChargeKeyBudget(ctx context.Context, id string) (bool, error) {
	res, err := q.exec(ctx, `UPDATE api_keys SET runs = runs + 1 WHERE id = ? AND `+
		within("max_runs", "runs", "budget_vcpu_ms", "used_vcpu_ms", "budget_gib_ms", "used_gib_ms"), id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (q queries) AddKeyUsage(ctx context.Context, id string, vcpuMs, gibMs float64) error {
	_, err := q.exec(ctx, `UPDATE api_keys SET used_vcpu_ms = used_vcpu_ms + ?, used_gib_ms = used_gib_ms + ? WHERE id = ?`,
		vcpuMs, gibMs, id)
	return err
}

func (q queries) PutWorkflowBudget(ctx context.Context, b store.WorkflowBudget) error {
	res, err := q.exec(ctx, `UPDATE budgets SET max_runs = ?, max_vcpu_ms = ?, max_gib_ms = ?, updated_at = ?
		WHERE graph = ? AND workflow = ? AND run = ?`,
		b.Budget.Runs, b.Budget.VCPUMs, b.Budget.GiBMs, ms(b.UpdatedAt), b.Graph, b.Workflow, b.Run)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	_, err = q.exec(ctx, `INSERT INTO budgets (graph, workflow, run, max_runs, max_vcpu_ms, max_gib_ms, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		b.Graph, b.Workflow, b.Run, b.Budget.Runs, b.Budget.VCPUMs, b.Budget.GiBMs, ms(b.CreatedAt), ms(b.UpdatedAt))
	return err
}

func (q queries) GetWorkflowBudget(ctx context.Context, graph, workflow, run string) (store.WorkflowBudget, error) {
	b := store.WorkflowBudget{Graph: graph, Workflow: workflow, Run: run}
	var created, updated int64
	err := q.queryRow(ctx, `SELECT max_runs, max_vcpu_ms, max_gib_ms, runs, vcpu_ms, gib_ms, created_at, updated_at
		FROM budgets WHERE graph = ? AND workflow = ? AND run = ?`, graph, workflow, run).
		Scan(&b.Budget.Runs, &b.Budget.VCPUMs, &b.Budget.GiBMs, &b.Used.Runs, &b.Used.VCPUMs, &b.Used.GiBMs, &created, &updated)
	b.CreatedAt, b.UpdatedAt = fromMs(created), fromMs(updated)
	b.Left = b.Budget.Left(b.Used)
	return b, notFound(err, "no budget for run %s of workflow %s", run, workflow)
}

func (q queries) ChargeWorkflowRun(ctx context.Context, graph, workflow, run string) (bool, error) {
	res, err := q.exec(ctx, `UPDATE budgets SET runs = runs + 1 WHERE graph = ? AND workflow = ? AND run = ? AND `+
		within("max_runs", "runs", "max_vcpu_ms", "vcpu_ms", "max_gib_ms", "gib_ms"), graph, workflow, run)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return n > 0, err
	}
	var one int
	err = q.queryRow(ctx, `SELECT 1 FROM budgets WHERE graph = ? AND workflow = ? AND run = ?`, graph, workflow, run).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil // no budget: nothing to count against
	}
	return false, err
}

func (q queries) AddWorkflowUsage(ctx context.Context, graph, workflow, run string, vcpuMs, gibMs float64) error {
	_, err := q.exec(ctx, `UPDATE budgets SET vcpu_ms = vcpu_ms + ?, gib_ms = gib_ms + ? WHERE graph = ? AND workflow = ? AND run = ?`,
		vcpuMs, gibMs, graph, workflow, run)
	return err
}

func (q queries) AddUsage(ctx context.Context, e store.UsageEntry) error {
	_, err := q.exec(ctx, `INSERT INTO usage_ledger (command_id, graph, sandbox_id, key_id, grant_id, workflow, run, template, at,
		vcpu_ms, gib_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.CommandID, e.Graph, e.SandboxID, nullStr(e.Key), nullStr(e.Grant), nullStr(e.Workflow), nullStr(e.Run),
		nullStr(e.Template), ms(e.At), e.VCPUMs, e.GiBMs)
	return err
}

func (q queries) SumUsage(ctx context.Context, uq store.UsageQuery) ([]store.UsageSum, error) {
	to := uq.To
	if to.IsZero() {
		to = time.Unix(1<<40, 0)
	}
	rows, err := q.query(ctx, `SELECT key_id, template, workflow, at, vcpu_ms, gib_ms FROM usage_ledger
		WHERE graph = ? AND at >= ? AND at < ?`, uq.Graph, ms(uq.From), ms(to))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	// Grouped here, not in SQL: a day is a function of the time whose spelling differs
	// between databases.
	sums := map[string]*store.UsageSum{}
	var order []string
	for rows.Next() {
		var key, tpl, wf sql.NullString
		var at int64
		var cpu, mem float64
		if err := rows.Scan(&key, &tpl, &wf, &at, &cpu, &mem); err != nil {
			return nil, err
		}
		var g string
		switch uq.GroupBy {
		case "key":
			g = key.String
		case "template":
			g = tpl.String
		case "workflow":
			g = wf.String
		case "day":
			g = fromMs(at).Format(time.DateOnly)
		}
		s := sums[g]
		if s == nil {
			s = &store.UsageSum{Group: g}
			sums[g] = s
			order = append(order, g)
		}
		s.Commands++
		s.VCPUMs += cpu
		s.GiBMs += mem
	}
	slices.Sort(order)
	out := make([]store.UsageSum, 0, len(order))
	for _, g := range order {
		out = append(out, *sums[g])
	}
	return out, rows.Err()
}

func (q queries) KeyUsage(ctx context.Context, id string, since time.Time) (store.UsageSum, error) {
	var s store.UsageSum
	err := q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(vcpu_ms), 0), COALESCE(SUM(gib_ms), 0) FROM usage_ledger
		WHERE (key_id = ? OR key_id IN (SELECT id FROM api_keys WHERE parent = ?)) AND at >= ?`, id, id, ms(since)).Scan(&s.Commands, &s.VCPUMs, &s.GiBMs)
	return s, err
}

func (q queries) UncountKeyRun(ctx context.Context, id string) error {
	_, err := q.exec(ctx, `UPDATE api_keys SET runs = runs - 1 WHERE id = ? AND runs > 0`, id)
	return err
}

func (q queries) UncountWorkflowRun(ctx context.Context, graph, workflow, run string) error {
	_, err := q.exec(ctx, `UPDATE budgets SET runs = runs - 1 WHERE graph = ? AND workflow = ? AND run = ? AND runs > 0`, graph, workflow, run)
	return err
}
