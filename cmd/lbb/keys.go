package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["keys"] = command{summary: "Manage API keys (keys create|list|revoke; needs an admin key)", run: runKeys}
}

const keysUsage = `Usage:
  lbb keys create [--name N] [--graph G]... [--scope S]...   make a key; its secret is printed once
  lbb keys list                                              every key (never their secrets)
  lbb keys revoke ID                                         revoke a key at once
Keys talk to the server (admin scope). Graphs a new key names are created. Scopes:
sandboxes:read, sandboxes:write, sandboxes:delete, templates:write, files:read, files:write,
admin; the default is every scope but admin. Every subcommand takes --url, --api-key and --json.
`

func runKeys(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, keysUsage)
		return nil
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, keysUsage) }
	var cf clientFlags
	cf.register(fs)
	ctx := context.Background()
	switch args[0] {
	case "create":
		name := fs.String("name", "", "a name to tell the key by")
		var graphs, scopes multiFlag
		fs.Var(&graphs, "for-graph", "a graph the key may use (repeatable; default main; * for all)")
		fs.Var(&scopes, "scope", "a scope (repeatable)")
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		k, err := c.Keys.Create(ctx, lbb.KeyParams{Name: *name, Graphs: graphs, Scopes: scopes})
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(k)
		}
		fmt.Printf("%s (%s) for graphs %s, scopes %s\n\n    %s\n\nThe secret is shown this once.\n",
			k.ID, k.Name, strings.Join(k.Graphs, ","), strings.Join(k.Scopes, ","), k.Secret)
		return nil
	case "list":
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		var all []lbb.Key
		for cursor := ""; ; {
			l, err := c.Keys.List(ctx, lbb.ListParams{Cursor: cursor, Limit: 500})
			if err != nil {
				return err
			}
			all = append(all, l.Data...)
			if cursor = l.NextCursor; cursor == "" {
				break
			}
		}
		if cf.json {
			return printJSON(all)
		}
		w := table("ID", "NAME", "PREFIX", "GRAPHS", "SCOPES", "CREATED", "REVOKED")
		for _, k := range all {
			fmt.Fprintf(w, "%s\t%s\t%s…\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Prefix, strings.Join(k.Graphs, ","),
				strings.Join(k.Scopes, ","), when(&k.CreatedAt), when(k.RevokedAt))
		}
		return w.Flush()
	case "revoke":
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "keys revoke takes one ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		k, err := c.Keys.Revoke(ctx, pos[0])
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(k)
		}
		fmt.Printf("revoked %s (%s)\n", k.ID, k.Name)
		return nil
	}
	fs.Usage()
	return exitError{2, fmt.Sprintf("unknown subcommand %q", args[0])}
}
