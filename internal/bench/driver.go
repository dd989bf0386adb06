//go:build linux

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// IdleMemory starts n sandboxes on d, lets them settle, and measures what an idle one costs:
// the memory its cgroup is charged (cgroup v1, under cgroupParent/<id>), and the RSS and PSS
// of its host processes (for gvisor the Sentry, the gofer and the stubs; for ns the agent).
// The row's sample is the cold starts (create → agent answering); the memory is in Values.
func IdleMemory(ctx context.Context, d runtime.Driver, rootfs, cgroupParent string, n int) (Row, error) {
	row := Row{Metric: fmt.Sprintf("idle sandbox memory (%d held)", n), LBB: Sample{Name: "lbb " + d.Name() + " start"}}
	var made []string
	defer func() {
		for _, id := range made {
			d.Destroy(context.Background(), id)
		}
	}()
	for range n {
		id := ids.New("sbx")
		made = append(made, id)
		t0 := time.Now()
		c, _, err := startSandbox(ctx, d, runtime.Spec{ID: id, Image: rootfs})
		if err == nil {
			err = c.Ping(ctx)
		}
		if err != nil {
			return row, err
		}
		row.LBB.Durs = append(row.LBB.Durs, time.Since(t0))
		// The channel stays open: an idle sandbox is one its client holds.
		defer c.Close()
	}
	time.Sleep(3 * time.Second) // let start-up pages settle
	var charged, rss, pss, procs float64
	for _, id := range made {
		m, err := SandboxMemory(cgroupParent, id)
		if err != nil {
			return row, err
		}
		charged += m.Charged
		rss += m.RSS
		pss += m.PSS
		procs += float64(m.Procs)
	}
	f := float64(len(made)) * (1 << 20)
	row.Values = map[string]float64{
		"charged_mib_per_sandbox":    charged / f,
		"rss_mib_per_sandbox":        rss / f,
		"pss_mib_per_sandbox":        pss / f,
		"host_processes_per_sandbox": procs / float64(len(made)),
	}
	row.Extra = fmt.Sprintf("per idle sandbox: %.1f MiB charged to its cgroup, %.1f MiB RSS, %.1f MiB PSS over %.1f host processes",
		charged/f, rss/f, pss/f, procs/float64(len(made)))
	return row, nil
}

// Memory is what one sandbox costs the host, in bytes.
type Memory struct {
	Charged  float64 // memory.usage_in_bytes of its cgroup
	RSS, PSS float64 // summed over its host processes
	Procs    int
}

// SandboxMemory reads sandbox id's memory cgroup (cgroup v1) and its processes' smaps_rollup.
func SandboxMemory(cgroupParent, id string) (Memory, error) {
	var m Memory
	dir := filepath.Join("/sys/fs/cgroup/memory", cgroupParent, id)
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return m, fmt.Errorf("sandbox %s's memory cgroup: %w", id, err)
	}
	m.Charged, _ = strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return m, err
	}
	for _, pid := range strings.Fields(string(procs)) {
		sm, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
		if err != nil {
			continue
		}
		m.Procs++
		for _, line := range strings.Split(string(sm), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "Rss:":
				m.RSS += kb * 1024
			case "Pss:":
				m.PSS += kb * 1024
			}
		}
	}
	return m, nil
}

// CheckpointOptions configures the checkpoint benchmark.
type CheckpointOptions struct {
	Driver runtime.Driver // a runtime.Checkpointer
	Rootfs string
	N      int
	// MiB is the memory a process in the sandbox holds (random bytes) when it is saved.
	MiB int
	// Dir holds the checkpoints (one at a time) and the baselines' files.
	Dir    string
	Prefix string
	Log    io.Writer
}

// Checkpoint times saving a started sandbox that holds o.MiB of memory in a process
// (runtime.Checkpointer.Checkpoint: memory and disk to o.Dir, the sandbox stopped), and
// restoring it up to a first exec of /bin/true, checking that the process survived. The
// baselines are writing and reading back as many bytes as a plain file in the same
// directory: the I/O floor of a save and of a restore.
func Checkpoint(ctx context.Context, o CheckpointOptions) ([]Row, error) {
	cp, ok := o.Driver.(runtime.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("the %s driver cannot checkpoint", o.Driver.Name())
	}
	if o.N <= 0 {
		o.N = 5
	}
	if o.MiB <= 0 {
		o.MiB = 100
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "%scheckpoint and restore with %d MiB in use (%d times)…\n", o.Prefix, o.MiB, o.N)
	}
	name := "lbb " + o.Driver.Name()
	save, restore := Sample{Name: name}, Sample{Name: name}
	var charged, image float64
	fill := fmt.Sprintf(`setsid python3 -c '
import os, time
x = os.urandom(%d << 20)
open("/tmp/held", "w").write(str(os.getpid()))
time.sleep(1e9)' </dev/null >/dev/null 2>&1 &
for i in $(seq 600); do test -s /tmp/held && exit 0; sleep 0.05; done; exit 1`, o.MiB)
	for i := range o.N {
		err := func() error {
			id := ids.New("sbx")
			defer o.Driver.Destroy(context.Background(), id)
			dir := filepath.Join(o.Dir, fmt.Sprintf("cp%d", i))
			defer os.RemoveAll(dir)
			spec := runtime.Spec{ID: id, Image: o.Rootfs, Limits: runtime.Limits{MemoryMiB: 256 + int64(o.MiB)}}
			c, sb, err := startSandbox(ctx, o.Driver, spec)
			if err != nil {
				return err
			}
			if err := agentExecOK(ctx, c, "sh", "-c", fill); err != nil {
				c.Close()
				return fmt.Errorf("filling memory: %w", err)
			}
			if st, err := sb.Stats(ctx); err == nil {
				charged += float64(st.MemoryBytes)
			}
			c.Close()
			t0 := time.Now()
			if err := cp.Checkpoint(ctx, id, dir); err != nil {
				return err
			}
			save.Durs = append(save.Durs, time.Since(t0))
			image += float64(duBytes(dir))
			t0 = time.Now()
			sb, err = cp.Restore(ctx, id, dir)
			if err != nil {
				return err
			}
			c, err = agent.NewClient(sb.Conn())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := agentExecOK(ctx, c, "/bin/true"); err != nil {
				return err
			}
			restore.Durs = append(restore.Durs, time.Since(t0))
			// The process and its memory came back.
			return agentExecOK(ctx, c, "sh", "-c", `kill -0 "$(cat /tmp/held)"`)
		}()
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
	}
	// Baselines: the same bytes through a plain file, written and read back.
	data := make([]byte, o.MiB<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	file := filepath.Join(o.Dir, "baseline.bin")
	defer os.Remove(file)
	write := Time(fmt.Sprintf("write %d MiB file", o.MiB), o.N, func() error { return os.WriteFile(file, data, 0o600) })
	read := Time(fmt.Sprintf("read %d MiB file", o.MiB), o.N, func() error { _, err := os.ReadFile(file); return err })
	n := float64(len(save.Durs)) * (1 << 20)
	vals := map[string]float64{"charged_mib_when_saved": charged / n, "image_mib": image / n}
	extra := fmt.Sprintf("the sandbox's cgroup held %.0f MiB when saved; the checkpoint (memory image + disk) takes %.0f MiB on disk", charged/n, image/n)
	return []Row{
		{Metric: fmt.Sprintf("%scheckpoint, %d MiB in use", o.Prefix, o.MiB), LBB: save, Baselines: []Sample{write}, Extra: extra, Values: vals},
		{Metric: fmt.Sprintf("%srestore → first exec, %d MiB in use", o.Prefix, o.MiB), LBB: restore, Baselines: []Sample{read}},
	}, nil
}

// duBytes is the disk space the files under dir take (sparse files count what they hold).
func duBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
