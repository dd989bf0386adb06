//go:build linux

package microvm_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/microvm"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestMain lets this test binary be QEMU's jail, as cmd/lbb is in production.
func TestMain(m *testing.M) {
	microvm.MaybeJail()
	testkit.Main(m, nil)
}

// requires skips a test that cannot run here, saying why.
func requires(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("the runtime suites start real sandboxes; skipped in -short mode")
	}
	testkit.RequiresRoot(t)
}

func newConfig(t testing.TB) microvm.Config {
	return microvm.Config{
		StateDir:     runtimetest.StateDir(t),
		AgentPath:    testkit.Agent(t),
		CgroupParent: "lbb-microvm-test",
		Logger:       runtimetest.Logger(),
	}
}

// newDriver skips a test that cannot run here, then answers a driver whose requirements
// hold, and the base image.
func newDriver(t testing.TB) (*microvm.Driver, string) {
	t.Helper()
	requires(t)
	img := runtimetest.FindImage(t)
	d := microvm.New(newConfig(t))
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(t, "%v", err)
	}
	return d, img
}

// box is a started sandbox with a client for the tests of this file.
type box struct {
	t  testing.TB
	id string
	sb runtime.Sandbox
	c  *agent.Client
}

func start(t testing.TB, sb runtime.Sandbox, err error) *box {
	t.Helper()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &box{t: t, id: sb.ID(), sb: sb, c: c}
}

func boot(t testing.TB, ctx context.Context, d *microvm.Driver, spec runtime.Spec) *box {
	t.Helper()
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyed(t, d, spec.ID) })
	sb, err := d.Start(ctx, spec.ID)
	return start(t, sb, err)
}

func destroyed(t testing.TB, d *microvm.Driver, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("destroy %s: %v", id, err)
	}
	for _, l := range d.Leftovers(id) {
		t.Errorf("after destroy of %s: %s", id, l)
	}
}

// sh runs script and answers its stdout; it fails the test unless the script exits 0.
func (b *box) sh(script string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("c%d", time.Now().UnixNano()), Argv: []string{"/bin/sh", "-c", script}}, nil)
	if err != nil {
		b.t.Fatalf("exec %q: %v", script, err)
	}
	var out, errb strings.Builder
	ex, err := p.Wait(&out, &errb)
	if err != nil || ex.ExitCode != 0 || ex.StartError != "" {
		b.t.Fatalf("%q: %+v %v\nstdout: %s\nstderr: %s", script, ex, err, out.String(), errb.String())
	}
	return out.String()
}

func TestRuntime(t *testing.T) {
	requires(t)
	cfg := newConfig(t)
	d := microvm.New(cfg)
	k, err := images.CurrentKernel(d.Config().ImagesDir)
	if err != nil {
		testkit.SkipPrivileged(t, "%v", err)
	}
	runtimetest.Run(t, func(t *testing.T) runtime.Driver { return microvm.New(cfg) }, runtimetest.Options{
		Leftovers: func(id string) []string { return microvm.New(cfg).Leftovers(id) },
		HostFiles: []string{cfg.AgentPath, filepath.Join(cfg.StateDir, ".initrd", "*"), k.Vmlinuz()},
		Kernel:    k.Recipe.Release,
		Share:     true,
		Slow:      slowUnderTCG(d),
	})
}

// slowUnderTCG names the cases kept for hosts where KVM boots a guest: under TCG they take
// minutes (1 GiB of stdout through an emulated virtio-serial port: about 3.5 min here).
func slowUnderTCG(d *microvm.Driver) map[string]string {
	if accel, _ := d.Accel(); accel == "kvm" {
		return nil
	}
	return map[string]string{"stdout flood": "KVM (under TCG 1 GiB through the emulated channel takes minutes)"}
}

func fmtSscan(s string, v any) (int, error) { return fmt.Sscan(s, v) }

// diskUse is what the files under dir take on disk (sparse files count their data).
func diskUse(dir string) string {
	out, err := exec.Command("du", "-sh", dir).Output()
	if err != nil {
		return err.Error()
	}
	return strings.Fields(string(out))[0]
}
