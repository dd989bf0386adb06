package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// cpuacctRoot is where cgroup v1's cpuacct hierarchy is mounted.
const cpuacctRoot = "/sys/fs/cgroup/cpuacct"

// CPUAcct meters the CPU a server of the benchmark's own spends: the server process itself
// and, since its sandboxes' cgroups are made below it (lbb serve --cgroup-parent
// <Name>/sandboxes), every sandbox it runs or builds for its pool. cpuacct charges a group
// and all its ancestors at once, so a sandbox's usage stays counted after its group is gone.
type CPUAcct struct {
	// Name is the group, relative to the hierarchy's root.
	Name string
}

// NewCPUAcct makes the group name in cpuacct's hierarchy; nil when the host has no cgroup v1
// cpuacct hierarchy (the CPU figures are then skipped, saying so).
func NewCPUAcct(name string) (*CPUAcct, error) {
	if _, err := os.Stat(filepath.Join(cpuacctRoot, "cpuacct.usage")); err != nil {
		return nil, fmt.Errorf("no cgroup v1 cpuacct hierarchy at %s", cpuacctRoot)
	}
	if err := os.MkdirAll(filepath.Join(cpuacctRoot, name), 0o755); err != nil {
		return nil, err
	}
	return &CPUAcct{Name: name}, nil
}

// SandboxParent is the cgroup parent the metered server's sandboxes go under.
func (a *CPUAcct) SandboxParent() string { return a.Name + "/sandboxes" }

// Add moves process pid (all its threads) into the group; what it forks after stays in it.
func (a *CPUAcct) Add(pid int) error {
	return os.WriteFile(filepath.Join(cpuacctRoot, a.Name, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// Usage is the CPU time the group and everything below it used.
func (a *CPUAcct) Usage() (time.Duration, error) { return a.usageOf(a.Name) }

// SandboxUsage is the CPU time the server's ns sandboxes used (pool slots included).
func (a *CPUAcct) SandboxUsage() time.Duration {
	if a == nil {
		return 0
	}
	d, _ := a.usageOf(a.SandboxParent())
	return d
}

func (a *CPUAcct) usageOf(group string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(cpuacctRoot, group, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}

// Remove removes the group and the sandbox parents the server made below it, in every
// hierarchy (they are empty once the server stopped).
func (a *CPUAcct) Remove() error {
	var errs []error
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, d := range dirs {
		sb := a.SandboxParent()
		for _, g := range []string{sb, sb + "-gvisor", sb + "-microvm", a.Name} {
			if err := removeGroup(filepath.Join(d, g)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeGroup removes an empty cgroup, waiting a little for processes that have been waited
// for but are still leaving it (EBUSY meanwhile).
func removeGroup(dir string) error {
	var err error
	for range 50 {
		if err = os.Remove(dir); !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Meter measures the CPU the metered group spends while f runs.
func (a *CPUAcct) Meter(f func()) (time.Duration, error) {
	if a == nil {
		f()
		return 0, errors.New("not metered")
	}
	before, err := a.Usage()
	if err != nil {
		return 0, err
	}
	f()
	after, err := a.Usage()
	return after - before, err
}

// Spawns is how fast a process can be started and waited for, clients at a time: the rate,
// and the CPU (user and system, its waited-for children's included) each one used.
type Spawns struct {
	Rate     float64
	CPUEach  time.Duration
	Count    int
	Errors   int
	Duration time.Duration
}

// SpawnRate starts argv clients at a time, again and again for d. With acct, each process
// starts in acct's group (a shell joins it, then execs argv: nothing argv forks escapes it)
// and the CPU is acct's: bwrap's sandboxed child is in a pid namespace of its own, whose CPU
// wait4 does not report.
func SpawnRate(ctx context.Context, acct *CPUAcct, clients int, d time.Duration, argv ...string) Spawns {
	var (
		mu     sync.Mutex
		cpu    time.Duration
		before time.Duration
	)
	if acct != nil {
		before, _ = acct.Usage()
	}
	s, wall := repeat(ctx, clients, d, func() error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		if acct != nil {
			procs := filepath.Join(cpuacctRoot, acct.Name, "cgroup.procs")
			cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, procs}, argv...)...)
		}
		if err := cmd.Run(); err != nil {
			return err
		}
		mu.Lock()
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		mu.Unlock()
		return nil
	})
	out := Spawns{Count: len(s.Durs), Errors: s.Errors, Duration: wall, Rate: float64(len(s.Durs)) / wall.Seconds()}
	if acct != nil {
		if after, err := acct.Usage(); err == nil {
			cpu = after - before
		}
	}
	if out.Count > 0 {
		out.CPUEach = cpu / time.Duration(out.Count)
	}
	return out
}

// repeat calls f from clients goroutines, again and again for d: the latencies of the calls
// that succeeded, the failures, and how long it all took.
func repeat(ctx context.Context, clients int, d time.Duration, f func() error) (Sample, time.Duration) {
	var (
		mu sync.Mutex
		s  Sample
		wg sync.WaitGroup
	)
	t0 := time.Now()
	end := t0.Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				err := f()
				el := time.Since(t)
				mu.Lock()
				if err != nil {
					s.Errors++
				} else {
					s.Durs = append(s.Durs, el)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return s, time.Since(t0)
}

// BwrapArgv is argv under bubblewrap on rootfs, as Bwrap runs it.
func BwrapArgv(bwrap, rootfs string, argv ...string) []string {
	args := []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/workspace", "--chdir", "/workspace"}
	return append(args, argv...)
}

// SustainedRuns runs one-call runs of p from clients goroutines for d, checking each answer
// with ok: the latencies, and how many ended well per second.
func SustainedRuns(ctx context.Context, c *lbb.Client, clients int, d time.Duration, p lbb.RunParams, ok func(*lbb.Run) error) (Sample, float64) {
	s, wall := repeat(ctx, clients, d, func() error { return oneCall(ctx, c, p, ok) })
	s.Name = fmt.Sprintf("lbb, %d clients", clients)
	return s, float64(len(s.Durs)) / wall.Seconds()
}
