//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/littlebigbrain/lbb/internal/bench"
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/microvm"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

type microvmBench struct {
	rootfs, bwrap, agent string
	n, idle, cpN, cpMiB  int
	baselines            *bench.Baselines
}

// benchMicrovm measures the microvm driver directly (the runtime figures, idle memory,
// checkpoint and restore) and one-call runs on servers of its own run with --runtime
// microvm. Every metric names the acceleration: "microvm (tcg)" figures are of an emulated
// machine, not what KVM gives.
func benchMicrovm(ctx context.Context, b microvmBench) (rows []bench.Row, notes []string) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	state, err := os.MkdirTemp("", "lbb-bench-microvm-")
	if err != nil {
		return nil, []string{"microvm: " + err.Error()}
	}
	defer os.RemoveAll(state)
	os.Chmod(state, 0o711)
	const cgroupParent = "lbb-bench-microvm"
	d := microvm.New(microvm.Config{StateDir: filepath.Join(state, "sandboxes"), AgentPath: b.agent,
		ImagesDir: images.DefaultDir(""), CgroupParent: cgroupParent})
	if err := runtime.CheckRequirements(d); err != nil {
		logf("microvm: skipped: %v", err)
		return nil, []string{"microvm: skipped: " + err.Error()}
	}
	accel, why := d.Accel()
	prefix := fmt.Sprintf("microvm (%s): ", accel)
	if accel == "tcg" {
		notes = append(notes, "microvm figures are under TCG (emulation; "+why+"): not what a KVM host gives (see the README)")
	}
	r, err := bench.Runtime(ctx, bench.RuntimeOptions{Driver: d, Rootfs: b.rootfs, N: b.n, Bwrap: b.bwrap, Log: os.Stderr,
		Prefix: prefix, Baselines: b.baselines, Idle: b.idle, CgroupParent: cgroupParent})
	rows = append(rows, r...)
	if err != nil {
		notes = append(notes, "microvm runtime: "+err.Error())
	}
	if b.cpN > 0 {
		cpDir := filepath.Join(state, "checkpoints")
		if err := os.Mkdir(cpDir, 0o700); err != nil {
			return rows, append(notes, "microvm: "+err.Error())
		}
		r, err := bench.Checkpoint(ctx, bench.CheckpointOptions{Driver: d, Rootfs: b.rootfs, N: b.cpN, MiB: b.cpMiB, Dir: cpDir, Prefix: prefix, Log: os.Stderr})
		rows = append(rows, r...)
		if err != nil {
			notes = append(notes, "microvm checkpoint: "+err.Error())
		}
	}
	k, err := images.CurrentKernel(images.DefaultDir(""))
	if err != nil {
		return rows, append(notes, "microvm: "+err.Error())
	}
	sum := lbb.RunParams{Code: "def run(input, config):\n    return sum(input)\n", Input: []int{1, 2, 3}}
	pyArgv := []string{"python3", "-c", "print(sum([1,2,3]))"}
	pyBase := []bench.Sample{b.baselines.Time("chroot python3 -c", b.n, bench.Chroot(b.rootfs, pyArgv...))}
	for _, warm := range []bool{true, false} {
		row, err := runtimeOneCall(ctx, "microvm", func(r string) bool { return r == k.Recipe.Release }, b.n, warm, sum, &notes)
		if err != nil {
			notes = append(notes, fmt.Sprintf("microvm service (warm=%v): %v", warm, err))
			continue
		}
		row.Metric = prefix + row.Metric
		row.Baselines = pyBase
		rows = append(rows, row)
	}
	return rows, notes
}
