package main

import (
	"context"
	"flag"
	"fmt"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// lbb sandbox snapshot|fork|snapshots.

func sandboxSnapshot(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	var labels multiFlag
	fs.Var(&labels, "label", "KEY=VALUE metadata (repeatable)")
	id, c, err := oneArgClient(fs, cf, args, "sandbox ID")
	if err != nil {
		return err
	}
	md, err := pairs("--label", labels)
	if err != nil {
		return err
	}
	snap, err := c.Sandboxes.Snapshot(ctx, id, lbb.SnapshotRequest{Metadata: md})
	return answer(cf, snap, err, func(s *lbb.Snapshot) { fmt.Println(s.ID) })
}

func sandboxFork(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	snapshot := fs.String("snapshot", "", "the snapshot (of ID) to start from; default: a fresh one of the running sandbox")
	sf := newSandboxFlags(fs, "fork")
	id, err := oneArg(fs, args, "sandbox ID")
	if err != nil {
		return err
	}
	p := lbb.ForkRequest{Snapshot: *snapshot, ExpiresInSeconds: *sf.expires, IdempotencyKey: *sf.key}
	if p.Env, p.Metadata, err = sf.maps(); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.Sandboxes.Fork(ctx, id, p)
	return answer(cf, sb, err, func(sb *lbb.Sandbox) { fmt.Println(sb.ID) })
}

func sandboxSnapshotList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	limit := fs.Int("limit", 20, "how many")
	del := fs.String("delete", "", "delete this snapshot (snp_…) instead of listing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *del != "" {
		if len(pos) != 0 {
			return exitError{2, "snapshots --delete SNP takes no sandbox ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		snap, err := c.DeleteSnapshot(ctx, *del)
		return answer(cf, snap, err, func(s *lbb.Snapshot) { fmt.Println("deleted", s.ID) })
	}
	if len(pos) != 1 {
		return exitError{2, fmt.Sprintf("takes one sandbox ID (%s --help says more)", fs.Name())}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	l, err := c.Sandboxes.Snapshots(ctx, pos[0], lbb.ListParams{Limit: *limit})
	if err != nil {
		return err
	}
	return printTable(cf, l, l.Snapshots, []string{"SNAPSHOT", "ISOLATION", "MEMORY", "SIZE", "TOOK", "CREATED", "LABELS"}, func(s lbb.Snapshot) string {
		return fmt.Sprintf("%s\t%s\t%t\t%.1f MiB\t%.0f ms\t%s\t%s", s.ID, s.Isolation, s.Memory, float64(s.SizeBytes)/(1<<20), s.DurationMs,
			when(&s.CreatedAt), orDash(labelString(s.Metadata)))
	})
}
