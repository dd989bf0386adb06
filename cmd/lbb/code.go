package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["code"] = command{summary: "Run a cell of code in a sandbox's code context (state stays between cells)", run: runCode}
}

const codeUsage = `Usage: lbb code SANDBOX (-c CODE | FILE | -) [--context CTX] [--language python]
       lbb code --new (-c CODE | FILE | -) [--language python] [--keep]

Runs a cell in a code context of SANDBOX (without --context, its default context of the
language, started on first use): variables, imports and functions stay from one cell to the
next, and the value of the last expression is printed, like a notebook's cell. What the cell
prints goes to stdout and stderr; images it shows (a matplotlib figure) are saved as files in
--images (default: the current directory), each named on stderr. A cell that raises prints its
traceback and exits 1; one interrupted at --timeout-ms exits 124. --new runs the cell in a
new sandbox, deleted after it unless --keep. --json prints the whole answer.
`

func runCode(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("code", codeUsage)
	src := fs.String("c", "", "the cell's code")
	cctx := fs.String("context", "", "the context (ctx_…); default the sandbox's default context of --language")
	language := fs.String("language", "", "python (the default), node or shell (bash)")
	timeout := fs.Int64("timeout-ms", 0, "interrupt the cell after this many ms (the context lives on)")
	images := fs.String("images", ".", "directory where images the cell shows are saved")
	newSandbox := fs.Bool("new", false, "run in a new sandbox")
	keep := fs.Bool("keep", false, "with --new: keep the sandbox (its id goes to stderr)")
	key := fs.String("idempotency-key", "", "the call's Idempotency-Key (default: a fresh one)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var sandbox, file string
	switch {
	case *newSandbox && len(pos) <= 1:
		if len(pos) == 1 {
			file = pos[0]
		}
	case !*newSandbox && (len(pos) == 1 || len(pos) == 2):
		sandbox = pos[0]
		if len(pos) == 2 {
			file = pos[1]
		}
	default:
		return exitError{2, "takes SANDBOX (or --new) and the code: -c CODE, FILE or - (lbb code --help says more)"}
	}
	code := *src
	switch {
	case code != "" && file != "":
		return exitError{2, "give -c CODE or FILE, not both"}
	case file == "-":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		code = string(b)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		code = string(b)
	}
	if strings.TrimSpace(code) == "" {
		return exitError{2, "no code: give -c CODE, FILE or - (stdin)"}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *newSandbox {
		sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{ExpiresInSeconds: 3600})
		if err != nil {
			return err
		}
		sandbox = sb.ID
		if *keep {
			fmt.Fprintf(os.Stderr, "sandbox %s\n", sb.ID)
		} else {
			defer func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				c.Sandboxes.Delete(dctx, sb.ID)
			}()
		}
	}
	r, err := c.Code.Run(ctx, sandbox, lbb.CellParams{Code: code, Context: *cctx, Language: *language, TimeoutMs: *timeout, IdempotencyKey: *key})
	if err != nil {
		return err
	}
	if cf.json {
		if err := printJSON(r); err != nil {
			return err
		}
	} else {
		fmt.Print(r.Stdout)
		fmt.Fprint(os.Stderr, r.Stderr)
		if err := printCodeOutputs(r, *images); err != nil {
			return err
		}
		if r.Error != nil {
			if len(r.Error.Traceback) > 0 {
				fmt.Fprintln(os.Stderr, strings.Join(r.Error.Traceback, "\n"))
			} else {
				fmt.Fprintf(os.Stderr, "%s: %s\n", r.Error.Name, r.Error.Value)
			}
		}
	}
	switch r.Status {
	case lbb.StatusSucceeded:
		return nil
	case lbb.StatusTimedOut:
		return exitError{124, fmt.Sprintf("cell %s: interrupted at its timeout", r.Command)}
	}
	return exitError{1, fmt.Sprintf("cell %s: %s", r.Command, r.Status)}
}

// printCodeOutputs prints a cell's text results and saves its images under dir.
func printCodeOutputs(r *lbb.CodeResult, dir string) error {
	n := 0
	for _, o := range r.Results {
		saved := false
		types := make([]string, 0, len(o.Data))
		for t := range o.Data {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			ext := map[string]string{"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg"}[t]
			s, ok := o.Data[t].(string)
			if ext == "" || !ok {
				continue
			}
			b := []byte(s)
			if t != "image/svg+xml" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(s); err != nil {
					return fmt.Errorf("the cell's %s: %w", t, err)
				}
			}
			n++
			name := filepath.Join(dir, fmt.Sprintf("%s-%d.%s", r.Command, n, ext))
			if err := os.WriteFile(name, b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "saved %s (%s, %d bytes)\n", name, t, len(b))
			saved = true
		}
		if text, ok := o.Data["text/plain"].(string); ok && !(saved && strings.HasPrefix(text, "<Figure")) {
			fmt.Println(text)
		}
	}
	return nil
}
