package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// liveStatuses are the statuses lbb sandbox list shows by default: sandboxes that are not over.
var liveStatuses = []string{"starting", "running", "paused", "stopped"}

func sandboxCreate(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	template := fs.String("template", "", "a saved template (name or name@N): its base, limits and Files")
	base := fs.String("base", "", "lbb/python (default), lbb/node, lbb/shell, or lbb/code-interpreter (a Python context ready for lbb code)")
	isolation := fs.String("isolation", "", "isolation to run on: ns or gvisor (default: the template's, else the server's)")
	session := fs.String("session", "", "a name for the sandbox: the first create makes it, later ones answer it running or resume it (its workspace restored)")
	size := fs.String("size", "", "a named size: standard-1 … standard-5 (or small, standard, large); --memory-mib etc. override it")
	limits := limitsFlags(fs, true)
	sf := newSandboxFlags(fs, "sandbox")
	ef, gf := newEgressFlags(fs), newGrantFlags(fs)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	p := lbb.CreateParams{Template: *template, Base: *base, Isolation: *isolation, ExpiresInSeconds: *sf.expires, IdempotencyKey: *sf.key, Limits: limits(),
		Session: *session, Size: *size}
	gf.apply(&p)
	var err error
	if p.Egress, err = ef.egress(); err != nil {
		return err
	}
	if p.Env, p.Metadata, err = sf.maps(); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.Sandboxes.Create(ctx, p)
	return answer(cf, sb, err, func(sb *lbb.Sandbox) { fmt.Println(sb.ID) })
}

func sandboxList(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
	status := fs.String("status", "", "only sandboxes with these statuses, comma-separated (starting, running, paused, stopped, destroyed, failed)")
	all := fs.Bool("all", false, "every sandbox, ended ones too")
	limit := fs.Int("limit", 20, "how many")
	var labels multiFlag
	fs.Var(&labels, "label", "KEY=VALUE: only sandboxes with this metadata (repeatable)")
	session := fs.String("session", "", "only the sandboxes of this session")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *all && *status != "" {
		return exitError{2, "--all and --status: give one"}
	}
	lp := lbb.ListParams{Limit: *limit, Session: *session}
	var err error
	if lp.Labels, err = pairs("--label", labels); err != nil {
		return err
	}
	statuses := liveStatuses
	switch {
	case *all:
		statuses = []string{""}
	case *status != "":
		statuses = strings.Split(*status, ",")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	// The API filters by one status: ask once for each, and keep the newest of them all.
	var data []lbb.Sandbox
	for _, st := range statuses {
		lp.Status = strings.TrimSpace(st)
		l, err := c.Sandboxes.List(ctx, lp)
		if err != nil {
			return err
		}
		data = append(data, l.Data...)
	}
	sort.SliceStable(data, func(i, j int) bool { return data[i].CreatedAt.After(data[j].CreatedAt) })
	if len(data) > *limit {
		data = data[:*limit]
	}
	err = printTable(cf, lbb.List[lbb.Sandbox]{Data: data}, data, []string{"SANDBOX", "STATUS", "BASE", "KIND", "CREATED", "EXPIRES", "END", "LABELS"}, func(sb lbb.Sandbox) string {
		kind := "long-lived"
		if sb.OneCall {
			kind = "one-call"
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", sb.ID, sb.Status, sb.Base, kind, when(&sb.CreatedAt), when(sb.ExpiresAt),
			orDash(sb.EndReason), orDash(labelString(sb.Metadata)))
	})
	if err != nil || cf.json {
		return err
	}
	if len(data) == 0 && !*all && *status == "" {
		fmt.Fprintln(cliErr, "no live sandboxes (lbb sandbox list --all shows the ended ones too)")
	}
	return nil
}

// sandboxDo serves lbb sandbox get|stop|resume|pause|delete: one call on one sandbox.
func sandboxDo(call func(*lbb.SandboxesService, context.Context, string) (*lbb.Sandbox, error)) func(context.Context, *flag.FlagSet, *clientFlags, []string) error {
	return func(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error {
		id, c, err := oneArgClient(fs, cf, args, "sandbox ID")
		if err != nil {
			return err
		}
		sb, err := call(c.Sandboxes, ctx, id)
		return answer(cf, sb, err, printSandbox)
	}
}

func sandboxBenchVerb(ctx context.Context, _ *flag.FlagSet, _ *clientFlags, args []string) error {
	if sandboxBench == nil {
		return exitError{2, "sandbox bench runs on Linux"}
	}
	return sandboxBench(ctx, args)
}

// sandboxFlags are the flags of lbb sandbox create and fork.
type sandboxFlags struct {
	expires     *int64
	key         *string
	env, labels multiFlag
}

// newSandboxFlags registers the flags of a verb that makes a sandbox; what names it
// ("sandbox", "fork").
func newSandboxFlags(fs *flag.FlagSet, what string) *sandboxFlags {
	f := &sandboxFlags{}
	f.expires = fs.Int64("expires", 0, "seconds until the "+what+" ends (default and cap: the server's)")
	f.key = fs.String("idempotency-key", "", "a retry with the same key answers the same "+what)
	fs.Var(&f.env, "env", "NAME=VALUE given to the "+what+"'s commands (repeatable); values are masked in output")
	fs.Var(&f.labels, "label", "KEY=VALUE metadata (repeatable)")
	return f
}

// maps answers --env and --label as maps (nil when not given).
func (f *sandboxFlags) maps() (env, labels map[string]string, err error) {
	if env, err = pairs("--env", f.env); err != nil {
		return nil, nil, err
	}
	labels, err = pairs("--label", f.labels)
	return env, labels, err
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

// pauseMode says what a pause did, after the time it was paused.
func pauseMode(mode string) string {
	switch mode {
	case "checkpoint":
		return " (checkpoint: saved to disk, RAM freed)"
	case "freeze":
		return " (freeze: held in RAM, commands parked)"
	}
	return ""
}

func printSandbox(sb *lbb.Sandbox) {
	t := newFieldTable()
	t.row("sandbox", sb.ID)
	t.row("status", sb.Status)
	t.row("base", sb.Base)
	t.opt("template", templateRef(sb.Template))
	t.row("limits", fmt.Sprintf("%d MiB, %g cpus, %d pids, %d MiB disk", sb.Limits.MemoryMiB, sb.Limits.CPUs, sb.Limits.Pids, sb.Limits.DiskMiB))
	t.opt("isolation", sb.Isolation)
	t.opt("size", sb.Size)
	t.opt("session", sb.Session)
	if w := sb.Workspace; w != nil {
		t.row("workspace", fmt.Sprintf("archived %s: %d bytes (a disk of %d MiB), sha256 %s", when(&w.ArchivedAt), w.Bytes, w.DiskBytes>>20, w.SHA256))
	}
	if e := sb.Egress; e != nil && e.Mode != "none" {
		t.row("egress", fmt.Sprintf("%s %s (quota %d bytes)", e.Mode, strings.Join(e.Allow, ", "), e.QuotaBytes))
	}
	if u := sb.Usage.Egress; u != nil {
		t.row("egress used", fmt.Sprintf("%d bytes out, %d in, %d connections, %d refused", u.BytesOut, u.BytesIn, u.Connections, u.Refused))
	}
	if sb.API != nil {
		t.row("api grant", strings.Join(sb.API.Scopes, ", "))
	}
	if sb.Git != nil {
		t.row("git", sb.Git.URL)
	}
	t.opt("env", strings.Join(sb.EnvNames, ", "))
	t.opt("labels", labelString(sb.Metadata))
	t.row("created", when(&sb.CreatedAt))
	t.row("started", when(sb.StartedAt))
	t.row("expires", when(sb.ExpiresAt))
	if sb.PausedAt != nil {
		t.row("paused", when(sb.PausedAt)+pauseMode(sb.PauseMode))
	}
	if sb.ForkedFrom != nil {
		t.row("forked from", sb.ForkedFrom.Sandbox+" (snapshot "+sb.ForkedFrom.Snapshot+")")
	}
	t.row("ended", when(sb.EndedAt))
	t.opt("end reason", sb.EndReason)
	t.opt("error", sb.Error)
	t.row("usage", fmt.Sprintf("%.0f vcpu_ms, %.0f gib_ms", sb.Usage.VCPUMs, sb.Usage.GiBMs))
	t.w.Flush()
}

// sandboxBench measures Level 3 through the API (sandboxbench.go, Linux).
var sandboxBench func(ctx context.Context, args []string) error

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
	if len(pos) == 2 && argv == nil { // lbb sandbox exec ID 'a shell line', as the SDKs run one
		argv = []string{"bash", "-lc", pos[1]}
		pos = pos[:1]
	}
	if len(pos) != 1 || len(argv) == 0 {
		return exitError{2, "usage: lbb sandbox exec ID [flags] -- ARGV... (lbb sandbox exec --help says more)"}
	}
	p := lbb.ExecParams{Argv: argv, Cwd: *cwd, TimeoutMs: *timeout, WaitMs: -1, StdinOpen: *interactive}
	if p.Env, err = pairs("--env", env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *detach {
		cmd, err := c.Sandboxes.Exec(ctx, pos[0], p)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(cmd)
		}
		fmt.Println(cmd.ID)
		return nil
	}
	// The output streams from its first byte: the server holds what this process has not
	// written out yet, and the command waits for it (a slow pipe slows the command; nothing
	// is dropped).
	s, err := c.Sandboxes.ExecStream(context.Background(), pos[0], p)
	if err != nil {
		return err
	}
	defer s.Close()
	cmd := s.Command()
	if *interactive {
		go pumpStdin(c, cmd.ID)
	}
	// Ctrl-C interrupts the command, not the streaming: its end still comes.
	streaming := make(chan struct{})
	defer close(streaming)
	go func() {
		select {
		case <-ctx.Done():
		case <-streaming: // ended first: nothing to interrupt
			return
		}
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Commands.Kill(kctx, cmd.ID, "SIGINT")
	}()
	out, err := copyOutput(s, "both")
	if err != nil {
		return err
	}
	if out.exit == nil {
		return errors.New("the output stream ended before the command")
	}
	if cf.json {
		printJSON(out.exit)
	}
	if out.lost > 0 {
		// What came is not the command's whole output: a script must not take it for that.
		msg := fmt.Sprintf("%d bytes of the output of %s were not kept: what was printed is incomplete", out.lost, cmd.ID)
		if err := exitFor(out.exit); err != nil && err.Error() != "" {
			msg += "; " + err.Error()
		}
		return exitError{exitOutputLost, msg}
	}
	return exitFor(out.exit)
}

// Exit codes of lbb sandbox exec and lbb commands logs -f beside the command's own.
const (
	exitTimedOut   = 124 // the command ran past its timeout (as timeout(1) exits)
	exitOutputLost = 125 // bytes of its output were not kept
)

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

// streamed is what streamOutput saw: the command's record once it ended (nil without follow
// while it runs), and how many bytes of its output did not come (not kept).
type streamed struct {
	exit *lbb.Command
	lost int64
}

// streamOutput copies a command's output to stdout and stderr as it comes, saying on stderr
// where bytes were not kept.
func streamOutput(ctx context.Context, c *lbb.Client, id, stream string, follow bool) (streamed, error) {
	s, err := c.Commands.Output(ctx, id, stream, follow)
	if err != nil {
		return streamed{}, err
	}
	defer s.Close()
	return copyOutput(s, stream)
}

// copyOutput copies the chunks of s (of stream: stdout, stderr or both) to stdout and
// stderr, saying on stderr where bytes did not come.
func copyOutput(s *lbb.OutputStream, stream string) (streamed, error) {
	var out streamed
	next := map[string]int64{}
	gap := func(name string, upTo int64) {
		if n := upTo - next[name]; n > 0 {
			fmt.Fprintf(os.Stderr, "\n[lbb: %d bytes of %s were not kept]\n", n, name)
			out.lost += n
		}
	}
	for s.Next() {
		ch := s.Chunk()
		w := io.Writer(os.Stdout)
		if ch.Stream == "stderr" {
			w = os.Stderr
		}
		gap(ch.Stream, ch.Offset)
		w.Write(ch.Data)
		next[ch.Stream] = ch.Offset + int64(len(ch.Data))
	}
	out.exit = s.Exit()
	if e := out.exit; e != nil { // bytes missing at the end are lost too
		if (stream == "both" || stream == "stdout") && !e.Stdout.Expired {
			gap("stdout", e.Stdout.Bytes)
		}
		if (stream == "both" || stream == "stderr") && !e.Stderr.Expired {
			gap("stderr", e.Stderr.Bytes)
		}
	}
	return out, s.Err()
}

// exitFor is how lbb ends after a command: with its exit code, silently, or saying why it
// ended otherwise.
func exitFor(cmd *lbb.Command) error {
	switch {
	case cmd.Status == lbb.StatusTimedOut:
		msg := fmt.Sprintf("command %s timed out after %d ms", cmd.ID, cmd.TimeoutMs)
		if cmd.TimeoutMs <= 0 {
			msg = fmt.Sprintf("command %s timed out", cmd.ID)
		}
		return exitError{exitTimedOut, msg}
	case cmd.ExitCode != nil && *cmd.ExitCode == 0 && cmd.Status == lbb.StatusSucceeded:
		return nil
	case cmd.ExitCode != nil && *cmd.ExitCode != 0 && cmd.Status == lbb.StatusFailed:
		return silentExit(*cmd.ExitCode)
	}
	msg := fmt.Sprintf("command %s: %s", cmd.ID, cmd.Status)
	if cmd.Error != "" {
		msg += ": " + cmd.Error
	}
	code := 1
	if cmd.ExitCode != nil && *cmd.ExitCode != 0 {
		code = *cmd.ExitCode
	}
	return exitError{code, msg}
}

// silentExit ends lbb with a code and no message (the command's own code).
type silentExit int

func (e silentExit) Error() string { return "" }
func (e silentExit) ExitCode() int { return int(e) }
