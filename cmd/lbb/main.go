// Command lbb is the whole of lbb on the host: the server, the CLI, the MCP server, image
// builds and benchmarks. Each command lives in its own file and registers itself in init;
// cli.go dispatches them.
package main

import "os"

// hooks run before anything else; a driver's re-exec entry point (its sandbox init) is one.
// A hook that handles the invocation does not return.
var hooks []func()

func main() {
	for _, h := range hooks {
		h()
	}
	os.Exit(runMain(os.Args[1:]))
}
