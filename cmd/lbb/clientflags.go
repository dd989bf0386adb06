package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	url, apiKey, graph string
	json               bool
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "server URL (default $LBB_URL or "+lbb.DefaultURL+")")
	fs.StringVar(&f.apiKey, "api-key", "", "API key (default $LBB_API_KEY or the local server's saved admin key)")
	fs.StringVar(&f.graph, "graph", "", "graph (default $LBB_GRAPH or main)")
	fs.BoolVar(&f.json, "json", false, "print JSON, for scripts")
}

func (f *clientFlags) client() (*lbb.Client, error) {
	return lbb.New(lbb.Options{BaseURL: f.url, APIKey: f.apiKey, Graph: f.graph, UserAgent: "lbb-cli"})
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func table(header ...string) *tabwriter.Writer {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	return w
}

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// exitError ends lbb with a code, after its message.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
func (e exitError) ExitCode() int { return e.code }
