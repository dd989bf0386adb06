//go:build linux

package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// RuntimeOptions configures the runtime benchmark.
type RuntimeOptions struct {
	Driver runtime.Driver
	// Rootfs is the base image; baselines run on the same image.
	Rootfs string
	N      int
	// Bwrap is the bubblewrap binary; empty skips that baseline.
	Bwrap string
	Log   io.Writer
	// Prefix starts every metric's name ("gvisor: "), for a second driver beside the first.
	Prefix string
	// Baselines, when set, is shared with the other sections: each baseline is measured once.
	Baselines *Baselines
	// Idle, when positive, also holds that many idle sandboxes and measures their memory
	// (IdleMemory) in the cgroups under CgroupParent (the driver's).
	Idle         int
	CgroupParent string
}

// Bare runs argv as a plain process.
func Bare(argv ...string) func() error {
	return func() error { return exec.Command(argv[0], argv[1:]...).Run() }
}

// Chroot runs argv chrooted into rootfs: the same binaries as a sandbox, no isolation.
func Chroot(rootfs string, argv ...string) func() error {
	return Bare(append([]string{"chroot", rootfs}, argv...)...)
}

// Bwrap runs argv under bubblewrap on rootfs, unsharing every namespace.
func Bwrap(bwrap, rootfs string, argv ...string) func() error {
	return Bare(BwrapArgv(bwrap, rootfs, argv...)...)
}

// Runtime measures the driver directly (no server): create → first exec, exec round trip,
// and a cold Python run, each beside a bare process and bwrap doing the same work.
func Runtime(ctx context.Context, o RuntimeOptions) ([]Row, error) {
	if o.N <= 0 {
		o.N = 20
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	bare, chroot, bwrap := Bare, func(argv ...string) func() error { return Chroot(o.Rootfs, argv...) },
		func(argv ...string) func() error { return Bwrap(o.Bwrap, o.Rootfs, argv...) }
	base := o.Baselines.Time
	withBwrap := func(b []Sample, name string, f func() error) []Sample {
		if o.Bwrap == "" {
			return b
		}
		return append(b, base(name, o.N, f))
	}

	// One sandbox's cold start: create, start, agent answering, then f. Its destroy comes
	// after the timing (destroyAll), as a one-call run answers before its sandbox is gone.
	var made []string
	destroyAll := func() {
		for _, id := range made {
			o.Driver.Destroy(context.Background(), id)
		}
		made = nil
	}
	cold := func(f func(c *agent.Client) error) func() error {
		return func() error {
			id := ids.New("sbx")
			made = append(made, id)
			c, _, err := startSandbox(ctx, o.Driver, runtime.Spec{ID: id, Image: o.Rootfs})
			if err != nil {
				return err
			}
			defer c.Close()
			return f(c)
		}
	}
	execTrue := func(c *agent.Client) error { return agentExecOK(ctx, c, "/bin/true") }
	runSum := func(c *agent.Client) error {
		p, err := c.Run(ctx, agent.RunRequest{ID: ids.New("cmd"), Language: "python", Code: pySum, Input: []byte("[1,2,3]")})
		if err != nil {
			return err
		}
		ex, err := p.Wait(io.Discard, io.Discard)
		if err == nil && (!ex.OK || string(ex.Result) != "6") {
			err = fmt.Errorf("run: ok=%v result=%s error=%s", ex.OK, ex.Result, ex.Error)
		}
		return err
	}

	var rows []Row
	name := "lbb " + o.Driver.Name()

	logf("%screate → first exec of /bin/true (%d times)…", o.Prefix, o.N)
	lbb := Time(name, o.N, cold(execTrue))
	destroyAll()
	trueBase := []Sample{base("bare fork/exec", o.N, bare("/bin/true")), base("chroot", o.N, chroot("/bin/true"))}
	trueBase = withBwrap(trueBase, "bwrap", bwrap("/bin/true"))
	rows = append(rows, Row{Metric: o.Prefix + "create → first exec /bin/true", LBB: lbb, Baselines: trueBase})

	logf("%sexec round trip of /bin/true in a running sandbox (%d times)…", o.Prefix, o.N*5)
	var rt Sample
	err := cold(func(c *agent.Client) error {
		rt = Time(name, o.N*5, func() error { return execTrue(c) })
		return nil
	})()
	destroyAll()
	if err != nil {
		return rows, fmt.Errorf("exec round trip: %w", err)
	}
	rows = append(rows, Row{Metric: o.Prefix + "exec round trip /bin/true", LBB: rt,
		Baselines: []Sample{base("bare fork/exec", o.N*5, bare("/bin/true"))}})

	logf("%scold Python run(input, config) = sum([1,2,3]) (%d times)…", o.Prefix, o.N)
	py := Time(name, o.N, cold(runSum))
	destroyAll()
	pyArgv := []string{"python3", "-c", "print(sum([1,2,3]))"}
	pyBase := []Sample{base("chroot python3 -c", o.N, chroot(pyArgv...))}
	pyBase = withBwrap(pyBase, "bwrap python3 -c", bwrap(pyArgv...))
	rows = append(rows, Row{Metric: o.Prefix + "cold Python run sum(input)", LBB: py, Baselines: pyBase})

	if o.Idle > 0 {
		logf("%sholding %d idle sandboxes: their memory…", o.Prefix, o.Idle)
		row, err := IdleMemory(ctx, o.Driver, o.Rootfs, o.CgroupParent, o.Idle)
		if err != nil {
			return rows, fmt.Errorf("idle memory: %w", err)
		}
		row.Metric = o.Prefix + row.Metric
		rows = append(rows, row)
	}
	return rows, nil
}

// startSandbox creates and starts spec on d and connects to its agent.
func startSandbox(ctx context.Context, d runtime.Driver, spec runtime.Spec) (*agent.Client, runtime.Sandbox, error) {
	if err := d.Create(ctx, spec); err != nil {
		return nil, nil, err
	}
	sb, err := d.Start(ctx, spec.ID)
	if err != nil {
		return nil, nil, err
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		return nil, nil, err
	}
	return c, sb, nil
}

// agentExecOK runs argv through the agent and checks that it exits 0.
func agentExecOK(ctx context.Context, c *agent.Client, argv ...string) error {
	p, err := c.Exec(ctx, agent.ExecRequest{ID: ids.New("cmd"), Argv: argv}, nil)
	if err != nil {
		return err
	}
	var stderr strings.Builder
	ex, err := p.Wait(io.Discard, &stderr)
	if err == nil && (ex.ExitCode != 0 || ex.StartError != "") {
		err = fmt.Errorf("%v: exit %d %s %s", argv, ex.ExitCode, ex.StartError, stderr.String())
	}
	return err
}
