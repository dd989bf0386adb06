package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	url, apiKey, graph string
	json               bool
	// acct meters the CPU of a server of the command's own (serveOwn), when it can.
	acct *bench.CPUAcct
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.Var((*urlFlag)(&f.url), "url", "server `URL` (default $LBB_URL or "+lbb.DefaultURL+")")
	fs.StringVar(&f.apiKey, "api-key", "", "API key (default $LBB_API_KEY or the local server's saved admin key)")
	fs.StringVar(&f.graph, "graph", "", "graph (default $LBB_GRAPH or main)")
	fs.BoolVar(&f.json, "json", false, "print JSON, for scripts")
}

// urlFlag is a server URL flag: http or https with a host. A value that is not one is refused
// when the flags are parsed, so that `--url "$EMPTY" --n 5` does not take "--n" for the URL.
type urlFlag string

func (u *urlFlag) String() string { return string(*u) }

func (u *urlFlag) Set(v string) error {
	p, err := url.Parse(v)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("want a URL such as %s, got %q", lbb.DefaultURL, v)
	}
	*u = urlFlag(v)
	return nil
}

func (f *clientFlags) client() (*lbb.Client, error) {
	return f.clientWith(lbb.Options{UserAgent: "lbb-cli"})
}

// clientWith is client with other options (a user agent, retries) beside the flags'.
func (f *clientFlags) clientWith(o lbb.Options) (*lbb.Client, error) {
	o.BaseURL, o.APIKey, o.Graph = f.url, f.apiKey, f.graph
	return lbb.New(o)
}

// clientFlagSet is the flag set of a command of its own (not a noun's verb) that talks to a
// server: its help is usage, then its flags; the client flags are registered.
func clientFlagSet(name, usage string) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet("lbb "+name, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage+"\nFlags:\n"); fs.PrintDefaults() }
	cf := &clientFlags{}
	cf.register(fs)
	return fs, cf
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

// printTable prints a list: the JSON of v with --json, else a table of header and a row of
// each item (tab-separated cells).
func printTable[T any](cf *clientFlags, v any, items []T, header []string, row func(T) string) error {
	if cf.json {
		return printJSON(v)
	}
	w := table(header...)
	for _, it := range items {
		fmt.Fprintln(w, row(it))
	}
	return w.Flush()
}

// printPage prints the page list answers for p, as printTable does.
func printPage[T any](ctx context.Context, cf *clientFlags, list func(context.Context, lbb.ListParams) (*lbb.List[T], error), p lbb.ListParams,
	header []string, row func(T) string) error {
	l, err := list(ctx, p)
	if err != nil {
		return err
	}
	return printTable(cf, l, l.Data, header, row)
}

// fieldTable prints one record as FIELD VALUE rows; end it with w.Flush.
type fieldTable struct{ w *tabwriter.Writer }

func newFieldTable() fieldTable { return fieldTable{table("FIELD", "VALUE")} }

func (t fieldTable) row(k, v string) { fmt.Fprintf(t.w, "%s\t%s\n", k, v) }

// opt is row, left out when v is "".
func (t fieldTable) opt(k, v string) {
	if v != "" {
		t.row(k, v)
	}
}

// templateRef names the template a record ran from, "" for none.
func templateRef(t *lbb.TemplateRef) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf("%s@%d (%s)", t.Name, t.Version, t.ID)
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
