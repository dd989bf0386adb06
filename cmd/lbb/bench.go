//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/loadtest"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["bench"] = command{summary: "Benchmarks beside bare-process and bwrap baselines (--json for tracking)", run: runBench}
}

const benchUsage = `Usage: lbb bench [--only runtime,service,tti,layers,gvisor,microvm,fleet] [--n 20] [--burst 100] [--sustain 60s] [--idle 500] [--json-out FILE]
       lbb bench load [flags]   (the load check alone: see lbb load --help)

Measures, in one invocation, each figure beside baselines doing the same work on the same
image, and prints p50, p90, p99 and p50 ratios:
  runtime (the ns driver directly):
    create → first exec of /bin/true      (bare fork/exec, chroot, bwrap)
    exec round trip of /bin/true           (bare fork/exec)
    cold Python run(input, config)         (chroot python3 -c, bwrap python3 -c)
    --idle-memory idle sandboxes held: charged, RSS and PSS per sandbox
    a 100 MiB download through the egress guard  (curl on the host); alone: --only egress
  gvisor (when runsc is installed; the same baselines, measured once):
    the runtime figures above on the gvisor driver directly
    checkpoint, and restore → first exec, of a sandbox holding --checkpoint-mib of memory
                                           (writing, reading that much as a file)
    one-call Python sum(input), warm and cold, on servers of its own run with
    --runtime gvisor (pool on, pool off)  (chroot python3 -c, bwrap python3 -c)
  microvm (only when asked: --only microvm; every metric names KVM or TCG):
    the runtime figures, checkpoint and restore, and one-call warm and cold on servers of
    its own (--runtime microvm), as for gvisor; under TCG (no usable KVM) a boot takes
    seconds: --n 5 keeps it to minutes
  service (servers of its own — pool on, and pool off for the cold figure — or --url):
    one-call Python sum(input), warm and cold (chroot python3 -c, bwrap python3 -c)
    one-call pandas DataFrame(input).sum(), warm (the same with the import)
    layers: one-call runs of a template whose image carries a layer (a run step), warm
      (the pool's slots of the layer) and cold, beside the same code in a template without
      one (python3 -c); alone, on servers of its own: --only layers
    create + first exec of node -v, the TTI shape (chroot node -v); alone: --only tti
    exec round trip of /bin/true through the API (bare fork/exec)
    a cell 1 + 1 in a warm Python context, and create lbb/code-interpreter + first cell (python3 -c)
    a burst of --burst concurrent one-call runs (records checked: none lost, none run twice)
    sustained one-call sum(input), then pandas, runs for --sustain with 8 clients (runs/s),
      beside bwrap python3 -c (and with import pandas) spawned 8 at a time for as long
      (spawns/s, and the ratio)
    CPU per run (cpu_ms_per_run) of the one-call figures: the server, its sandboxes and its
      pool's refills, metered by a cgroup v1 cpuacct group each server of its own runs in
      (its sandboxes' cgroups below it: lbb serve --cgroup-parent); bwrap's from wait4
    --server-binary runs another build's server beside this build's baselines
    --idle idle sandboxes held: their memory, and one-call latency meanwhile
  fleet (only when asked: --only fleet): two lbb host processes of its own on loopback and
    sustained one-call sum(input) runs for --sustain with 16 clients through a control plane
    of one host and through one of both (one, two, two, one: half of --sustain each): runs/s
    with two hosts ÷ with one (both share this machine's CPUs: near 1× on one machine)
Needs root (the ns and gvisor drivers).
`

func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(ctx, args[1:])
	}
	fs, cf := clientFlagSet("bench", benchUsage)
	only := fs.String("only", "runtime,service,layers,gvisor", "which sections to run: runtime, service, tti (the service's create + first exec of node -v row alone, on a server of its own), layers (one-call runs of a template with an image layer, warm and cold, beside one without; alone, on servers of its own), gvisor (skipped, saying why, when runsc is not installed), microvm, fleet (two lbb host processes: sustained runs/s with two hosts ÷ with one), pause (pause + resume, and on gvisor snapshot and fork, idle and with a command running, on ns and gvisor)")
	idleMemory := fs.Int("idle-memory", 10, "idle sandboxes held per driver to measure what one costs in memory (0 skips it)")
	cpN := fs.Int("checkpoint-n", 5, "gvisor (and microvm) checkpoints and restores timed (0 skips them)")
	cpMiB := fs.Int("checkpoint-mib", 100, "memory a process holds in the sandbox a checkpoint saves")
	runsc := fs.String("runsc", gvisor.DefaultRunsc, "the runsc binary of the gvisor section's driver figures (its servers use lbb serve's own)")
	n := fs.Int("n", 20, "samples per metric")
	burst := fs.Int("burst", 100, "runs in the burst")
	sustain := fs.Duration("sustain", 60*time.Second, "how long the sustained run lasts (0 skips it)")
	idle := fs.Int("idle", 500, "idle sandboxes to hold while measuring their memory and run latency (0 skips it)")
	coldServer := fs.Bool("cold", true, "also start a server with the pool off, for the cold one-call figure")
	jsonOut := fs.String("json-out", "", "also write the figures as JSON to this file")
	fs.StringVar(&serveBinary, "server-binary", "", "the lbb its servers run (default: this one), to measure another build's server beside the same baselines")
	agentPath := fs.String("agent", defaultAgentPath(), "the static guest agent binary")
	imagesDir := fs.String("images-dir", imagesDirFromEnv(), "where base images are")
	if err := fs.Parse(args); err != nil {
		return err
	}

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
	// Each baseline is measured once, so that every driver's ratios share it.
	baselines := &bench.Baselines{}

	if sections["runtime"] || sections["egress"] {
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
		if sections["runtime"] {
			rows, err := bench.Runtime(ctx, bench.RuntimeOptions{Driver: d, Rootfs: img.Rootfs, N: *n, Bwrap: bwrap, Log: os.Stderr,
				Baselines: baselines, Idle: *idleMemory, CgroupParent: "lbb-bench"})
			rep.Rows = append(rep.Rows, rows...)
			if err != nil {
				rep.Notes = append(rep.Notes, "runtime: "+err.Error())
			}
		}
		row, err := bench.Egress(ctx, d, img.Rootfs, max(*n/4, 3), "", os.Stderr, baselines)
		rep.Rows = append(rep.Rows, row)
		if err != nil {
			rep.Notes = append(rep.Notes, "egress: "+err.Error())
		}
	}

	if sections["service"] || sections["layers"] || sections["tti"] {
		var cold *lbb.Client
		if cf.url == "" && os.Getenv("LBB_URL") == "" {
			capacity := max(*burst, *idle+20)
			if !sections["service"] {
				capacity = 20
			}
			coldOn := *coldServer && !(sections["tti"] && !sections["service"] && !sections["layers"])
			// The service figures are the default driver's: no gvisor slots are kept warm
			// beside it, whose builds the CPU figures would count.
			done, err := cf.serveOwn(ctx, capacity, "--pool-gvisor-min", "0")
			if err != nil {
				return err
			}
			defer done()
			if coldOn {
				var coldFlags clientFlags
				cdone, err := coldFlags.serveOwn(ctx, capacity, "--pool=false")
				if err != nil {
					return err
				}
				defer cdone()
				if cold, err = coldFlags.clientWith(benchClient); err != nil {
					return err
				}
			}
		}
		c, err := cf.clientWith(benchClient)
		if err != nil {
			return err
		}
		rows, notes := benchService(ctx, serviceBench{c: c, cold: cold, url: cf.url, key: cf.apiKey, acct: cf.acct, rootfs: img.Rootfs, bwrap: bwrap,
			n: *n, burst: *burst, sustain: *sustain, idle: *idle, baselines: baselines,
			layers: sections["layers"], layersOnly: !sections["service"] && sections["layers"],
			ttiOnly: !sections["service"] && !sections["layers"]})
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}

	if sections["fleet"] {
		rows, notes := benchFleet(ctx, *sustain)
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}

	if sections["pause"] {
		// Only pause + resume, on ns and gvisor (the service and gvisor sections time them too).
		for _, rt := range []string{"ns", "gvisor"} {
			rep.Rows, rep.Notes = runtimePause(ctx, rt, *n, rt+": ", rep.Rows, rep.Notes)
		}
	}

	if sections["microvm"] {
		rows, notes := benchMicrovm(ctx, microvmBench{rootfs: img.Rootfs, bwrap: bwrap, agent: *agentPath, n: *n,
			idle: *idleMemory, cpN: *cpN, cpMiB: *cpMiB, baselines: baselines})
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}

	if sections["gvisor"] {
		rows, notes := benchGvisor(ctx, gvisorBench{rootfs: img.Rootfs, bwrap: bwrap, agent: *agentPath, runsc: *runsc, n: *n,
			idle: *idleMemory, cpN: *cpN, cpMiB: *cpMiB, baselines: baselines})
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

// ttiRow is level 3's time to interactive: create (lbb/node) + the first exec of node -v,
// waited for, beside chroot node -v. At idle with the pool refilled (every key at its
// target: the server's --pool-min, 2 by default) and a bare slot ready, as seed 002
// measures it.
func (b serviceBench) ttiRow(ctx context.Context, chroot func(string, ...string) bench.Sample, notes *[]string) bench.Row {
	fmt.Fprintf(os.Stderr, "create + first exec of node -v (%d times)…\n", b.n)
	idle := func() {
		// Refilled, not only one bare slot ready: the previous sample's claim is replaced
		// after a quiet period (the pool's claimQuiet), and that build would otherwise run
		// during a later sample, which then measures the refill's CPU as well.
		if !bench.WaitPoolSettled(ctx, b.url, b.key, 10*time.Second) {
			*notes = append(*notes, "the pool was not refilled within 10 s before a create")
		}
		if !bench.WaitPoolReady(ctx, b.url, b.key, "bare", 1, 10*time.Second) {
			*notes = append(*notes, "a create found no ready bare slot within 10 s")
		}
	}
	// Its own client, whose transport keeps the Server-Timing phases of the creates and execs.
	c, phases := b.c, bench.NewPhases(nil)
	o := benchClient
	o.BaseURL, o.APIKey, o.HTTPClient = b.url, b.key, &http.Client{Transport: phases}
	if pc, err := lbb.New(o); err == nil {
		c = pc
	}
	row := bench.Row{Metric: "create + first exec node -v (TTI)", LBB: bench.CreateAndExec(ctx, c, b.n, idle, "node", "-v"),
		Baselines: []bench.Sample{chroot("node -v", "node", "-v")}}
	if s := phases.Summary(); s != "" {
		*notes = append(*notes, "TTI phases, p50 ms (Server-Timing): "+s)
	}
	return row
}

// benchClient are the options of the benchmark's clients: 429s (the graph's cap of running
// sandboxes) are retried.
var benchClient = lbb.Options{MaxRetries: 1000, UserAgent: "lbb-bench"}

type serviceBench struct {
	c, cold        *lbb.Client // cold: a server with the pool off (nil: skip)
	url, key       string
	acct           *bench.CPUAcct // meters the server and its sandboxes (nil: not metered)
	rootfs, bwrap  string
	n, burst, idle int
	sustain        time.Duration
	baselines      *bench.Baselines
	// layers: the rows of a template with a layer (layersOnly: those and none other)
	layers, layersOnly bool
	// ttiOnly: the create + first exec of node -v row alone (--only tti)
	ttiOnly bool
}

func benchService(ctx context.Context, b serviceBench) (rows []bench.Row, notes []string) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	n, c := b.n, b.c
	chroot := func(name string, argv ...string) bench.Sample {
		return b.baselines.Time("chroot "+name, n, bench.Chroot(b.rootfs, argv...))
	}
	if b.ttiOnly {
		return []bench.Row{b.ttiRow(ctx, chroot, &notes)}, notes
	}
	// label names the baseline, and keys it in b.baselines: the same label must mean the
	// same command.
	baselines := func(label string, argv ...string) []bench.Sample {
		s := []bench.Sample{chroot(label, argv...)}
		if b.bwrap != "" {
			s = append(s, b.baselines.Time("bwrap "+label, n, bench.Bwrap(b.bwrap, b.rootfs, argv...)))
		}
		return s
	}
	// Warm runs wait (untimed) for a ready slot: a back-to-back loop would otherwise drain a
	// pool that refills at about 2 python slots a second on 2 cores.
	// Each shape waits for its flavour of slot: the lean one (key python) for code that
	// imports no heavy module, python-sci (numpy and pandas imported) for pandas.
	warmFor := func(key string) func() {
		return func() {
			if !bench.WaitPoolReady(ctx, b.url, b.key, key, 1, 10*time.Second) {
				notes = append(notes, "a warm run found no ready "+key+" slot within 10 s")
			}
		}
	}
	warm, warmSci := warmFor("python"), warmFor("python-sci")
	sum := lbb.RunParams{Code: "def run(input, config):\n    return sum(input)\n", Input: []int{1, 2, 3}}
	pyBase := baselines("python3 -c", "python3", "-c", "print(sum([1,2,3]))")
	if b.layersOnly {
		return b.layerRows(ctx, pyBase, &notes), notes
	}

	logf("one-call Python sum(input), warm (%d times)…", n)
	row := bench.Row{Metric: "one-call Python sum(input), warm", Baselines: pyBase}
	row.Values = b.cost(n, &notes, func() { row.LBB = bench.OneCallPaced(ctx, c, "lbb", n, sum, wantJSON("6"), warm); warm() })
	rows = append(rows, row)
	if b.cold != nil {
		logf("one-call Python sum(input), cold: pool off (%d times)…", n)
		rows = append(rows, bench.Row{Metric: "one-call Python sum(input), cold", LBB: bench.OneCall(ctx, b.cold, "lbb", n, sum, wantJSON("6")), Baselines: pyBase})
	}

	if b.layers {
		rows = append(rows, b.layerRows(ctx, pyBase, &notes)...)
	}

	logf("one-call pandas run, warm (%d times)…", n)
	pandas := lbb.RunParams{Code: bench.PandasSum, Input: bench.PandasInput}
	pandasArgv := []string{"python3", "-c", "import pandas as pd; print(pd.DataFrame([{'a':1,'b':2},{'a':3,'b':4}]).sum().to_dict())"}
	row = bench.Row{Metric: "one-call pandas DataFrame(input).sum(), warm", Baselines: baselines("python3 -c (import pandas)", pandasArgv...)}
	row.Values = b.cost(n, &notes, func() {
		row.LBB = bench.OneCallPaced(ctx, c, "lbb", n, pandas, wantJSON(`{"a":4,"b":6}`), warmSci)
		warmSci()
	})
	rows = append(rows, row)

	rows = append(rows, b.ttiRow(ctx, chroot, &notes))
	idle := func() {
		if !bench.WaitPoolReady(ctx, b.url, b.key, "bare", 1, 10*time.Second) {
			notes = append(notes, "a create found no ready bare slot within 10 s")
		}
	}

	logf("exec round trip of /bin/true through the API (%d times)…", n*5)
	if s, err := bench.ExecRoundTrip(ctx, c, n*5, "/bin/true"); err != nil {
		notes = append(notes, "exec round trip: "+err.Error())
	} else {
		rows = append(rows, bench.Row{Metric: "exec round trip /bin/true (API)", LBB: s,
			Baselines: []bench.Sample{b.baselines.Time("bare fork/exec", n*5, bench.Bare("/bin/true"))}})
	}

	logf("pause + resume, idle and with a command running (%d times each)…", n)
	rows, notes = pauseRows(ctx, c, n, "", rows, notes)
	logf("a trivial cell in a warm Python context (%d times)…", n*5)
	if s, err := bench.CellRoundTrip(ctx, c, n*5); err != nil {
		notes = append(notes, "cell round trip: "+err.Error())
	} else {
		rows = append(rows, bench.Row{Metric: "cell 1 + 1 in a warm Python context (API)", LBB: s,
			Baselines: baselines("python3 -c (1 + 1)", "python3", "-c", "print(1 + 1)")})
	}
	logf("create lbb/code-interpreter + its first cell (%d times)…", max(n/4, 1))
	// At idle too: with a code-interpreter slot (its kernel running) ready, else a bare one
	// (a server without that key).
	idleKernel := func() {
		if !bench.WaitPoolReady(ctx, b.url, b.key, "code-interpreter", 1, 10*time.Second) {
			notes = append(notes, "a create of lbb/code-interpreter found no ready code-interpreter slot within 10 s")
			idle()
		}
	}
	rows = append(rows, bench.Row{Metric: "create code-interpreter + first cell", LBB: bench.FirstCell(ctx, c, max(n/4, 1), idleKernel),
		Baselines: baselines("python3 -c (1 + 1)", "python3", "-c", "print(1 + 1)")})

	if b.burst > 0 {
		logf("a burst of %d concurrent one-call runs…", b.burst)
		var (
			s     bench.Sample
			extra string
			err   error
		)
		values := b.cost(b.burst, &notes, func() { s, extra, err = burst(ctx, c, b.burst) })
		if err != nil {
			notes = append(notes, "burst: "+err.Error())
		} else {
			rows = append(rows, bench.Row{Metric: fmt.Sprintf("burst of %d one-call runs", b.burst), LBB: s, Extra: extra, Values: values})
		}
	}
	if b.sustain > 0 {
		rows = append(rows, b.sustained(ctx, "sum(input)", sum, wantJSON("6"), []string{"python3", "-c", "print(sum([1,2,3]))"}, &notes))
		rows = append(rows, b.sustained(ctx, "pandas", pandas, wantJSON(`{"a":4,"b":6}`), pandasArgv, &notes))
	}
	if b.idle > 0 {
		logf("holding %d idle sandboxes…", b.idle)
		// Its sandboxes' cgroups: below the metering group on a server of its own, else
		// (--url) under the default parent.
		parent := "lbb"
		if b.acct != nil {
			parent = b.acct.SandboxParent()
		}
		s, extra, err := bench.Idle(ctx, c, b.idle, n, parent, warm)
		if err != nil {
			notes = append(notes, "idle: "+err.Error())
		} else {
			rows = append(rows, bench.Row{Metric: "one-call Python run while idle ones are held", LBB: s, Extra: extra})
		}
	}
	return rows, notes
}

// sustainedClients is how many clients the sustained figures run, and how many bwrap spawns
// their baselines run at once.
const sustainedClients = 8

// sustained runs p from sustainedClients clients for b.sustain, then spawns argv under
// bwrap at the same concurrency for as long: each one's rate and CPU per run, and their
// ratios.
func (b serviceBench) sustained(ctx context.Context, shape string, p lbb.RunParams, ok func(*lbb.Run) error, argv []string, notes *[]string) bench.Row {
	fmt.Fprintf(os.Stderr, "sustained one-call %s runs for %v with %d clients…\n", shape, b.sustain, sustainedClients)
	var (
		s    bench.Sample
		rate float64
	)
	row := bench.Row{Metric: fmt.Sprintf("sustained one-call %s, %d clients", shape, sustainedClients)}
	var nRuns int
	values := b.cost(1, notes, func() {
		s, rate = bench.SustainedRuns(ctx, b.c, sustainedClients, b.sustain, p, ok)
		nRuns = len(s.Durs)
	})
	row.LBB, row.Values = s, map[string]float64{"runs_per_s": rate}
	if nRuns > 0 {
		for k, v := range values {
			row.Values[k] = v / float64(nRuns)
		}
	}
	row.Extra = fmt.Sprintf("%.1f runs/s over %v", rate, b.sustain)
	if b.bwrap == "" {
		return row
	}
	fmt.Fprintf(os.Stderr, "  beside: bwrap %s, %d at a time for %v…\n", strings.Join(argv, " "), sustainedClients, b.sustain)
	acct, err := bench.NewCPUAcct(fmt.Sprintf("lbb-bench-%d-bwrap", os.Getpid()))
	if err != nil {
		*notes = append(*notes, "bwrap's CPU from wait4 (its pid namespace's CPU is not in it): "+err.Error())
	} else {
		defer acct.Remove()
	}
	sp := bench.SpawnRate(ctx, acct, sustainedClients, b.sustain, bench.BwrapArgv(b.bwrap, b.rootfs, argv...)...)
	if sp.Errors > 0 {
		*notes = append(*notes, fmt.Sprintf("sustained %s: %d bwrap spawns failed", shape, sp.Errors))
	}
	row.Values["bwrap_spawns_per_s"] = sp.Rate
	row.Values["bwrap_cpu_ms_per_spawn"] = ms(sp.CPUEach)
	if sp.Rate > 0 {
		row.Values["rate_vs_bwrap"] = rate / sp.Rate
	}
	if c, ok := row.Values["cpu_ms_per_run"]; ok && sp.CPUEach > 0 {
		row.Values["cpu_vs_bwrap"] = c / ms(sp.CPUEach)
	}
	row.Extra += fmt.Sprintf("; bwrap at %d: %.1f spawns/s (%.2f×)", sustainedClients, sp.Rate, row.Values["rate_vs_bwrap"])
	return row
}

// cost meters f, which makes n runs: the CPU per run of the server, its sandboxes and its
// pool's refills. The pool settles before (its earlier refills are not f's) and after (its
// refills after f are).
func (b serviceBench) cost(n int, notes *[]string, f func()) map[string]float64 {
	settle := func() {
		if b.acct != nil && !bench.WaitPoolSettled(context.Background(), b.url, b.key, 3*time.Minute) {
			*notes = append(*notes, "the pool did not settle within 3 min: a CPU figure counts refills not its own")
		}
	}
	settle()
	var sb0, sb1 time.Duration
	cpu, err := b.acct.Meter(func() {
		sb0 = b.acct.SandboxUsage()
		f()
		settle()
		sb1 = b.acct.SandboxUsage()
	})
	if err != nil {
		if b.acct != nil {
			*notes = append(*notes, "metering CPU: "+err.Error())
		}
		return nil
	}
	// Where it went: the sandboxes (their agents, interpreters and the code), and the server
	// (with the helpers it forks: mounts, mkfs, the sandbox's init before it joins its cgroups).
	return map[string]float64{"cpu_ms_per_run": ms(cpu) / float64(n),
		"sandbox_cpu_ms_per_run": ms(sb1-sb0) / float64(n), "server_cpu_ms_per_run": ms(cpu-(sb1-sb0)) / float64(n)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// burst sends n one-call runs at once (the load check) and checks the records: n records,
// none lost, none run twice.
func burst(ctx context.Context, c *lbb.Client, n int) (bench.Sample, string, error) {
	res, err := loadtest.Run(ctx, loadtest.Options{Client: c, N: n})
	if err != nil {
		return bench.Sample{}, "", err
	}
	s := bench.Sample{Name: fmt.Sprintf("lbb, %d at once", n), Durs: res.Latencies, Errors: res.Failed + len(res.Errors)}
	extra := fmt.Sprintf("%d records, %d lost, %d run twice, %d replays mismatched, %.1f runs/s",
		res.Records, res.Lost, res.RunTwice, res.Mismatched, float64(res.N)/res.Wall.Seconds())
	return s, extra, nil
}

// wantJSON checks that a run's result is the JSON value want.
func wantJSON(want string) func(*lbb.Run) error {
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

type gvisorBench struct {
	rootfs, bwrap, agent, runsc string
	n, idle, cpN, cpMiB         int
	baselines                   *bench.Baselines
}

// gvisorUnavailable says why the gvisor driver cannot run here, or "".
func gvisorUnavailable(d *gvisor.Driver) string {
	if _, err := os.Stat(d.Config().Runsc); err != nil {
		return fmt.Sprintf("runsc is not installed at %s (scripts/install-runsc.sh)", d.Config().Runsc)
	}
	if err := runtime.CheckRequirements(d); err != nil {
		return err.Error()
	}
	return ""
}

// benchGvisor measures the gvisor driver directly (the runtime figures, idle memory,
// checkpoint and restore) and one-call runs on servers of its own run with --runtime gvisor.
func benchGvisor(ctx context.Context, b gvisorBench) (rows []bench.Row, notes []string) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	state, err := os.MkdirTemp("", "lbb-bench-gvisor-")
	if err != nil {
		return nil, []string{"gvisor: " + err.Error()}
	}
	defer os.RemoveAll(state)
	os.Chmod(state, 0o711)
	const cgroupParent = "lbb-bench-gvisor"
	d := gvisor.New(gvisor.Config{StateDir: filepath.Join(state, "sandboxes"), AgentPath: b.agent, Runsc: b.runsc, CgroupParent: cgroupParent})
	if why := gvisorUnavailable(d); why != "" {
		logf("gvisor: skipped: %s", why)
		return nil, []string{"gvisor: skipped: " + why}
	}
	const prefix = "gvisor: "
	r, err := bench.Runtime(ctx, bench.RuntimeOptions{Driver: d, Rootfs: b.rootfs, N: b.n, Bwrap: b.bwrap, Log: os.Stderr,
		Prefix: prefix, Baselines: b.baselines, Idle: b.idle, CgroupParent: cgroupParent})
	rows = append(rows, r...)
	if err != nil {
		notes = append(notes, "gvisor runtime: "+err.Error())
	}
	if row, err := bench.Egress(ctx, d, b.rootfs, max(b.n/4, 3), prefix, os.Stderr, b.baselines); err != nil {
		notes = append(notes, "gvisor egress: "+err.Error())
	} else {
		rows = append(rows, row)
	}
	if b.cpN > 0 {
		cpDir := filepath.Join(state, "checkpoints")
		if err := os.Mkdir(cpDir, 0o700); err != nil {
			return rows, append(notes, "gvisor: "+err.Error())
		}
		r, err := bench.Checkpoint(ctx, bench.CheckpointOptions{Driver: d, Rootfs: b.rootfs, N: b.cpN, MiB: b.cpMiB, Dir: cpDir, Prefix: prefix, Log: os.Stderr})
		rows = append(rows, r...)
		if err != nil {
			notes = append(notes, "gvisor checkpoint: "+err.Error())
		}
	}

	// The service on gvisor: a server with the pool on, then one with it off, one at a time
	// so that the first one's refills do not weigh on the second one's cold starts.
	sum := lbb.RunParams{Code: "def run(input, config):\n    return sum(input)\n", Input: []int{1, 2, 3}}
	pyArgv := []string{"python3", "-c", "print(sum([1,2,3]))"}
	pyBase := []bench.Sample{b.baselines.Time("chroot python3 -c", b.n, bench.Chroot(b.rootfs, pyArgv...))}
	if b.bwrap != "" {
		pyBase = append(pyBase, b.baselines.Time("bwrap python3 -c", b.n, bench.Bwrap(b.bwrap, b.rootfs, pyArgv...)))
	}
	rows, notes = gvisorPause(ctx, b.n, prefix, rows, notes)
	for _, warm := range []bool{true, false} {
		row, err := gvisorOneCall(ctx, b.n, warm, sum, &notes)
		if err != nil {
			notes = append(notes, fmt.Sprintf("gvisor service (warm=%v): %v", warm, err))
			continue
		}
		row.Metric = prefix + row.Metric
		row.Baselines = pyBase
		rows = append(rows, row)
	}
	return rows, notes
}

// pauseRows times pause + resume of an idle sandbox and of one with a command running
// (issue 22: the second is a freeze on every driver, the first a checkpoint where the driver
// has one).
func pauseRows(ctx context.Context, c *lbb.Client, n int, prefix string, rows []bench.Row, notes []string) ([]bench.Row, []string) {
	for _, busy := range []bool{false, true} {
		s, err := bench.PauseResume(ctx, c, n, lbb.CreateParams{Base: "lbb/shell"}, busy)
		if err != nil {
			notes = append(notes, prefix+"pause + resume: "+err.Error())
			continue
		}
		what := "idle"
		if busy {
			what = "one command running"
		}
		rows = append(rows, bench.Row{Metric: prefix + "pause + resume (API), " + what, LBB: s})
	}
	return rows, notes
}

// gvisorPause starts a server of its own with --runtime gvisor and times pause + resume,
// snapshot and fork on it.
func gvisorPause(ctx context.Context, n int, prefix string, rows []bench.Row, notes []string) ([]bench.Row, []string) {
	return runtimePause(ctx, "gvisor", n, prefix, rows, notes)
}

// snapshotRows times snapshot and fork of an idle sandbox and of one with a command running.
func snapshotRows(ctx context.Context, c *lbb.Client, n int, prefix string, rows []bench.Row, notes []string) ([]bench.Row, []string) {
	for _, busy := range []bool{false, true} {
		what := "idle"
		if busy {
			what = "one command running"
		}
		snap, fork, err := bench.SnapshotFork(ctx, c, n, lbb.CreateParams{Base: "lbb/shell"}, busy)
		if err != nil {
			notes = append(notes, prefix+"snapshot and fork: "+err.Error())
		}
		rows = append(rows, bench.Row{Metric: prefix + "snapshot (API), " + what, LBB: snap},
			bench.Row{Metric: prefix + "fork of a snapshot (API), " + what, LBB: fork})
	}
	return rows, notes
}

// runtimePause starts a server of its own with --runtime name and times pause + resume on
// it, and where the runtime has them (not ns) snapshot and fork.
func runtimePause(ctx context.Context, name string, n int, prefix string, rows []bench.Row, notes []string) ([]bench.Row, []string) {
	fmt.Fprintf(os.Stderr, "%s: pause + resume, idle and with a command running (%d times each)…\n", name, n)
	var cf clientFlags
	done, err := cf.serveOwn(ctx, n+20, "--runtime", name, "--pool=false")
	if err != nil {
		return rows, append(notes, name+" pause: "+err.Error())
	}
	defer done()
	c, err := cf.clientWith(benchClient)
	if err != nil {
		return rows, append(notes, name+" pause: "+err.Error())
	}
	rows, notes = pauseRows(ctx, c, n, prefix, rows, notes)
	if name != "ns" {
		rows, notes = snapshotRows(ctx, c, n, prefix, rows, notes)
	}
	return rows, notes
}

// gvisorOneCall starts a server of its own with --runtime gvisor (the pool on when warm)
// and times n one-call runs of p on it.
func gvisorOneCall(ctx context.Context, n int, warm bool, p lbb.RunParams, notes *[]string) (bench.Row, error) {
	// gVisor's kernel names itself in its release.
	return runtimeOneCall(ctx, "gvisor", func(r string) bool { return strings.Contains(r, "gvisor") }, n, warm, p, notes)
}

// runtimeOneCall starts a server of its own with --runtime name (the pool on when warm) and
// times n one-call runs of p on it. A first, untimed run checks that runs land on a kernel
// whose release kernel accepts.
func runtimeOneCall(ctx context.Context, name string, kernel func(release string) bool, n int, warm bool, p lbb.RunParams, notes *[]string) (bench.Row, error) {
	var extra []string
	kind := "cold"
	if warm {
		kind = "warm"
	} else {
		extra = append(extra, "--pool=false")
	}
	fmt.Fprintf(os.Stderr, "%s: one-call Python sum(input), %s, on a server run with --runtime %s %s (%d times)…\n", name, kind, name, strings.Join(extra, " "), n)
	var cf clientFlags
	done, err := cf.serveOwn(ctx, n+20, append([]string{"--runtime", name}, extra...)...)
	if err != nil {
		return bench.Row{}, err
	}
	defer done()
	url, key := cf.url, cf.apiKey
	c, err := cf.clientWith(benchClient)
	if err != nil {
		return bench.Row{}, err
	}
	// Warm runs wait (untimed) for a ready slot; a gVisor slot takes seconds to build (the
	// Sentry, then numpy and pandas), a microvm's more (a boot).
	var before func()
	if warm {
		before = func() {
			if !bench.WaitPoolReady(ctx, url, key, "python", 1, 5*time.Minute) {
				*notes = append(*notes, name+": a warm run found no ready python slot within 5 min")
			}
		}
		before()
	}
	r, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "import os\ndef run(input, config):\n    return {'release': os.uname().release, 'warm': b'--lbb-prestart' in open('/proc/self/cmdline', 'rb').read().split(b'\\0')}\n"})
	if err != nil {
		return bench.Row{}, fmt.Errorf("the check run: %w", err)
	}
	var got struct {
		Release string
		Warm    bool
	}
	json.Unmarshal(r.Result, &got)
	if !r.OK || !kernel(got.Release) || got.Warm != warm {
		return bench.Row{}, fmt.Errorf("the check run landed on kernel %q, warm=%v (ok=%v %s): not what the row would claim", got.Release, got.Warm, r.OK, r.Stderr.Tail)
	}
	s := bench.OneCallPaced(ctx, c, "lbb "+name, n, p, wantJSON("6"), before)
	return bench.Row{Metric: "one-call Python sum(input), " + kind, LBB: s}, nil
}
