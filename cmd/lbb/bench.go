//go:build linux

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["bench"] = command{summary: "Benchmarks beside bare-process and bwrap baselines (--json for tracking)", run: runBench}
}

const benchUsage = `Usage: lbb bench [--only runtime,service] [--n 20] [--burst 100] [--sustain 60s] [--json-out FILE]
       lbb bench load [flags]   (the load check alone: see lbb load --help)

Measures, in one invocation, each figure beside baselines doing the same work on the same
image, and prints p50, p90, p99 and p50 ratios:
  runtime (the ns driver directly):
    create → first exec of /bin/true      (bare fork/exec, chroot, bwrap)
    exec round trip of /bin/true           (bare fork/exec)
    cold Python run(input, config)         (chroot python3 -c, bwrap python3 -c)
  service (a server of its own, or --url):
    one-call Python sum(input)             (chroot python3 -c, bwrap python3 -c)
    one-call pandas DataFrame(input).sum() (the same with the import)
    a burst of --burst concurrent one-call runs (records checked: none lost, none run twice)
    sustained one-call runs for --sustain with 8 clients (runs/s)
Needs root (the ns driver).
`

func runBench(args []string) error {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(args[1:])
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }
	var cf clientFlags
	cf.register(fs)
	only := fs.String("only", "runtime,service", "which sections to run")
	n := fs.Int("n", 20, "samples per metric")
	burst := fs.Int("burst", 100, "runs in the burst")
	sustain := fs.Duration("sustain", 60*time.Second, "how long the sustained run lasts (0 skips it)")
	jsonOut := fs.String("json-out", "", "also write the figures as JSON to this file")
	agentPath := fs.String("agent", defaultAgentPath(), "the static guest agent binary")
	imagesDir := fs.String("images-dir", imagesDirFromEnv(), "where base images are")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	img, err := images.Current(*imagesDir)
	if err != nil {
		return fmt.Errorf("no base image in %s (run `make images`): %w", *imagesDir, err)
	}
	bwrap, _ := exec.LookPath("bwrap")
	rep := &bench.Report{Started: time.Now(), Load: loadavg()}
	if bwrap == "" {
		rep.Notes = append(rep.Notes, "bwrap not found: its baselines are skipped (apt-get install bubblewrap)")
	}
	sections := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		sections[strings.TrimSpace(s)] = true
	}

	if sections["runtime"] {
		state, err := os.MkdirTemp("", "lbb-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(state)
		os.Chmod(state, 0o711)
		d := ns.New(ns.Config{StateDir: state, AgentPath: *agentPath, CgroupParent: "lbb-bench"})
		if err := runtime.CheckRequirements(d); err != nil {
			return err
		}
		rows, err := bench.Runtime(ctx, bench.RuntimeOptions{Driver: d, Rootfs: img.Rootfs, N: *n, Bwrap: bwrap, Log: os.Stderr})
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			rep.Notes = append(rep.Notes, "runtime: "+err.Error())
		}
	}

	if sections["service"] {
		if cf.url == "" && os.Getenv("LBB_URL") == "" {
			url, key, done, err := serveForLoad(ctx, *burst)
			if err != nil {
				return err
			}
			defer done()
			cf.url, cf.apiKey, cf.graph = url, key, "main"
		}
		c, err := lbb.New(lbb.Options{BaseURL: cf.url, APIKey: cf.apiKey, Graph: cf.graph, MaxRetries: 1000, UserAgent: "lbb-bench"})
		if err != nil {
			return err
		}
		rows, notes := benchService(ctx, c, img.Rootfs, bwrap, *n, *burst, *sustain)
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}

	rep.Print(os.Stdout)
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			return err
		}
		defer f.Close()
		return rep.JSON(f)
	}
	return nil
}

func benchService(ctx context.Context, c *lbb.Client, rootfs, bwrap string, n, burst int, sustain time.Duration) (rows []bench.Row, notes []string) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	baselines := func(argv ...string) []bench.Sample {
		s := []bench.Sample{bench.Time("chroot "+argv[0]+" -c", n, bench.Chroot(rootfs, argv...))}
		if bwrap != "" {
			s = append(s, bench.Time("bwrap "+argv[0]+" -c", n, bench.Bwrap(bwrap, rootfs, argv...)))
		}
		return s
	}
	wantJSON := func(want string) func(*lbb.Run) error {
		return func(r *lbb.Run) error {
			var got, exp any
			json.Unmarshal(r.Result, &got)
			json.Unmarshal([]byte(want), &exp)
			if fmt.Sprint(got) != fmt.Sprint(exp) {
				return fmt.Errorf("result %s, want %s", r.Result, want)
			}
			return nil
		}
	}

	logf("one-call Python sum(input) through the API (%d times)…", n)
	py := bench.OneCall(ctx, c, "lbb", n, lbb.RunParams{Code: "def run(input, config):\n    return sum(input)\n", Input: []int{1, 2, 3}}, wantJSON("6"))
	rows = append(rows, bench.Row{Metric: "one-call Python sum(input)", LBB: py, Baselines: baselines("python3", "-c", "print(sum([1,2,3]))")})

	logf("one-call pandas run through the API (%d times)…", n)
	pd := bench.OneCall(ctx, c, "lbb", n, lbb.RunParams{Code: bench.PandasSum, Input: bench.PandasInput}, wantJSON(`{"a":4,"b":6}`))
	rows = append(rows, bench.Row{Metric: "one-call pandas DataFrame(input).sum()", LBB: pd,
		Baselines: baselines("python3", "-c", "import pandas as pd; print(pd.DataFrame([{'a':1,'b':2},{'a':3,'b':4}]).sum().to_dict())")})

	if burst > 0 {
		logf("a burst of %d concurrent one-call runs…", burst)
		s, extra, err := bench.Burst(ctx, c, burst)
		if err != nil {
			notes = append(notes, "burst: "+err.Error())
		} else {
			rows = append(rows, bench.Row{Metric: fmt.Sprintf("burst of %d one-call runs", burst), LBB: s, Extra: extra})
		}
	}
	if sustain > 0 {
		logf("sustained one-call runs for %v with 8 clients…", sustain)
		s, rate := bench.Sustained(ctx, c, 8, sustain)
		rows = append(rows, bench.Row{Metric: "sustained one-call runs, 8 clients", LBB: s, Extra: fmt.Sprintf("%.1f runs/s over %v", rate, sustain)})
	}
	return rows, notes
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ") + fmt.Sprintf(" (%d cpus)", goruntime.NumCPU())
}

// defaultAgentPath is lbb-agent next to this executable, or $LBB_AGENT.
func defaultAgentPath() string {
	if p := os.Getenv("LBB_AGENT"); p != "" {
		return p
	}
	exe, err := os.Executable()
	if err != nil {
		return "lbb-agent"
	}
	return filepath.Join(filepath.Dir(exe), "lbb-agent")
}
