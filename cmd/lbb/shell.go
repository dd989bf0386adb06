package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/term"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// sandboxShell opens a terminal in a sandbox (GET /v1/sandboxes/{id}/pty) and connects this
// one to it: raw mode, the size followed on SIGWINCH, and the shell's exit code as lbb's.
func sandboxShell(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	newSB := fs.Bool("new", false, "create a sandbox for the session and delete it when the shell ends")
	isolation := fs.String("isolation", "", "with --new: ns or gvisor (default: the server's)")
	base := fs.String("base", "", "with --new: lbb/python (default), lbb/node or lbb/shell")
	cwd := fs.String("cwd", "", "working directory (relative to /workspace)")
	attach := fs.String("attach", "", "re-attach to a running terminal (cmd_…) instead of opening one")
	var env multiFlag
	fs.Var(&env, "env", "NAME=VALUE (repeatable)")
	before, argv := splitDashDash(args)
	pos, err := parseInterspersed(fs, before)
	if err != nil {
		return err
	}
	if (*newSB && len(pos) != 0) || (!*newSB && len(pos) != 1) {
		return exitError{2, "usage: lbb sandbox shell ID [flags] [-- ARGV...], or lbb sandbox shell --new [flags] [-- ARGV...]"}
	}
	envMap, err := pairs("--env", env)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var id string
	if *newSB {
		sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{Isolation: *isolation, Base: *base, ExpiresInSeconds: 3600})
		if err != nil {
			return err
		}
		id = sb.ID
		fmt.Fprintf(os.Stderr, "lbb: sandbox %s (deleted when the shell ends)\r\n", id)
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.Sandboxes.Delete(dctx, id)
		}()
	} else {
		id = pos[0]
	}

	in, out := int(os.Stdin.Fd()), int(os.Stdout.Fd())
	cols, rows := 80, 24
	if w, h, err := term.GetSize(out); err == nil && w > 0 && h > 0 {
		cols, rows = w, h
	}
	var t *lbb.Terminal
	if *attach != "" {
		t, err = c.Sandboxes.AttachTerminal(ctx, id, *attach, cols, rows)
	} else {
		t, err = c.Sandboxes.OpenTerminal(ctx, id, lbb.TerminalParams{Argv: argv, Env: envMap, Cwd: *cwd,
			Cols: cols, Rows: rows, Term: os.Getenv("TERM")})
	}
	if err != nil {
		return err
	}
	defer t.Close()
	if term.IsTerminal(in) {
		// Raw: every key (^C, ^D, ^Z, arrows) goes to the terminal in the sandbox, whose line
		// discipline does what a local one would.
		old, err := term.MakeRaw(in)
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(in, old)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if w, h, err := term.GetSize(out); err == nil && w > 0 && h > 0 {
				t.Resize(context.Background(), w, h)
			}
		}
	}()
	go io.Copy(t, os.Stdin)
	if _, err := io.Copy(os.Stdout, t); err != nil {
		return err
	}
	e := t.Exit()
	if e == nil {
		return errors.New("the terminal ended without its exit")
	}
	if e.ExitCode == nil {
		return exitError{1, fmt.Sprintf("the terminal ended %s: %s", e.Status, e.Error)}
	}
	if *e.ExitCode != 0 {
		return exitError{*e.ExitCode, ""}
	}
	return nil
}

// sandboxURL prints a signed, expiring URL of a port of a sandbox (a preview).
func sandboxURL(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	expires := fs.Duration("expires", time.Hour, "how long the URL is valid (at most 168h)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return exitError{2, "usage: lbb sandbox url ID PORT [--expires 1h]"}
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil {
		return exitError{2, "PORT must be a number"}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	p, err := c.Sandboxes.PreviewURL(ctx, pos[0], port, lbb.PreviewParams{ExpiresInSeconds: int64(expires.Seconds())})
	return answer(cf, p, err, func(p *lbb.Preview) { fmt.Println(p.URL) })
}
