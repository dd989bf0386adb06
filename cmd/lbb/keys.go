package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func keysCreate(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	name := fs.String("name", "", "a name to tell the key by")
	var graphs, scopes multiFlag
	fs.Var(&graphs, "for-graph", "a graph the key may use (repeatable; default main; * for all)")
	fs.Var(&scopes, "scope", "a scope (repeatable)")
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	k, err := c.Keys.Create(ctx, lbb.KeyParams{Name: *name, Graphs: graphs, Scopes: scopes})
	return answer(cf, k, err, func(k *lbb.Key) {
		fmt.Printf("%s (%s) for graphs %s, scopes %s\n\n    %s\n\nThe secret is shown this once.\n",
			k.ID, k.Name, strings.Join(k.Graphs, ","), strings.Join(k.Scopes, ","), k.Secret)
	})
}

func keysList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	all, err := allPages(func(cursor string) ([]lbb.Key, string, error) {
		l, err := c.Keys.List(ctx, lbb.ListParams{Cursor: cursor, Limit: 500})
		if err != nil {
			return nil, "", err
		}
		return l.Data, l.NextCursor, nil
	})
	if err != nil {
		return err
	}
	return printTable(cf, all, all, []string{"ID", "NAME", "PREFIX", "GRAPHS", "SCOPES", "CREATED", "REVOKED"}, func(k lbb.Key) string {
		return fmt.Sprintf("%s\t%s\t%s…\t%s\t%s\t%s\t%s", k.ID, k.Name, k.Prefix, strings.Join(k.Graphs, ","),
			strings.Join(k.Scopes, ","), when(&k.CreatedAt), when(k.RevokedAt))
	})
}

func keysRevoke(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	id, c, err := oneArgClient(fs, cf, args, "key ID")
	if err != nil {
		return err
	}
	k, err := c.Keys.Revoke(ctx, id)
	return answer(cf, k, err, func(k *lbb.Key) { fmt.Printf("revoked %s (%s)\n", k.ID, k.Name) })
}
