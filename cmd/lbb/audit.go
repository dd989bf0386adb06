package main

import (
	"context"
	"fmt"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["audit"] = command{summary: "The audit trail: every call that changed something, newest first (admin key)", run: runAudit}
}

const auditUsage = `Usage: lbb audit [--limit N] [--json]

Lists the graph's audit trail (GET /v1/audit), newest first: when, which key, which call,
what it changed and the answer's status. Needs an admin key.
`

func runAudit(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("audit", auditUsage)
	limit := fs.Int("limit", 20, "how many entries")
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	return printPage(ctx, cf, c.Audit.List, lbb.ListParams{Limit: *limit}, []string{"AT", "KEY", "CALL", "TARGET", "STATUS", "REQUEST"}, func(e lbb.AuditEntry) string {
		return fmt.Sprintf("%s\t%s\t%s %s\t%s\t%d\t%s", when(&e.At), e.Key, e.Method, e.Path, orDash(e.Target), e.Status, e.RequestID)
	})
}
