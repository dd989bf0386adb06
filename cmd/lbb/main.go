// Command lbb is the whole of lbb on the host: the server, the CLI, the MCP server, image
// builds and benchmarks. Each subcommand lives in its own file and registers itself in init.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand: its one-line summary and what it runs.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// hooks run before anything else; a driver's re-exec entry point (its sandbox init) is one.
// A hook that handles the invocation does not return.
var hooks []func()

func main() {
	for _, h := range hooks {
		h()
	}
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "lbb: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if msg := err.Error(); msg != "" { // "" is a command's own exit code, passed on
			fmt.Fprintf(os.Stderr, "lbb %s: %s\n", os.Args[1], msg)
		}
		if e, ok := err.(interface{ ExitCode() int }); ok {
			os.Exit(e.ExitCode())
		}
		os.Exit(1)
	}
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("lbb runs code nobody here wrote in an isolated sandbox.\n\nUsage: lbb <command> [flags]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(os.Stderr, b.String())
}
