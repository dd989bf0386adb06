package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// fleetClients is how many clients the fleet figure's sustained runs have: enough to fill
// two hosts' run slots (four per CPU each, by default).
const fleetClients = 16

// benchFleet is the two-host figure (--only fleet): two `lbb host` processes on loopback, each
// with its own data directory, and sustained one-call sum(input) runs for d with
// fleetClients clients through a control plane of one host (a), and through one of both (a
// and b), each for d in two halves: runs/s with two hosts ÷ with one. Both hosts are this machine, so they share its
// CPUs: the ratio is not what a second machine adds.
func benchFleet(ctx context.Context, d time.Duration) (rows []bench.Row, notes []string) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	if d <= 0 {
		return nil, []string{"fleet: --sustain 0 skips the two-host figure"}
	}
	type host struct{ name, url, token string }
	var hosts []host
	for _, name := range []string{"a", "b"} {
		url, token, done, err := startBenchHost(ctx, name)
		if err != nil {
			return nil, []string{"fleet: " + err.Error()}
		}
		defer done()
		hosts = append(hosts, host{name, url, token})
	}
	p := lbb.RunParams{Code: sumCode, Input: []int{1, 2, 3}}
	// One host, two, two, one, each for half of d: the machine's load drifts (other work on
	// it), and this order gives both the same share of the drift.
	samples, runs := map[int]*bench.Sample{1: {}, 2: {}}, map[int]float64{}
	for _, k := range []int{1, 2, 2, 1} {
		var urls, tokens []string
		for _, h := range hosts[:k] {
			urls, tokens = append(urls, h.name+"="+h.url), append(tokens, h.token)
		}
		var cf clientFlags
		done, err := cf.serveOwn(ctx, fleetClients, "--host-agent", strings.Join(urls, ","), "--host-agent-token", strings.Join(tokens, ","))
		if err != nil {
			return nil, append(notes, fmt.Sprintf("fleet: a control plane of %d host(s): %v", k, err))
		}
		c, err := cf.clientWith(benchClient)
		if err != nil {
			done()
			return nil, append(notes, "fleet: "+err.Error())
		}
		// Warm up: each host's pool is ready and the first runs' costs are not counted.
		bench.OneCall(ctx, c, "warm", 2*k, p, wantJSON("6"))
		logf("fleet: sustained one-call sum(input) runs for %v with %d clients on %d host(s)…", d/2, fleetClients, k)
		s, rate := bench.SustainedRuns(ctx, c, fleetClients, d/2, p, wantJSON("6"))
		done()
		logf("fleet:   %.1f runs/s", rate)
		samples[k].Durs, samples[k].Errors = append(samples[k].Durs, s.Durs...), samples[k].Errors+s.Errors
		runs[k] += rate * (d / 2).Seconds()
	}
	for _, k := range []int{1, 2} {
		s := *samples[k]
		s.Name = fmt.Sprintf("lbb, %d clients", fleetClients)
		rate := runs[k] / d.Seconds()
		row := bench.Row{Metric: fmt.Sprintf("fleet: sustained one-call sum(input), %d clients, %d host(s)", fleetClients, k), LBB: s,
			Values: map[string]float64{"runs_per_s": rate}, Extra: fmt.Sprintf("%.1f runs/s over %v", rate, d)}
		if s.Errors > 0 {
			notes = append(notes, fmt.Sprintf("fleet: %d of the runs on %d host(s) failed", s.Errors, k))
		}
		if k == 2 && runs[1] > 0 {
			row.Values["two_hosts_vs_one"] = runs[2] / runs[1]
			row.Extra += fmt.Sprintf("; two hosts ÷ one: %.2f×", runs[2]/runs[1])
		}
		rows = append(rows, row)
	}
	notes = append(notes, fmt.Sprintf("fleet: both hosts are lbb host processes on this machine's loopback, sharing its %d CPUs: "+
		"the ratio is not what a second machine adds; expect near 1× here (below when the second host's run slots only add "+
		"contention for the same CPUs), and noise with the machine's load", goruntime.NumCPU()))
	return rows, notes
}

const sumCode = "def run(input, config):\n    return sum(input)"

var hostAgentAddr = regexp.MustCompile(`lbb: host agent on (https?://\S+)`)

// startBenchHost starts `lbb host` (the server binary) on a free loopback port with a data
// directory and a cgroup parent of its own, and answers its URL and token.
func startBenchHost(ctx context.Context, name string) (url, token string, done func(), err error) {
	exe := serveBinary
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return "", "", nil, err
		}
	}
	dir, err := os.MkdirTemp("", "lbb-bench-host-")
	if err != nil {
		return "", "", nil, err
	}
	os.Chmod(dir, 0o711)
	token = rand.Text()
	parent := fmt.Sprintf("lbb-bench-%d-host-%s", os.Getpid(), name)
	cmd := exec.Command(exe, "host", "--listen", "127.0.0.1:0", "--token", token, "--data-dir", filepath.Join(dir, "data"),
		"--images-dir", imagesDirFromEnv(), "--cgroup-parent", parent,
		"--pool-gvisor-min", "0", "--log-level", "warn")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", "", nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, err
	}
	done = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(dir)
		// The host's cgroup parents (its sandboxes' are gone with it): empty ones only.
		for _, pat := range []string{parent, parent + "-*"} {
			dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", pat))
			for _, d := range dirs {
				os.Remove(d)
			}
		}
	}
	if url, err = awaitLine(ctx, stderr, hostAgentAddr, 5*time.Minute, "lbb host "+name); err != nil {
		done()
		return "", "", nil, err
	}
	fmt.Fprintf(os.Stderr, "fleet: host %s on %s from %s\n", name, url, dir)
	return url, token, done, nil
}
