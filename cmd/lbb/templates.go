package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func templatesCreate(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	file := fs.String("file", "", "the code (default: none)")
	base := fs.String("base", "", "lbb/python (default), lbb/node or lbb/shell")
	isolation := fs.String("isolation", "", "isolation its runs and sandboxes default to: ns or gvisor (default: the server's)")
	config := fs.String("config", "", "default config, a JSON object")
	limits := limitsFlags(fs, false)
	timeout := fs.Int64("timeout-ms", 0, "command timeout in ms")
	desc := fs.String("description", "", "what the template does")
	ef := newEgressFlags(fs)
	name, err := oneArg(fs, args, "NAME")
	if err != nil {
		return err
	}
	p := lbb.TemplateParams{Name: name, Base: *base, Isolation: *isolation, TimeoutMs: *timeout, Description: *desc, Limits: limits()}
	if *file != "" {
		if p.Code, err = readCode(*file, &p.Base); err != nil {
			return err
		}
	}
	if p.Config, err = jsonFlag("config", *config); err != nil {
		return err
	}
	if p.Egress, err = ef.egress(); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	t, err := c.Sandboxes.Templates.Create(ctx, p)
	return answer(cf, t, err, func(t *lbb.Template) {
		if t.Existing {
			fmt.Printf("unchanged: %s version %d already holds this (%s); no new version\n", t.Name, t.Version, t.ID)
			return
		}
		fmt.Printf("saved %s version %d (%s)\n", t.Name, t.Version, t.ID)
	})
}

func templatesList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	var l *lbb.TemplateList // the last page, for the bases
	all, err := allPages(func(cursor string) ([]lbb.Template, string, error) {
		if l, err = c.Sandboxes.Templates.List(ctx, lbb.ListParams{Cursor: cursor, Limit: 500}); err != nil {
			return nil, "", err
		}
		return l.Data, l.NextCursor, nil
	})
	if err != nil {
		return err
	}
	if cf.json {
		l.Data, l.NextCursor = all, ""
		return printJSON(l)
	}
	w := table("BASE", "LANGUAGE", "IMAGE", "VERSIONS")
	for _, b := range l.Bases {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", b.Name, b.Language, b.Image, versionsLine(b.Versions))
	}
	w.Flush()
	if len(all) == 0 {
		fmt.Println("\nno templates yet: lbb templates create NAME --file FILE")
		return nil
	}
	fmt.Println()
	w = table("TEMPLATE", "NEWEST", "BASE", "ID", "SAVED")
	for _, t := range all {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", t.Name, t.Version, t.Base, t.ID, when(&t.CreatedAt))
	}
	return w.Flush()
}

func templatesShow(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	name, err := oneArg(fs, args, "NAME[@N]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if strings.HasPrefix(name, "lbb/") {
		b, err := c.Sandboxes.Templates.Base(ctx, name)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(b)
		}
		fmt.Printf("%s (base, %s) on image %s\n%s\n", b.Name, b.Language, b.Image, versionsLine(b.Versions))
		if len(b.Missing) > 0 {
			fmt.Printf("missing: %s\n", strings.Join(b.Missing, ", "))
		}
		return nil
	}
	t, err := c.Sandboxes.Templates.Get(ctx, name)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(t)
	}
	fmt.Printf("%s version %d (%s) on %s, saved %s\n", t.Name, t.Version, t.ID, t.Base, when(&t.CreatedAt))
	if t.Limits != (lbb.Limits{}) {
		fmt.Printf("limits: %+v\n", t.Limits)
	}
	if t.TimeoutMs > 0 {
		fmt.Printf("timeout: %d ms\n", t.TimeoutMs)
	}
	if len(t.Config) > 0 {
		fmt.Printf("config: %s\n", t.Config)
	}
	fmt.Printf("versions:")
	for _, v := range t.Versions {
		fmt.Printf(" %d", v.Version)
	}
	fmt.Printf("\n\n%s\n", t.Code)
	return nil
}

func versionsLine(v map[string]string) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + v[k]
	}
	return strings.Join(parts, ", ")
}
