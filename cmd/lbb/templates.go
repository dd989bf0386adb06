package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["templates"] = command{summary: "Save and read templates (templates create|list|show)", run: runTemplates}
}

const templatesUsage = `Usage:
  lbb templates create NAME [--file FILE] [--base B] [--config JSON] [--memory-mib N] [--timeout-ms N] [--isolation ns|gvisor]
                                               save a new version of NAME (each save is a new version)
  lbb templates list                           the graph's templates (newest versions) and the bases
  lbb templates show NAME[@N]                  one version (newest by default) and the history
Every subcommand takes --url, --api-key, --graph and --json.
`

func runTemplates(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, templatesUsage)
		return nil
	}
	fs := flag.NewFlagSet("templates "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, templatesUsage) }
	var cf clientFlags
	cf.register(fs)
	ctx := context.Background()
	switch args[0] {
	case "create":
		file := fs.String("file", "", "the code (default: none)")
		base := fs.String("base", "", "lbb/python (default), lbb/node or lbb/shell")
		isolation := fs.String("isolation", "", "isolation its runs and sandboxes default to: ns or gvisor (default: the server's)")
		config := fs.String("config", "", "default config, a JSON object")
		memory := fs.Int64("memory-mib", 0, "memory limit in MiB")
		cpus := fs.Float64("cpus", 0, "vCPUs")
		timeout := fs.Int64("timeout-ms", 0, "command timeout in ms")
		desc := fs.String("description", "", "what the template does")
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "templates create takes one NAME"}
		}
		p := lbb.TemplateParams{Name: pos[0], Base: *base, Isolation: *isolation, TimeoutMs: *timeout, Description: *desc}
		if *file != "" {
			b, err := os.ReadFile(*file)
			if err != nil {
				return err
			}
			p.Code = string(b)
			if p.Base == "" {
				p.Base = baseForFile(*file)
			}
		}
		if *config != "" {
			if !json.Valid([]byte(*config)) {
				return fmt.Errorf("--config is not valid JSON")
			}
			p.Config = json.RawMessage(*config)
		}
		if *memory != 0 || *cpus != 0 {
			p.Limits = &lbb.Limits{MemoryMiB: *memory, CPUs: *cpus}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		t, err := c.Sandboxes.Templates.Create(ctx, p)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(t)
		}
		fmt.Printf("saved %s version %d (%s)\n", t.Name, t.Version, t.ID)
		return nil
	case "list":
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		var all []lbb.Template
		var l *lbb.TemplateList
		for cursor := ""; ; {
			l, err = c.Sandboxes.Templates.List(ctx, lbb.ListParams{Cursor: cursor, Limit: 500})
			if err != nil {
				return err
			}
			all = append(all, l.Data...)
			if cursor = l.NextCursor; cursor == "" {
				break
			}
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
	case "show":
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "templates show takes one NAME[@N]"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		if strings.HasPrefix(pos[0], "lbb/") {
			b, err := c.Sandboxes.Templates.Base(ctx, pos[0])
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
		t, err := c.Sandboxes.Templates.Get(ctx, pos[0])
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
	fs.Usage()
	return exitError{2, fmt.Sprintf("unknown subcommand %q", args[0])}
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
