package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["sandbox"] = command{summary: "Long-lived sandboxes (sandbox create|list|get|exec|stop|resume|pause|snapshot|fork|snapshots|delete)", run: runSandbox}
}

const sandboxUsage = `Usage:
  lbb sandbox create [--template T | --base B] [--isolation ns|gvisor] [--expires S] [--memory-mib N] [--cpus N]
                     [--env NAME=VALUE]... [--label KEY=VALUE]...      prints the new sandbox's id
  lbb sandbox list [--status S] [--label KEY=VALUE]... [--limit N]
  lbb sandbox get ID
  lbb sandbox exec ID [--cwd DIR] [--env NAME=VALUE]... [--timeout-ms N] [-i] [--detach] -- ARGV...
        runs ARGV in the sandbox, streams its output live and exits with its exit code;
        -i sends this terminal's stdin to it; --detach prints the command id and returns
  lbb sandbox stop ID       its processes end, its disk stays
  lbb sandbox resume ID     starts again with the same workspace (a paused one: where it was)
  lbb sandbox pause ID      parks it: gvisor saves its memory to disk, ns freezes it in RAM
  lbb sandbox snapshot ID [--label KEY=VALUE]...   a memory snapshot (gvisor); it runs on
  lbb sandbox fork ID [--snapshot SNP] [--expires S] [--env NAME=VALUE]... [--label KEY=VALUE]...
        a new sandbox from a snapshot of ID (a fresh one without --snapshot); prints its id
  lbb sandbox snapshots ID [--limit N]   lists ID's snapshots; snapshots --delete SNP deletes one
  lbb sandbox delete ID     destroys it (the record stays)
  lbb sandbox bench [--serve] exec round trip, run, create/stop/resume and file throughput
Every subcommand takes --url, --api-key, --graph and --json.
`

func runSandbox(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, sandboxUsage)
		return nil
	}
	fs := flag.NewFlagSet("sandbox "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, sandboxUsage) }
	var cf clientFlags
	cf.register(fs)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	oneID := func(pos []string) (string, *lbb.Client, error) {
		if len(pos) != 1 {
			return "", nil, exitError{2, fmt.Sprintf("sandbox %s takes one sandbox ID", args[0])}
		}
		c, err := cf.client()
		return pos[0], c, err
	}
	switch args[0] {
	case "create":
		template := fs.String("template", "", "a saved template (name or name@N): its base, limits and Files")
		base := fs.String("base", "", "lbb/python (default), lbb/node or lbb/shell")
		isolation := fs.String("isolation", "", "isolation to run on: ns or gvisor (default: the template's, else the server's)")
		expires := fs.Int64("expires", 0, "seconds until the sandbox ends (default and cap: the server's)")
		memory := fs.Int64("memory-mib", 0, "memory limit in MiB")
		cpus := fs.Float64("cpus", 0, "vCPUs")
		disk := fs.Int64("disk-mib", 0, "workspace disk in MiB")
		key := fs.String("idempotency-key", "", "a retry with the same key answers the same sandbox")
		var env, labels multiFlag
		fs.Var(&env, "env", "NAME=VALUE given to every command (repeatable); values are masked in output")
		fs.Var(&labels, "label", "KEY=VALUE metadata (repeatable)")
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return exitError{2, "sandbox create takes no arguments"}
		}
		p := lbb.CreateParams{Template: *template, Base: *base, Isolation: *isolation, ExpiresInSeconds: *expires, IdempotencyKey: *key}
		if *memory != 0 || *cpus != 0 || *disk != 0 {
			p.Limits = &lbb.Limits{MemoryMiB: *memory, CPUs: *cpus, DiskMiB: *disk}
		}
		if p.Env, err = pairs("--env", env); err != nil {
			return err
		}
		if p.Metadata, err = pairs("--label", labels); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		sb, err := c.Sandboxes.Create(ctx, p)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(sb)
		}
		fmt.Println(sb.ID)
		return nil
	case "list":
		status := fs.String("status", "", "only sandboxes with this status (running, stopped, destroyed…)")
		limit := fs.Int("limit", 20, "how many")
		var labels multiFlag
		fs.Var(&labels, "label", "KEY=VALUE: only sandboxes with this metadata (repeatable)")
		if _, err := parseInterspersed(fs, args[1:]); err != nil {
			return err
		}
		lp := lbb.ListParams{Limit: *limit, Status: *status}
		var err error
		if lp.Labels, err = pairs("--label", labels); err != nil {
			return err
		}
		c, err := cf.client()
		if err != nil {
			return err
		}
		l, err := c.Sandboxes.List(ctx, lp)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(l)
		}
		w := table("SANDBOX", "STATUS", "BASE", "KIND", "CREATED", "EXPIRES", "END", "LABELS")
		for _, sb := range l.Data {
			kind := "long-lived"
			if sb.OneCall {
				kind = "one-call"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Status, sb.Base, kind, when(&sb.CreatedAt), when(sb.ExpiresAt),
				orDash(sb.EndReason), orDash(labelString(sb.Metadata)))
		}
		return w.Flush()
	case "snapshot", "fork", "snapshots":
		return sandboxSnapshots(ctx, fs, &cf, args[0], args[1:])
	case "get", "stop", "resume", "pause", "delete":
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		id, c, err := oneID(pos)
		if err != nil {
			return err
		}
		var sb *lbb.Sandbox
		switch args[0] {
		case "get":
			sb, err = c.Sandboxes.Get(ctx, id)
		case "stop":
			sb, err = c.Sandboxes.Stop(ctx, id)
		case "resume":
			sb, err = c.Sandboxes.Resume(ctx, id)
		case "pause":
			sb, err = c.Sandboxes.Pause(ctx, id)
		case "delete":
			sb, err = c.Sandboxes.Delete(ctx, id)
		}
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(sb)
		}
		printSandbox(sb)
		return nil
	case "exec":
		return sandboxExec(ctx, fs, &cf, args[1:])
	case "bench":
		if sandboxBench == nil {
			return exitError{2, "sandbox bench runs on Linux"}
		}
		return sandboxBench(args[1:])
	}
	fs.Usage()
	return exitError{2, fmt.Sprintf("unknown subcommand %q", args[0])}
}

func pairs(flagName string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want NAME=VALUE", flagName, kv)
		}
		m[k] = v
	}
	return m, nil
}

func labelString(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + md[k]
	}
	return strings.Join(keys, ",")
}

func printSandbox(sb *lbb.Sandbox) {
	w := table("FIELD", "VALUE")
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("sandbox", sb.ID)
	row("status", sb.Status)
	row("base", sb.Base)
	if sb.Template != nil {
		row("template", fmt.Sprintf("%s@%d (%s)", sb.Template.Name, sb.Template.Version, sb.Template.ID))
	}
	row("limits", fmt.Sprintf("%d MiB, %g cpus, %d pids, %d MiB disk", sb.Limits.MemoryMiB, sb.Limits.CPUs, sb.Limits.Pids, sb.Limits.DiskMiB))
	if sb.Isolation != "" {
		row("isolation", sb.Isolation)
	}
	if len(sb.EnvNames) > 0 {
		row("env", strings.Join(sb.EnvNames, ", "))
	}
	if len(sb.Metadata) > 0 {
		row("labels", labelString(sb.Metadata))
	}
	row("created", when(&sb.CreatedAt))
	row("started", when(sb.StartedAt))
	row("expires", when(sb.ExpiresAt))
	if sb.PausedAt != nil {
		row("paused", when(sb.PausedAt))
	}
	if sb.ForkedFrom != nil {
		row("forked from", sb.ForkedFrom.Sandbox+" (snapshot "+sb.ForkedFrom.Snapshot+")")
	}
	row("ended", when(sb.EndedAt))
	if sb.EndReason != "" {
		row("end reason", sb.EndReason)
	}
	if sb.Error != "" {
		row("error", sb.Error)
	}
	row("usage", fmt.Sprintf("%.0f vcpu_ms, %.0f gib_ms", sb.Usage.VCPUMs, sb.Usage.GiBMs))
	w.Flush()
}

// sandboxBench measures Level 3 through the API (sandboxbench.go, Linux).
var sandboxBench func(args []string) error

// splitDashDash splits args at the first "--": flags and positionals before, argv after.
func splitDashDash(args []string) ([]string, []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

// sandboxExec starts a command, streams its output as it comes, and exits with its code.
func sandboxExec(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	cwd := fs.String("cwd", "", "working directory (relative to /workspace)")
	timeout := fs.Int64("timeout-ms", 0, "kill the command after this long (default: the server's)")
	interactive := fs.Bool("i", false, "send this process's stdin to the command")
	detach := fs.Bool("detach", false, "print the command id and return; it keeps running")
	var env multiFlag
	fs.Var(&env, "env", "NAME=VALUE (repeatable); values are masked in output")
	before, argv := splitDashDash(args)
	pos, err := parseInterspersed(fs, before)
	if err != nil {
		return err
	}
	if len(pos) == 2 && argv == nil { // lbb sandbox exec ID 'a shell line'
		argv = []string{"bash", "-c", pos[1]}
		pos = pos[:1]
	}
	if len(pos) != 1 || len(argv) == 0 {
		return exitError{2, "usage: lbb sandbox exec ID [flags] -- ARGV..."}
	}
	p := lbb.ExecParams{Argv: argv, Cwd: *cwd, TimeoutMs: *timeout, WaitMs: -1, StdinOpen: *interactive}
	if p.Env, err = pairs("--env", env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	cmd, err := c.Sandboxes.Exec(ctx, pos[0], p)
	if err != nil {
		return err
	}
	if *detach {
		if cf.json {
			return printJSON(cmd)
		}
		fmt.Println(cmd.ID)
		return nil
	}
	if *interactive {
		go pumpStdin(c, cmd.ID)
	}
	// Ctrl-C interrupts the command, not the streaming: its end still comes.
	interrupted := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		interrupted <- struct{}{}
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Commands.Kill(kctx, cmd.ID, "SIGINT")
	}()
	exit, err := streamOutput(context.Background(), c, cmd.ID, "both", true)
	if err != nil {
		return err
	}
	if exit == nil {
		return errors.New("the output stream ended before the command")
	}
	if cf.json {
		printJSON(exit)
	}
	return exitFor(exit)
}

// pumpStdin sends stdin to a command until EOF, then closes the command's stdin.
func pumpStdin(c *lbb.Client, id string) {
	ctx := context.Background()
	buf := make([]byte, 64<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if werr := c.Commands.WriteStdin(ctx, id, buf[:n], false); werr != nil {
				return
			}
		}
		if err != nil {
			c.Commands.WriteStdin(ctx, id, nil, true)
			return
		}
	}
}

// streamOutput copies a command's output to stdout and stderr as it comes and answers its
// record once it has ended (nil without follow while it runs).
func streamOutput(ctx context.Context, c *lbb.Client, id, stream string, follow bool) (*lbb.Command, error) {
	s, err := c.Commands.Output(ctx, id, stream, follow)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	next := map[string]int64{}
	for s.Next() {
		ch := s.Chunk()
		w := io.Writer(os.Stdout)
		if ch.Stream == "stderr" {
			w = os.Stderr
		}
		if ch.Offset > next[ch.Stream] {
			fmt.Fprintf(os.Stderr, "\n[lbb: %d bytes of %s were not kept]\n", ch.Offset-next[ch.Stream], ch.Stream)
		}
		w.Write(ch.Data)
		next[ch.Stream] = ch.Offset + int64(len(ch.Data))
	}
	return s.Exit(), s.Err()
}

// exitFor is how lbb ends after a command: with its exit code, silently.
func exitFor(cmd *lbb.Command) error {
	switch {
	case cmd.ExitCode != nil && *cmd.ExitCode == 0 && cmd.Status == lbb.StatusSucceeded:
		return nil
	case cmd.ExitCode != nil && *cmd.ExitCode != 0:
		return silentExit(*cmd.ExitCode)
	}
	msg := fmt.Sprintf("command %s: %s", cmd.ID, cmd.Status)
	if cmd.Error != "" {
		msg += ": " + cmd.Error
	}
	return exitError{1, msg}
}

// silentExit ends lbb with a code and no message (the command's own code).
type silentExit int

func (e silentExit) Error() string { return "" }
func (e silentExit) ExitCode() int { return int(e) }
