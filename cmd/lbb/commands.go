package main

import (
	"context"
	"flag"
	"fmt"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func commandsGet(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	wait := fs.Int64("wait-ms", 0, "wait up to this long for the command to end")
	id, c, err := oneArgClient(fs, cf, args, "command ID")
	if err != nil {
		return err
	}
	cmd, err := c.Commands.Get(ctx, id, *wait)
	return answer(cf, cmd, err, printCommand)
}

func commandsList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	limit := fs.Int("limit", 20, "how many")
	sandbox := fs.String("sandbox", "", "only the commands of this sandbox")
	status := fs.String("status", "", "only commands with this status (running, succeeded, failed, timed_out, killed, lost, oom…)")
	c, err := noArgsClient(fs, cf, args)
	if err != nil {
		return err
	}
	list := c.Commands.List
	if *sandbox != "" {
		list = func(ctx context.Context, p lbb.ListParams) (*lbb.List[lbb.Command], error) {
			return c.Sandboxes.Commands(ctx, *sandbox, p)
		}
	}
	return printPage(ctx, cf, list, lbb.ListParams{Limit: *limit, Status: *status}, []string{"COMMAND", "SANDBOX", "KIND", "STATUS", "EXIT", "MS", "CREATED"}, func(c lbb.Command) string {
		exit := "-"
		if c.ExitCode != nil {
			exit = fmt.Sprint(*c.ExitCode)
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", c.ID, c.Sandbox, c.Kind, c.Status, exit, c.DurationMs, when(&c.CreatedAt))
	})
}

func commandsLogs(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	follow := fs.Bool("f", false, "follow the output live until the command ends")
	stream := fs.String("stream", "both", "stdout, stderr or both")
	id, c, err := oneArgClient(fs, cf, args, "command ID")
	if err != nil {
		return err
	}
	out, err := streamOutput(ctx, c, id, *stream, *follow)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if *follow && out.exit != nil {
		return exitFor(out.exit)
	}
	return nil
}

func commandsKill(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	sig := fs.String("signal", "", "SIGTERM, SIGINT, 15… (default SIGKILL)")
	id, c, err := oneArgClient(fs, cf, args, "command ID")
	if err != nil {
		return err
	}
	cmd, err := c.Commands.Kill(ctx, id, *sig)
	return answer(cf, cmd, err, printCommand)
}

func printCommand(c *lbb.Command) {
	t := newFieldTable()
	t.row("command", c.ID)
	t.row("sandbox", c.Sandbox)
	t.row("kind", c.Kind)
	t.row("status", c.Status)
	t.opt("forked from", c.ForkedFrom)
	if c.ExitCode != nil {
		t.row("exit code", fmt.Sprint(*c.ExitCode))
	}
	t.opt("signal", c.Signal)
	t.opt("template", templateRef(c.Template))
	t.opt("language", c.Language)
	if len(c.Argv) > 0 {
		t.row("argv", fmt.Sprintf("%q", c.Argv))
	}
	t.row("created", when(&c.CreatedAt))
	t.row("started", when(c.StartedAt))
	t.row("finished", when(c.FinishedAt))
	t.row("duration", fmt.Sprintf("%d ms", c.DurationMs))
	t.opt("input", string(c.Input))
	t.opt("config", string(c.Config))
	if c.Kind == "run" {
		t.row("ok", fmt.Sprint(c.OK))
		t.row("result", orDash(string(c.Result)))
	}
	t.opt("error", c.Error)
	t.row("stdout", fmt.Sprintf("%d bytes", c.Stdout.Bytes))
	t.row("stderr", fmt.Sprintf("%d bytes", c.Stderr.Bytes))
	t.w.Flush()
	for _, s := range []struct {
		name string
		out  lbb.Output
	}{{"stdout", c.Stdout}, {"stderr", c.Stderr}} {
		if s.out.Bytes > 0 && !s.out.Expired {
			fmt.Printf("\n--- %s ---\n%s", s.name, s.out.String())
		}
	}
}
