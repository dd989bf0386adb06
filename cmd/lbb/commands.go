package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["commands"] = command{summary: "Read command records (commands get|list)", run: runCommands}
}

const commandsUsage = `Usage:
  lbb commands get ID [--wait-ms N]   a command record (waiting up to N ms for it to end)
  lbb commands list [--limit N] [--sandbox ID] [--status S]   the newest command records
  lbb commands logs ID [-f] [--stream stdout|stderr|both]      its output (-f: follow it live
                                      until it ends, then exit with its exit code)
  lbb commands kill ID [--signal SIG] signal its process group (default SIGKILL)
Every subcommand takes --url, --api-key, --graph and --json.
`

func runCommands(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, commandsUsage)
		return nil
	}
	fs := flag.NewFlagSet("commands "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, commandsUsage) }
	var cf clientFlags
	cf.register(fs)
	ctx := context.Background()
	switch args[0] {
	case "get":
		wait := fs.Int64("wait-ms", 0, "wait up to this long for the command to end")
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "commands get takes one ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		cmd, err := c.Commands.Get(ctx, pos[0], *wait)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(cmd)
		}
		printCommand(cmd)
		return nil
	case "list":
		limit := fs.Int("limit", 20, "how many")
		sandbox := fs.String("sandbox", "", "only the commands of this sandbox")
		status := fs.String("status", "", "only commands with this status")
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		var l *lbb.List[lbb.Command]
		if *sandbox != "" {
			l, err = c.Sandboxes.Commands(ctx, *sandbox, lbb.ListParams{Limit: *limit, Status: *status})
		} else {
			l, err = c.Commands.List(ctx, lbb.ListParams{Limit: *limit, Status: *status})
		}
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(l)
		}
		w := table("COMMAND", "SANDBOX", "KIND", "STATUS", "EXIT", "MS", "CREATED")
		for _, c := range l.Data {
			exit := "-"
			if c.ExitCode != nil {
				exit = fmt.Sprint(*c.ExitCode)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", c.ID, c.Sandbox, c.Kind, c.Status, exit, c.DurationMs, when(&c.CreatedAt))
		}
		return w.Flush()
	case "logs":
		follow := fs.Bool("f", false, "follow the output live until the command ends")
		stream := fs.String("stream", "both", "stdout, stderr or both")
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "commands logs takes one ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		exit, err := streamOutput(sctx, c, pos[0], *stream, *follow)
		if err != nil {
			if sctx.Err() != nil {
				return nil
			}
			return err
		}
		if *follow && exit != nil {
			return exitFor(exit)
		}
		return nil
	case "kill":
		sig := fs.String("signal", "", "SIGTERM, SIGINT, 15… (default SIGKILL)")
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return exitError{2, "commands kill takes one ID"}
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		cmd, err := c.Commands.Kill(ctx, pos[0], *sig)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(cmd)
		}
		printCommand(cmd)
		return nil
	}
	fs.Usage()
	return exitError{2, fmt.Sprintf("unknown subcommand %q", args[0])}
}

func printCommand(c *lbb.Command) {
	w := table("FIELD", "VALUE")
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("command", c.ID)
	row("sandbox", c.Sandbox)
	row("kind", c.Kind)
	row("status", c.Status)
	if c.ExitCode != nil {
		row("exit code", fmt.Sprint(*c.ExitCode))
	}
	if c.Signal != "" {
		row("signal", c.Signal)
	}
	if c.Template != nil {
		row("template", fmt.Sprintf("%s@%d (%s)", c.Template.Name, c.Template.Version, c.Template.ID))
	}
	if c.Language != "" {
		row("language", c.Language)
	}
	if len(c.Argv) > 0 {
		row("argv", fmt.Sprintf("%q", c.Argv))
	}
	row("created", when(&c.CreatedAt))
	row("started", when(c.StartedAt))
	row("finished", when(c.FinishedAt))
	row("duration", fmt.Sprintf("%d ms", c.DurationMs))
	if len(c.Input) > 0 {
		row("input", string(c.Input))
	}
	if len(c.Config) > 0 {
		row("config", string(c.Config))
	}
	if c.Kind == "run" {
		row("ok", fmt.Sprint(c.OK))
		row("result", orDash(string(c.Result)))
	}
	if c.Error != "" {
		row("error", c.Error)
	}
	row("stdout", fmt.Sprintf("%d bytes", c.Stdout.Bytes))
	row("stderr", fmt.Sprintf("%d bytes", c.Stderr.Bytes))
	w.Flush()
	for _, s := range []struct {
		name string
		out  lbb.Output
	}{{"stdout", c.Stdout}, {"stderr", c.Stderr}} {
		if s.out.Bytes > 0 && !s.out.Expired {
			fmt.Printf("\n--- %s ---\n%s", s.name, s.out.String())
		}
	}
}
