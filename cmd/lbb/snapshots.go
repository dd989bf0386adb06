package main

import (
	"context"
	"flag"
	"fmt"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// sandboxSnapshots serves lbb sandbox snapshot|fork|snapshots.
func sandboxSnapshots(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, sub string, args []string) error {
	var labels, env multiFlag
	fs.Var(&labels, "label", "KEY=VALUE metadata (repeatable)")
	var snapshot, del, key *string
	var expires *int64
	var limit *int
	switch sub {
	case "fork":
		snapshot = fs.String("snapshot", "", "the snapshot (of ID) to start from; default: a fresh one of the running sandbox")
		expires = fs.Int64("expires", 0, "seconds until the fork ends (default and cap: the server's)")
		key = fs.String("idempotency-key", "", "a retry with the same key answers the same fork")
		fs.Var(&env, "env", "NAME=VALUE given to the fork's commands (repeatable); values are masked in output")
	case "snapshots":
		limit = fs.Int("limit", 20, "how many")
		del = fs.String("delete", "", "delete this snapshot (snp_…) instead of listing")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	md, err := pairs("--label", labels)
	if err != nil {
		return err
	}
	if del != nil && *del != "" {
		if len(pos) != 0 {
			return exitError{2, "sandbox snapshots --delete SNP takes no sandbox ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		snap, err := c.DeleteSnapshot(ctx, *del)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(snap)
		}
		fmt.Println("deleted", snap.ID)
		return nil
	}
	if len(pos) != 1 {
		return exitError{2, fmt.Sprintf("sandbox %s takes one sandbox ID", sub)}
	}
	id := pos[0]
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch sub {
	case "snapshot":
		snap, err := c.Sandboxes.Snapshot(ctx, id, lbb.SnapshotRequest{Metadata: md})
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(snap)
		}
		fmt.Println(snap.ID)
		return nil
	case "fork":
		p := lbb.ForkRequest{Snapshot: *snapshot, Metadata: md, ExpiresInSeconds: *expires, IdempotencyKey: *key}
		if p.Env, err = pairs("--env", env); err != nil {
			return err
		}
		sb, err := c.Sandboxes.Fork(ctx, id, p)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(sb)
		}
		fmt.Println(sb.ID)
		return nil
	}
	l, err := c.Sandboxes.Snapshots(ctx, id, lbb.ListParams{Limit: *limit})
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(l)
	}
	w := table("SNAPSHOT", "ISOLATION", "MEMORY", "SIZE", "TOOK", "CREATED", "LABELS")
	for _, s := range l.Snapshots {
		fmt.Fprintf(w, "%s\t%s\t%t\t%.1f MiB\t%.0f ms\t%s\t%s\n", s.ID, s.Isolation, s.Memory, float64(s.SizeBytes)/(1<<20), s.DurationMs,
			when(&s.CreatedAt), orDash(labelString(s.Metadata)))
	}
	return w.Flush()
}
