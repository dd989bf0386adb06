package main

import (
	"context"
	"fmt"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["quotas"] = command{summary: "The graph's quotas: what it holds (Files, snapshots, checkpoints, stopped disks, sandboxes) and the most it may", run: runQuotas}
}

const quotasUsage = `Usage: lbb quotas [--json]

Prints the graph's quotas (GET /v1/quotas): each one's usage and limit. A call that would go
past a count answers 429 quota_exceeded, past bytes 413 quota_bytes_exceeded; deleting what
the quota counts makes room (lbb files delete, lbb sandbox delete, lbb sandbox snapshots
--delete). A stopped sandbox's disk counts at its size limit. The server sets the limits
(lbb serve --quota-*, --max-sandboxes-per-graph, --max-running-per-graph).
`

func runQuotas(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("quotas", quotasUsage)
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	q, err := c.Quotas(ctx)
	return answer(cf, q, err, printQuotas)
}

func printQuotas(q *lbb.Quotas) {
	w := table("QUOTA", "USAGE", "LIMIT", "USED")
	qs := q.Quotas
	for _, r := range []struct {
		name string
		q    lbb.Quota
	}{
		{"running_sandboxes", qs.RunningSandboxes}, {"sandboxes", qs.Sandboxes},
		{"stopped_sandboxes", qs.StoppedSandboxes}, {"stopped_disk_bytes", qs.StoppedDiskBytes},
		{"checkpoints", qs.Checkpoints}, {"checkpoint_bytes", qs.CheckpointBytes},
		{"files", qs.Files}, {"file_bytes", qs.FileBytes},
		{"snapshots", qs.Snapshots}, {"snapshot_bytes", qs.SnapshotBytes},
	} {
		used := "-"
		if r.q.Limit > 0 {
			used = fmt.Sprintf("%.0f%%", 100*float64(r.q.Usage)/float64(r.q.Limit))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.name, quantity(r.q.Usage, r.q.Unit), quantity(r.q.Limit, r.q.Unit), used)
	}
	w.Flush()
	fmt.Printf("\ngraph %s; a File is at most %s, a run's result in its record at most %s (a larger one is kept as a File)\n",
		q.Graph, quantity(q.MaxFileBytes, "bytes"), quantity(q.MaxResultBytes, "bytes"))
}

// quantity prints n of unit ("count" or "bytes", in binary units).
func quantity(n int64, unit string) string {
	if unit != "bytes" {
		return fmt.Sprint(n)
	}
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
