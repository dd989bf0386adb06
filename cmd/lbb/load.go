//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	"github.com/littlebigbrain/lbb/internal/loadtest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	commands["load"] = command{summary: "Load check: N concurrent one-call runs; 0 lost, 0 run twice; p50/p99, runs/s", run: runLoad}
}

const loadUsage = `Usage: lbb load [--n 100] [--concurrency N] [--serve] [--json]

Sends N one-call runs at once (python sum), then counts the records: every run must have
exactly one command record, none lost, none run twice (a replay of every key must answer the
same command). Prints p50 and p99 latency and runs/s; exits 1 when the check fails.

Against the server at --url / LBB_URL (with --api-key / LBB_API_KEY), or with --serve
against a fresh lbb serve of its own (ns runtime, its cap of running sandboxes per graph
raised to N), started from this binary in a temporary data directory and stopped after.
`

func runLoad(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("load", loadUsage)
	n := fs.Int("n", 100, "how many runs")
	conc := fs.Int("concurrency", 0, "how many at a time (default: all)")
	serveOwn := fs.Bool("serve", false, "start a server of its own for the check")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *serveOwn {
		done, err := cf.serveOwn(ctx, *n)
		if err != nil {
			return err
		}
		defer done()
	}
	// 429s (the graph's cap of running sandboxes) are retried with the same key.
	c, err := cf.clientWith(lbb.Options{MaxRetries: 1000, UserAgent: "lbb-load"})
	if err != nil {
		return err
	}
	var log io.Writer = os.Stderr
	res, err := loadtest.Run(ctx, loadtest.Options{Client: c, N: *n, Concurrency: *conc, Log: log})
	if err != nil {
		return err
	}
	if cf.json {
		b, _ := res.JSON()
		fmt.Println(string(b))
	} else {
		fmt.Print(res.String())
	}
	if !res.OK() {
		return exitError{1, "the load check failed"}
	}
	return nil
}

// serveOwn points the client flags at a fresh lbb serve of its own (serveForLoad); done
// stops it.
func (cf *clientFlags) serveOwn(ctx context.Context, n int, extra ...string) (done func(), err error) {
	cf.url, cf.apiKey, cf.acct, done, err = serveForLoad(ctx, n, extra...)
	cf.graph = "main"
	return done, err
}

// serveBinary is the lbb that serveForLoad starts ("" this executable): lbb bench
// --server-binary measures another build's server with this build's benchmark.
var serveBinary string

// serves numbers the servers of this process, to name their cgroups apart.
var serves atomic.Int64

var serveAddr = regexp.MustCompile(`lbb: serving on (http://\S+)`)

// serveForLoad starts `lbb serve` in a temporary data directory on a free port; extra flags
// go after the defaults.
//
// When the host has cgroup v1's cpuacct hierarchy, the server runs in a cgroup of its own with
// its sandboxes' cgroups below it (--cgroup-parent), and acct meters them all; else acct is nil.
func serveForLoad(ctx context.Context, n int, extra ...string) (url, key string, acct *bench.CPUAcct, done func(), err error) {
	exe := serveBinary
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return "", "", nil, nil, err
		}
	}
	dir, err := os.MkdirTemp("", "lbb-load-")
	if err != nil {
		return "", "", nil, nil, err
	}
	os.Chmod(dir, 0o711)
	data := filepath.Join(dir, "data")
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", data, "--images-dir", imagesDirFromEnv(),
		"--max-running-per-graph", strconv.Itoa(max(n, 10)), "--log-level", "warn"}
	acct, aerr := bench.NewCPUAcct(fmt.Sprintf("lbb-bench-%d-%d", os.Getpid(), serves.Add(1)))
	if aerr == nil && serveBinary != "" {
		// An older build's server may not know --cgroup-parent.
		if help, _ := exec.Command(exe, "serve", "--help").CombinedOutput(); !strings.Contains(string(help), "-cgroup-parent") {
			acct.Remove()
			acct, aerr = nil, fmt.Errorf("%s serve has no --cgroup-parent", exe)
		}
	}
	if aerr != nil {
		fmt.Fprintf(os.Stderr, "load: the server's CPU is not metered: %v\n", aerr)
	} else {
		args = append(args, "--cgroup-parent", acct.SandboxParent())
	}
	cmd := exec.Command(exe, append(args, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", "", nil, nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, nil, err
	}
	if acct != nil {
		// Before it serves: every thread and child it makes is metered.
		if err := acct.Add(cmd.Process.Pid); err != nil {
			fmt.Fprintf(os.Stderr, "load: the server's CPU is not metered: %v\n", err)
			acct.Remove()
			acct = nil
		}
	}
	done = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(dir)
		if acct != nil {
			if err := acct.Remove(); err != nil {
				fmt.Fprintf(os.Stderr, "load: removing the server's cgroups: %v\n", err)
			}
		}
	}
	if url, err = awaitLine(ctx, stderr, serveAddr, 10*time.Minute, "lbb serve"); err != nil {
		done()
		return "", "", nil, nil, err
	}
	b, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		done()
		return "", "", nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "load: serving on %s from %s\n", url, data)
	return url, strings.TrimSpace(string(b)), acct, done, nil
}

// awaitLine reads r (a process's stderr, read to its end after) until a line matches re, and
// answers the line's first group; after timeout or ctx's end, an error with what name wrote.
func awaitLine(ctx context.Context, r io.Reader, re *regexp.Regexp, timeout time.Duration, name string) (string, error) {
	found := make(chan string, 1)
	var mu sync.Mutex
	var tail []string
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
				continue
			}
			mu.Lock()
			if len(tail) < 20 {
				tail = append(tail, line)
			}
			mu.Unlock()
		}
	}()
	select {
	case m := <-found:
		return m, nil
	case <-time.After(timeout):
		mu.Lock()
		defer mu.Unlock()
		return "", fmt.Errorf("%s did not start:\n%s", name, strings.Join(tail, "\n"))
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func imagesDirFromEnv() string {
	if d := os.Getenv("LBB_IMAGES_DIR"); d != "" {
		return d
	}
	d := os.Getenv("LBB_DATA_DIR")
	if d == "" {
		d = "/var/lib/lbb"
	}
	return filepath.Join(d, "images")
}
