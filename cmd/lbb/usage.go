package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["usage"] = command{summary: "Metered usage of the graph's runs and commands (vcpu_ms, gib_ms), by key, template, workflow or day", run: runUsageCmd}
	commands["grant"] = command{summary: "Mint, list or revoke short-lived grants for workflow steps", run: runGrant}
	commands["budget"] = command{summary: "Set or read the budget of one run of a workflow", run: runBudget}
}

const usageUsage = `Usage: lbb usage [--from TIME] [--to TIME] [--by key|template|workflow|day] [--json]

Prints what the graph's ended runs and commands used (GET /v1/usage): CPU time (vcpu_ms, from
each sandbox's cgroup) and memory reserved over time (gib_ms), in all and by group. TIME is
RFC 3339 or a date (2026-12-01).
`

func runUsageCmd(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("usage", usageUsage)
	from := fs.String("from", "", "from this time or date")
	to := fs.String("to", "", "until this time or date (exclusive)")
	by := fs.String("by", "", "group by key, template, workflow or day")
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	p := lbb.UsageParams{GroupBy: *by}
	for _, f := range []struct {
		v   string
		dst *time.Time
	}{{*from, &p.From}, {*to, &p.To}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, f.v)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, f.v); err != nil {
				return fmt.Errorf("%q: want an RFC 3339 time or a date", f.v)
			}
		}
		*f.dst = t
	}
	u, err := c.Usage(ctx, p)
	return answer(cf, u, err, func(u *lbb.UsageReport) {
		w := table("GROUP", "COMMANDS", "VCPU_MS", "GIB_MS")
		for _, g := range u.Groups {
			name := g.Group
			if name == "" {
				name = "-"
			}
			fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\n", name, g.Commands, g.VcpuMs, g.GibMs)
		}
		fmt.Fprintf(w, "total\t%d\t%.0f\t%.0f\n", u.Total.Commands, u.Total.VcpuMs, u.Total.GibMs)
		w.Flush()
	})
}

const grantUsage = `Usage:
  lbb grant mint [--ttl 15m] [--workflow W --run R --step S --attempt N] [--runs N] [--vcpu-ms N] [--gib-ms N] [--scope S ...]
  lbb grant list
  lbb grant revoke ID

A grant (POST /v1/grants) is a short-lived key for one attempt of a workflow step: its origin
is stamped on every record made with it, its budget counts every run made with it (402
budget_exceeded at the limit), and it answers 401 grant_expired or grant_revoked after. mint
prints the token once; only its hash is kept.
`

// helpAsked prints usage when args ask for help (lbb exits 0).
func helpAsked(args []string, usage string) bool {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(cliOut, usage)
		return true
	}
	return false
}

func runGrant(ctx context.Context, args []string) error {
	if helpAsked(args, grantUsage) {
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New(grantUsage)
	}
	fs, cf := clientFlagSet("grant "+args[0], grantUsage)
	switch args[0] {
	case "mint":
		ttl := fs.Duration("ttl", 0, "lifetime (at most 1h; default 15m)")
		var o lbb.Origin
		fs.StringVar(&o.Workflow, "workflow", "", "the workflow")
		fs.StringVar(&o.Run, "run", "", "the workflow's run")
		fs.StringVar(&o.Step, "step", "", "the step")
		fs.StringVar(&o.Attempt, "attempt", "", "the attempt")
		var b lbb.Budget
		fs.Int64Var(&b.Runs, "runs", 0, "budget: runs")
		fs.Float64Var(&b.VcpuMs, "vcpu-ms", 0, "budget: CPU time in ms")
		fs.Float64Var(&b.GibMs, "gib-ms", 0, "budget: GiB·ms of memory")
		var scopes multiFlag
		fs.Var(&scopes, "scope", "a scope (repeat); default: the server's")
		c, err := noArgsClient(fs, cf, args[1:])
		if err != nil {
			return err
		}
		g, err := c.Grants.Mint(ctx, lbb.GrantRequest{TTLSeconds: int64(ttl.Seconds()), Origin: o, Budget: b, Scopes: scopes})
		return answer(cf, g, err, func(g *lbb.Grant) {
			fmt.Printf("grant %s, until %s\n%s\n", g.ID, g.ExpiresAt.Format(time.RFC3339), g.Token)
		})
	case "list":
		c, err := noArgsClient(fs, cf, args[1:])
		if err != nil {
			return err
		}
		l, err := c.Grants.List(ctx, lbb.ListParams{Limit: 100})
		return answer(cf, l, err, func(l *lbb.List[lbb.Grant]) {
			w := table("ID", "WORKFLOW", "RUN", "STEP", "ATTEMPT", "RUNS", "VCPU_MS", "EXPIRES", "REVOKED")
			for _, g := range l.Data {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%.0f\t%s\t%v\n", g.ID, g.Origin.Workflow, g.Origin.Run, g.Origin.Step,
					g.Origin.Attempt, g.Used.Runs, g.Used.VcpuMs, g.ExpiresAt.Format(time.RFC3339), g.RevokedAt != nil)
			}
			w.Flush()
		})
	case "revoke":
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
			return errors.New(grantUsage)
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		g, err := c.Grants.Revoke(ctx, fs.Arg(0))
		return answer(cf, g, err, func(g *lbb.Grant) { fmt.Printf("grant %s revoked\n", g.ID) })
	}
	return errors.New(grantUsage)
}

const budgetUsage = `Usage:
  lbb budget set WORKFLOW RUN [--runs N] [--vcpu-ms N] [--gib-ms N]
  lbb budget get WORKFLOW RUN

The budget of one run of a workflow (PUT /v1/budgets/{workflow}/{run}) counts every run made
with origin {workflow, run}: at the limit a call answers 402 budget_exceeded before anything
runs, and a running command whose budget runs out is stopped (status budget_exceeded).
`

func runBudget(ctx context.Context, args []string) error {
	if helpAsked(args, budgetUsage) {
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New(budgetUsage)
	}
	fs, cf := clientFlagSet("budget "+args[0], budgetUsage)
	var b lbb.Budget
	if args[0] == "set" {
		fs.Int64Var(&b.Runs, "runs", 0, "runs started")
		fs.Float64Var(&b.VcpuMs, "vcpu-ms", 0, "CPU time in ms")
		fs.Float64Var(&b.GibMs, "gib-ms", 0, "GiB·ms of memory")
	}
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 2 {
		return errors.New(budgetUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var wb *lbb.WorkflowBudget
	switch args[0] {
	case "set":
		wb, err = c.Budgets.Put(ctx, fs.Arg(0), fs.Arg(1), b)
	case "get":
		wb, err = c.Budgets.Get(ctx, fs.Arg(0), fs.Arg(1))
	default:
		return errors.New(budgetUsage)
	}
	return answer(cf, wb, err, func(wb *lbb.WorkflowBudget) {
		w := table("", "RUNS", "VCPU_MS", "GIB_MS")
		fmt.Fprintf(w, "budget\t%s\t%s\t%s\n", limit(float64(wb.Budget.Runs)), limit(wb.Budget.VcpuMs), limit(wb.Budget.GibMs))
		fmt.Fprintf(w, "used\t%d\t%.0f\t%.0f\n", wb.Used.Runs, wb.Used.VcpuMs, wb.Used.GibMs)
		w.Flush()
	})
}

func limit(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
