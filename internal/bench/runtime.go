package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"

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
}

const pySum = "def run(input, config):\n    return sum(input)\n"

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
	args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/workspace", "--chdir", "/workspace"}
	return Bare(append(append([]string{bwrap}, args...), argv...)...)
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
	withBwrap := func(base []Sample, name string, f func() error) []Sample {
		if o.Bwrap == "" {
			return base
		}
		return append(base, Time(name, o.N, f))
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
			if err := o.Driver.Create(ctx, runtime.Spec{ID: id, Image: o.Rootfs}); err != nil {
				return err
			}
			sb, err := o.Driver.Start(ctx, id)
			if err != nil {
				return err
			}
			c, err := agent.NewClient(sb.Conn())
			if err != nil {
				return err
			}
			defer c.Close()
			return f(c)
		}
	}
	execTrue := func(c *agent.Client) error {
		p, err := c.Exec(ctx, agent.ExecRequest{ID: ids.New("cmd"), Argv: []string{"/bin/true"}}, nil)
		if err != nil {
			return err
		}
		ex, err := p.Wait(io.Discard, io.Discard)
		if err == nil && (ex.ExitCode != 0 || ex.StartError != "") {
			err = fmt.Errorf("/bin/true: exit %d %s", ex.ExitCode, ex.StartError)
		}
		return err
	}
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

	logf("create → first exec of /bin/true (%d times)…", o.N)
	lbb := Time("lbb "+o.Driver.Name(), o.N, cold(execTrue))
	destroyAll()
	base := []Sample{Time("bare fork/exec", o.N, bare("/bin/true")), Time("chroot", o.N, chroot("/bin/true"))}
	base = withBwrap(base, "bwrap", bwrap("/bin/true"))
	rows = append(rows, Row{Metric: "create → first exec /bin/true", LBB: lbb, Baselines: base})

	logf("exec round trip of /bin/true in a running sandbox (%d times)…", o.N*5)
	var rt Sample
	err := cold(func(c *agent.Client) error {
		rt = Time("lbb "+o.Driver.Name(), o.N*5, func() error { return execTrue(c) })
		return nil
	})()
	destroyAll()
	if err != nil {
		return rows, fmt.Errorf("exec round trip: %w", err)
	}
	rows = append(rows, Row{Metric: "exec round trip /bin/true", LBB: rt,
		Baselines: []Sample{Time("bare fork/exec", o.N*5, bare("/bin/true"))}})

	logf("cold Python run(input, config) = sum([1,2,3]) (%d times)…", o.N)
	py := Time("lbb "+o.Driver.Name(), o.N, cold(runSum))
	destroyAll()
	pyArgv := []string{"python3", "-c", "print(sum([1,2,3]))"}
	base = []Sample{Time("chroot python3 -c", o.N, chroot(pyArgv...))}
	base = withBwrap(base, "bwrap python3 -c", bwrap(pyArgv...))
	rows = append(rows, Row{Metric: "cold Python run sum(input)", LBB: py, Baselines: base})
	return rows, nil
}
