package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/agnivade/levenshtein"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// command is one command of lbb: a noun with verbs (lbb sandbox exec) or a command of its own
// (lbb run). The top-level help, each noun's help, aliases and suggestions all come from this
// table, so they cannot drift from what runs.
type command struct {
	summary string
	// aliases are other names it answers to (lbb sandboxes list).
	aliases []string
	// run runs a command without verbs; ctx ends on SIGINT or SIGTERM.
	run func(ctx context.Context, args []string) error
	// verbs are a noun's subcommands; footer ends the noun's help.
	verbs  []verb
	footer string
}

// verb is one subcommand of a noun.
type verb struct {
	name    string
	aliases []string
	// args is what follows "lbb NOUN VERB" in the usage line; help says what it does.
	args, help string
	// run gets a flag set that already has the client flags, and the arguments after the verb;
	// ctx ends on SIGINT or SIGTERM.
	run func(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string) error
}

var commands = map[string]command{}

// Where lbb's own help and messages go; tests replace them.
var cliOut, cliErr io.Writer = os.Stdout, os.Stderr

// runMain runs one invocation of lbb and answers its exit status.
func runMain(args []string) int {
	if len(args) == 0 || isHelp(args[0]) {
		if len(args) > 1 { // lbb help sandbox exec = lbb sandbox exec --help
			return runMain(append(args[1:], "--help"))
		}
		usage(cliOut)
		return 0
	}
	name, c, ok := lookupCommand(args[0])
	if !ok {
		hint := "lbb help lists the commands"
		if s := suggestCommand(args[0]); s != "" {
			hint = "did you mean " + s + "?"
		}
		fmt.Fprintf(cliErr, "lbb: unknown command %q; %s\n", args[0], hint)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prefix := "lbb " + name
	var err error
	if c.verbs != nil {
		prefix, err = runNoun(ctx, name, c, args[1:])
	} else {
		err = c.run(ctx, args[1:])
	}
	if err == nil || errors.Is(err, flag.ErrHelp) { // ErrHelp: help was asked for and printed
		return 0
	}
	if msg := err.Error(); msg != "" { // "" is a command's own exit code, passed on
		// The SDK's errors say "lbb: " themselves; one prefix is enough.
		fmt.Fprintf(cliErr, "%s: %s\n", prefix, strings.TrimPrefix(msg, "lbb: "))
	}
	if e, ok := err.(interface{ ExitCode() int }); ok {
		return e.ExitCode()
	}
	return 1
}

func isHelp(a string) bool { return a == "help" || a == "-h" || a == "--help" || a == "-help" }

// lookupCommand finds a command by its name or an alias.
func lookupCommand(name string) (string, command, bool) {
	if c, ok := commands[name]; ok {
		return name, c, true
	}
	for n, c := range commands {
		if slices.Contains(c.aliases, name) {
			return n, c, true
		}
	}
	return "", command{}, false
}

// runNoun runs one verb of a noun and answers the prefix of its messages.
func runNoun(ctx context.Context, name string, c command, args []string) (string, error) {
	prefix := "lbb " + name
	if len(args) == 0 || isHelp(args[0]) {
		if len(args) > 1 { // lbb sandbox help exec
			return runNoun(ctx, name, c, []string{args[1], "--help"})
		}
		nounUsage(cliOut, name, c)
		return prefix, nil
	}
	v, ok := c.verb(args[0])
	if !ok {
		var names []string
		for _, v := range c.verbs {
			names = append(names, v.name)
			names = append(names, v.aliases...)
		}
		hint := fmt.Sprintf("lbb %s --help lists them", name)
		if s := didYouMean(args[0], names); s != "" {
			hint = fmt.Sprintf("did you mean lbb %s %s?", name, s)
		}
		return prefix, exitError{2, fmt.Sprintf("unknown verb %q; %s", args[0], hint)}
	}
	prefix += " " + v.name
	fs := flag.NewFlagSet(prefix, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace(prefix+" "+v.args), v.help)
		fs.PrintDefaults()
	}
	var cf clientFlags
	cf.register(fs)
	return prefix, v.run(ctx, fs, &cf, args[1:])
}

func (c command) verb(name string) (verb, bool) {
	for _, v := range c.verbs {
		if v.name == name || slices.Contains(v.aliases, name) {
			return v, true
		}
	}
	return verb{}, false
}

// usage is lbb's help: every command, and every verb of each noun.
func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("lbb runs code nobody here wrote in an isolated sandbox.\n\n" +
		"Usage: lbb COMMAND [VERB] [flags]      lbb COMMAND [VERB] --help says more\n\nCommands:\n")
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(&b, "  %-10s %s\n", n, c.summary)
		if len(c.verbs) > 0 {
			vs := make([]string, len(c.verbs))
			for i, v := range c.verbs {
				vs[i] = v.name
			}
			fmt.Fprintf(&b, "  %-10s   %s\n", "", strings.Join(vs, "|"))
		}
	}
	b.WriteString("\nAliases:")
	for _, n := range names {
		for _, a := range commands[n].aliases {
			fmt.Fprintf(&b, " %s=%s", a, n)
		}
	}
	b.WriteString("\n")
	fmt.Fprint(w, b.String())
}

// nounUsage is a noun's help: each verb's usage line and what it does.
func nounUsage(w io.Writer, name string, c command) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: lbb %s VERB [flags]", name)
	if len(c.aliases) > 0 {
		fmt.Fprintf(&b, "   (also: lbb %s)", strings.Join(c.aliases, ", lbb "))
	}
	fmt.Fprintf(&b, "\n\n%s.\n\nVerbs:\n", c.summary)
	for _, v := range c.verbs {
		fmt.Fprintf(&b, "  %s\n", strings.TrimSpace(fmt.Sprintf("lbb %s %s %s", name, v.name, v.args)))
		for _, l := range strings.Split(v.help, "\n") {
			fmt.Fprintf(&b, "        %s\n", l)
		}
	}
	if c.footer != "" {
		fmt.Fprintf(&b, "%s\n", c.footer)
	}
	fmt.Fprintf(&b, "lbb %s VERB --help lists a verb's flags.\n", name)
	fmt.Fprint(w, b.String())
}

// suggestCommand says which command an unknown word may have meant: a command's name or
// alias near it (lbb sandbox), or the noun a verb of that name belongs to (lbb sandbox exec);
// "" when none is near.
func suggestCommand(word string) string {
	var names, nouns []string
	var verbName string
	for n, c := range commands {
		names = append(names, n)
		names = append(names, c.aliases...)
		if v, ok := c.verb(word); ok {
			nouns, verbName = append(nouns, n), v.name
		}
	}
	s := didYouMean(word, names)
	if len(nouns) > 0 && (s == "" || levenshtein.ComputeDistance(word, s) > 1) { // a verb's exact name beats a far slip
		sort.Strings(nouns)
		if len(nouns) == 1 {
			return fmt.Sprintf("lbb %s %s", nouns[0], verbName)
		}
		return fmt.Sprintf("lbb {%s} %s", strings.Join(nouns, "|"), word) // the word: each takes it
	}
	if s != "" {
		return "lbb " + s
	}
	return ""
}

// didYouMean names the candidate nearest word by edit distance, or one it begins, when one
// is near enough to be a slip: two edits at most, and fewer than the word has letters ("" otherwise).
func didYouMean(word string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := levenshtein.ComputeDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if best == "" || d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > 2 || bestD >= len(word) {
		return ""
	}
	return best
}

// parseInterspersed parses flags that may come before or after the positional arguments.
// -h and --help print the command's help to cliOut and answer flag.ErrHelp (lbb exits 0); a bad
// flag answers an exit-2 error that names the flag, printed once.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard) // flag's own messages would repeat the error lbb prints
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(cliOut)
				if usage != nil {
					usage()
				} else {
					fmt.Fprintf(cliOut, "Usage of %s:\n", fs.Name())
					fs.PrintDefaults()
				}
				return nil, flag.ErrHelp
			}
			name := fs.Name()
			if !strings.HasPrefix(name, "lbb ") {
				name = "lbb " + name
			}
			return nil, exitError{2, fmt.Sprintf("%v (%s --help lists the flags)", err, name)}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// oneArg parses a verb's flags and answers its one positional argument.
func oneArg(fs *flag.FlagSet, args []string, what string) (string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", exitError{2, fmt.Sprintf("takes one %s (%s --help says more)", what, fs.Name())}
	}
	return pos[0], nil
}

// noArgs parses a verb's flags where it takes no positional arguments.
func noArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parseInterspersed(fs, args)
	if err == nil && len(pos) > 0 {
		err = exitError{2, fmt.Sprintf("takes no arguments, got %q (%s --help says more)", pos, fs.Name())}
	}
	return err
}

// oneArgClient parses a verb's flags and its one argument, and makes the client.
func oneArgClient(fs *flag.FlagSet, cf *clientFlags, args []string, what string) (string, *lbb.Client, error) {
	arg, err := oneArg(fs, args, what)
	if err != nil {
		return "", nil, err
	}
	c, err := cf.client()
	return arg, c, err
}

// noArgsClient parses the flags of a verb that takes no arguments, and makes the client.
func noArgsClient(fs *flag.FlagSet, cf *clientFlags, args []string) (*lbb.Client, error) {
	if err := noArgs(fs, args); err != nil {
		return nil, err
	}
	return cf.client()
}

// answer prints what a call answered: its JSON with --json, else what show prints.
func answer[T any](cf *clientFlags, v T, err error, show func(T)) error {
	switch {
	case err != nil:
		return err
	case cf.json:
		return printJSON(v)
	}
	show(v)
	return nil
}

// allPages collects every item of a paged list; page answers one page and the next cursor.
func allPages[T any](page func(cursor string) ([]T, string, error)) ([]T, error) {
	var all []T
	for cursor := ""; ; {
		items, next, err := page(cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if cursor = next; cursor == "" {
			return all, nil
		}
	}
}

// jsonFlag is a flag's JSON value, checked: a json.RawMessage, or nil (no value at all, so
// that the SDK leaves it out) when the flag was not given.
func jsonFlag(name, v string) (any, error) {
	if v == "" {
		return nil, nil
	}
	if !json.Valid([]byte(v)) {
		return nil, exitError{2, fmt.Sprintf("--%s is not valid JSON", name)}
	}
	return json.RawMessage(v), nil
}
