package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["run"] = command{summary: "Run a file's run(input, config) in a sandbox and print the result", run: runRun}
}

const runUsage = `Usage: lbb run FILE [--input JSON] [--config JSON] [--json]
       lbb run --template NAME[@N] [--input JSON] [--config JSON] [--json]

Runs FILE's run(input, config) once in a sandbox of its own and prints the result as JSON.
The base follows the file's extension (.py lbb/python, .js/.mjs lbb/node, .sh lbb/shell)
unless --base says otherwise. Output the code printed goes to stderr. A run that raises
exits 1 with its error; --json prints the whole answer (record ids, status, output).
`

func runRun(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("run", runUsage)
	input := fs.String("input", "", "input, as JSON")
	config := fs.String("config", "", "config, as JSON (merged over a template's)")
	template := fs.String("template", "", "run a saved template (name, or name@N to pin a version)")
	base := fs.String("base", "", "lbb/python, lbb/node or lbb/shell")
	isolation := fs.String("isolation", "", "isolation to run on: ns or gvisor (default: the template's, else the server's)")
	key := fs.String("idempotency-key", "", "the call's Idempotency-Key (default: a fresh one)")
	timeout := fs.Int64("timeout-ms", 0, "command timeout in ms (default: the server's)")
	limits := limitsFlags(fs, false)
	ef := newEgressFlags(fs)
	var env multiFlag
	fs.Var(&env, "env", "NAME=VALUE passed to the code (repeatable); values are masked in output")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	p := lbb.RunParams{Template: *template, Base: *base, IdempotencyKey: *key, TimeoutMs: *timeout, Isolation: *isolation, Limits: limits()}
	switch {
	case len(pos) == 1 && *template == "":
		if p.Code, err = readCode(pos[0], &p.Base); err != nil {
			return err
		}
	case len(pos) == 0 && *template != "":
	default:
		return exitError{2, "takes one FILE, or --template (lbb run --help says more)"}
	}
	if p.Egress, err = ef.egress(); err != nil {
		return err
	}
	if p.Input, err = jsonFlag("input", *input); err != nil {
		return err
	}
	if p.Config, err = jsonFlag("config", *config); err != nil {
		return err
	}
	if p.Env, err = pairs("--env", env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	run, err := c.Sandboxes.Run(ctx, p)
	if err != nil {
		return err
	}
	if cf.json {
		if err := printJSON(run); err != nil {
			return err
		}
	} else {
		if s := run.Stdout.String(); s != "" {
			fmt.Fprint(os.Stderr, s)
		}
		if run.OK && run.ResultTruncated {
			if err := printResultFile(ctx, c, &run.RunResult); err != nil {
				return err
			}
		} else if run.OK {
			var v any
			if err := json.Unmarshal(run.Result, &v); err == nil {
				printJSON(v)
			} else {
				fmt.Println(string(run.Result))
			}
		} else if s := run.Stderr.String(); s != "" {
			fmt.Fprint(os.Stderr, s)
		}
	}
	if !run.OK {
		msg := fmt.Sprintf("run %s: %s", run.Command, run.Status)
		if run.Error != "" {
			msg += ": " + run.Error
		}
		return exitError{1, msg}
	}
	return nil
}

// printResultFile prints a result larger than its record keeps, from the File that holds it.
func printResultFile(ctx context.Context, c *lbb.Client, run *lbb.RunResult) error {
	if run.ResultFile == "" {
		return exitError{1, fmt.Sprintf("run %s: %s", run.Command, run.Error)}
	}
	fmt.Fprintf(os.Stderr, "the result (%d bytes) is kept as File %s (lbb files download %s)\n", run.ResultBytes, run.ResultFile, run.ResultFile)
	rc, err := c.GraphFiles.Content(ctx, run.ResultFile)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(os.Stdout, rc); err != nil {
		return err
	}
	fmt.Println()
	return nil
}

// readCode reads a file of code; an empty base becomes the one its extension implies.
func readCode(name string, base *string) (string, error) {
	b, err := os.ReadFile(name)
	if err == nil && *base == "" {
		*base = baseForFile(name)
	}
	return string(b), err
}

// limitsFlags registers --memory-mib and --cpus, and --disk-mib with disk; limits answers
// what they set, nil when none was given (the server's defaults).
func limitsFlags(fs *flag.FlagSet, disk bool) (limits func() *lbb.Limits) {
	var l lbb.Limits
	fs.Int64Var(&l.MemoryMiB, "memory-mib", 0, "memory limit in MiB")
	fs.Float64Var(&l.CPUs, "cpus", 0, "vCPUs")
	if disk {
		fs.Int64Var(&l.DiskMiB, "disk-mib", 0, "workspace disk in MiB")
	}
	return func() *lbb.Limits {
		if l == (lbb.Limits{}) {
			return nil
		}
		return &l
	}
}

func baseForFile(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".js", ".mjs", ".cjs":
		return "lbb/node"
	case ".sh", ".bash":
		return "lbb/shell"
	}
	return "lbb/python"
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
