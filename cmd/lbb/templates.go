package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
	var apt, pip, npm, run, copies multiFlag
	fs.Var(&apt, "apt", "a Debian package the template carries (repeat)")
	fs.Var(&pip, "pip", "a Python package the template carries, as pip names it (repeat)")
	fs.Var(&npm, "npm", "a global npm package the template carries (repeat)")
	fs.Var(&run, "run", "a shell step run as root after the packages, in order (repeat)")
	fs.Var(&copies, "copy", "LOCAL:/ABS/PATH: a local file uploaded as a File of the graph and copied to /ABS/PATH in the template's image (repeat)")
	noWait := fs.Bool("no-wait", false, "answer at once when the template builds an image; do not follow the build")
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
	if len(apt)+len(pip)+len(npm)+len(run)+len(copies) > 0 {
		img := &lbb.ImageRecipe{Apt: apt, Pip: pip, Npm: npm, Run: run}
		for _, cp := range copies {
			local, dst, ok := strings.Cut(cp, ":")
			if !ok || !strings.HasPrefix(dst, "/") {
				return fmt.Errorf("--copy %q: want LOCAL:/ABS/PATH", cp)
			}
			var f *lbb.File
			if err := upload(local, "upload "+filepath.Base(local), func(r io.Reader) (err error) {
				f, err = c.GraphFiles.Upload(ctx, filepath.Base(local), r)
				return err
			}); err != nil {
				return err
			}
			img.Files = append(img.Files, lbb.TemplateFile{File: f.ID, Path: dst})
		}
		p.Image = img
	}
	t, err := c.Sandboxes.Templates.Create(ctx, p)
	if err == nil && p.Image != nil && !cf.json && !*noWait {
		if t.Existing {
			fmt.Printf("unchanged: %s version %d already holds this (%s); no new version\n", t.Name, t.Version, t.ID)
		} else {
			fmt.Printf("saved %s version %d (%s); building its image (layer %.12s)…\n", t.Name, t.Version, t.ID, t.Layer)
		}
		return followBuild(ctx, c, fmt.Sprintf("%s@%d", t.Name, t.Version))
	}
	return answer(cf, t, err, func(t *lbb.Template) {
		if t.Existing {
			fmt.Printf("unchanged: %s version %d already holds this (%s); no new version\n", t.Name, t.Version, t.ID)
			return
		}
		fmt.Printf("saved %s version %d (%s)\n", t.Name, t.Version, t.ID)
	})
}

// followBuild prints a template version's build log as it grows, until the build ends; a
// failed build is an error naming its step.
func followBuild(ctx context.Context, c *lbb.Client, ref string) error {
	printed := 0
	for {
		b, err := c.Sandboxes.Templates.Build(ctx, ref)
		if err != nil {
			return err
		}
		if len(b.Log) > printed {
			fmt.Print(b.Log[printed:])
			printed = len(b.Log)
		}
		switch b.Status {
		case "ready":
			fmt.Printf("ready: %s (layer %.12s, %d bytes%s)\n", ref, b.Layer, b.LayerBytes, map[bool]string{true: ", already built by the same recipe"}[b.Cached])
			for _, k := range sortedKeys(b.Resolved) {
				fmt.Printf("  %s %s\n", k, b.Resolved[k])
			}
			return nil
		case "failed":
			return fmt.Errorf("template %s failed to build at step %s: %s", ref, b.Step, b.Error)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// templatesBuild shows (with --follow, follows) a template version's build.
func templatesBuild(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	follow := fs.Bool("follow", false, "follow the build until it ends")
	ref, err := oneArg(fs, args, "NAME[@N]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *follow && !cf.json {
		return followBuild(ctx, c, ref)
	}
	b, err := c.Sandboxes.Templates.Build(ctx, ref)
	return answer(cf, b, err, func(b *lbb.TemplateBuildView) {
		fmt.Printf("%s@%d: %s (layer %.12s)", b.Template, b.Version, b.Status, b.Layer)
		if b.Step != "" {
			fmt.Printf(" at step %s: %s", b.Step, b.Error)
		}
		fmt.Printf("\n")
		for _, k := range sortedKeys(b.Resolved) {
			fmt.Printf("  %s %s\n", k, b.Resolved[k])
		}
		fmt.Printf("\n%s", b.Log)
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
	keys := sortedKeys(v)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + v[k]
	}
	return strings.Join(parts, ", ")
}
