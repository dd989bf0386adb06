package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/littlebigbrain/lbb/internal/mcp"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["mcp"] = command{summary: "Serve MCP on stdio, for a local agent (tools lbb_sandboxes_read, _manage, _delete)", run: runMCP}
}

const mcpUsage = `Usage: lbb mcp [--url URL] [--api-key KEY] [--graph GRAPH] [--log-level LEVEL]

Serves the Model Context Protocol on stdin and stdout, for an agent that starts it as a
subprocess. Its tools call the lbb server at --url ($LBB_URL, else ` + lbb.DefaultURL + `) with
--api-key ($LBB_API_KEY, else the local server's saved admin key, <$LBB_DATA_DIR>/admin.key).
Logs go to stderr. The server itself serves MCP over HTTP at /mcp.

Flags:
`

func runMCP(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, mcpUsage)
		fs.PrintDefaults()
	}
	var url urlFlag
	fs.Var(&url, "url", "server `URL` (default $LBB_URL or "+lbb.DefaultURL+")")
	apiKey := fs.String("api-key", "", "API key (default $LBB_API_KEY or the local server's saved admin key)")
	graph := fs.String("graph", "", "graph (default $LBB_GRAPH or main)")
	level := fs.String("log-level", "warn", "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2, err.Error()}
	}
	if fs.NArg() > 0 {
		return exitError{2, "mcp takes no arguments"}
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(*level)); err != nil {
		return exitError{2, fmt.Sprintf("--log-level %q: %v", *level, err)}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	// stdout is the protocol: nothing else may write to it.
	return mcp.ServeStdio(ctx, mcp.StdioOptions{BaseURL: string(url), APIKey: *apiKey, Graph: *graph, Log: log})
}
