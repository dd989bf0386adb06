// Command lbb is the whole of lbb on the host: the server, the CLI, the MCP server, image
// builds and benchmarks. The nouns (sandbox, files, …) and their verbs are declared together
// in nouns.go, each noun's verbs written in its own file; every other command lives in a file
// of its own and registers itself in init. cli.go dispatches them.
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
