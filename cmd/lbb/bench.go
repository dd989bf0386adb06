//go:build linux

package main

import (
	"context"
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
)

func init() {
	commands["bench"] = command{summary: "Benchmarks beside bare-process and bwrap baselines (--json for tracking)", run: runBench}
}

const benchUsage = `Usage: lbb bench [--n 20] [--json FILE] [--agent PATH] [--images-dir DIR]
       lbb bench load [flags]   (the load check: see lbb load --help)

Measures, in one invocation, each figure beside baselines doing the same work on the same image:
  create → first exec of /bin/true      (bare fork/exec, chroot, bwrap)
  exec round trip of /bin/true           (bare fork/exec)
  cold Python run(input, config)         (chroot python3 -c, bwrap python3 -c)
and prints medians, p90, p99 and p50 ratios. Needs root (the ns driver).
`

func runBench(args []string) error {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(args[1:])
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }
	n := fs.Int("n", 20, "samples per metric")
	jsonOut := fs.String("json", "", "also write the figures as JSON to this file")
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
	state, err := os.MkdirTemp("", "lbb-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	d := ns.New(ns.Config{StateDir: state, AgentPath: *agentPath, CgroupParent: "lbb-bench"})
	if err := runtime.CheckRequirements(d); err != nil {
		return err
	}
	bwrap, _ := exec.LookPath("bwrap")
	rep := &bench.Report{Started: time.Now(), Load: loadavg()}
	if bwrap == "" {
		rep.Notes = append(rep.Notes, "bwrap not found: its baselines are skipped (apt-get install bubblewrap)")
	}
	rows, err := bench.Runtime(ctx, bench.RuntimeOptions{Driver: d, Rootfs: img.Rootfs, N: *n, Bwrap: bwrap, Log: os.Stderr})
	rep.Rows = append(rep.Rows, rows...)
	rep.Print(os.Stdout)
	if *jsonOut != "" {
		f, ferr := os.Create(*jsonOut)
		if ferr != nil {
			return ferr
		}
		defer f.Close()
		if ferr := rep.JSON(f); ferr != nil {
			return ferr
		}
	}
	return err
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
	return strings.Join(f[:3], " ") + fmt.Sprintf(" (%d cpus)", numCPU())
}

func numCPU() int { return goruntime.NumCPU() }

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
