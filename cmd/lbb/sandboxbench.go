//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func init() {
	sandboxBench = runSandboxBench
}

const sandboxBenchUsage = `Usage: lbb sandbox bench [--n 100] [--file-mib 200] [--serve] [--interactive] [--json]

Measures Level 3 through the API, in one long-lived sandbox:
  create (cold), stop, resume and delete of a sandbox
  exec round trip: POST …/commands of /bin/true, waited for, to its record; the same
  streamed (Commands.Run); and seq 1 3000000's 22.9 MB of output streamed, every byte counted
  run in a sandbox: POST …/run of a Python run() returning 1
  file throughput: a --file-mib file up (PUT …/files/content), down (GET), kept as a File
  and imported back, with the sha256 checked each way
  --interactive alone: a terminal's keystroke echo through the WebSocket, and a request
  through a preview beside the same request to the same server on the host
Against --url / LBB_URL, or with --serve a fresh lbb serve of its own (ns runtime).
`

type benchFigure struct {
	Name  string  `json:"name"`
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms,omitempty"`
	P95Ms float64 `json:"p95_ms,omitempty"`
	P99Ms float64 `json:"p99_ms,omitempty"`
	MiBs  float64 `json:"mib_per_s,omitempty"`
}

func quantiles(name string, ds []time.Duration) benchFigure {
	s := bench.Sample{Name: name, Durs: ds}
	ms := func(q float64) float64 { return float64(s.Quantile(q).Microseconds()) / 1000 }
	return benchFigure{Name: name, N: len(ds), P50Ms: ms(.5), P95Ms: ms(.95), P99Ms: ms(.99)}
}

func runSandboxBench(ctx context.Context, args []string) error {
	fs, cf := clientFlagSet("sandbox bench", sandboxBenchUsage)
	n := fs.Int("n", 100, "samples of the exec round trip (run: n/5)")
	fileMiB := fs.Int64("file-mib", 200, "size of the file moved up and down")
	serveOwn := fs.Bool("serve", false, "start a server of its own")
	interactive := fs.Bool("interactive", false, "measure a terminal and a preview only")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *serveOwn {
		done, err := cf.serveOwn(ctx, 10, "--max-file-bytes", fmt.Sprint((*fileMiB+1)<<20), "--preview-addr", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer done()
	}
	c, err := cf.clientWith(lbb.Options{UserAgent: "lbb-sandbox-bench"})
	if err != nil {
		return err
	}
	var figs []benchFigure
	if *interactive {
		sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{ExpiresInSeconds: 600})
		if err != nil {
			return err
		}
		defer c.Sandboxes.Delete(context.Background(), sb.ID)
		if figs, err = interactiveFigures(ctx, c, sb.ID, *n); err != nil {
			return err
		}
		return printFigures(cf, figs)
	}
	timed := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		err := f()
		return time.Since(t0), err
	}
	var creates, stops, resumes []time.Duration
	var sb *lbb.Sandbox
	for i := range 5 {
		var x *lbb.Sandbox
		d, err := timed(func() (err error) {
			x, err = c.Sandboxes.Create(ctx, lbb.CreateParams{Limits: &lbb.Limits{DiskMiB: max(1024, 3**fileMiB+64)}, ExpiresInSeconds: 1800})
			return err
		})
		if err != nil {
			return err
		}
		creates = append(creates, d)
		if i < 4 {
			d, err = timed(func() error { _, err := c.Sandboxes.Stop(ctx, x.ID); return err })
			if err != nil {
				return err
			}
			stops = append(stops, d)
			d, err = timed(func() error { _, err := c.Sandboxes.Resume(ctx, x.ID); return err })
			if err != nil {
				return err
			}
			resumes = append(resumes, d)
			c.Sandboxes.Delete(ctx, x.ID)
		} else {
			sb = x
		}
	}
	defer c.Sandboxes.Delete(context.Background(), sb.ID)
	figs = append(figs, quantiles("create a sandbox (cold)", creates), quantiles("stop", stops), quantiles("resume", resumes))

	var execs []time.Duration
	for range *n {
		d, err := timed(func() error {
			cmd, err := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"/bin/true"}})
			if err == nil && cmd.Status != lbb.StatusSucceeded {
				err = fmt.Errorf("true: %s", cmd.Status)
			}
			return err
		})
		if err != nil {
			return err
		}
		execs = append(execs, d)
	}
	figs = append(figs, quantiles("exec round trip (/bin/true)", execs))
	var streamed []time.Duration
	for range *n {
		d, err := timed(func() error {
			res, err := c.Commands.Run(ctx, sb.ID, lbb.CommandParams{ExecParams: lbb.ExecParams{Argv: []string{"/bin/true"}}})
			if err == nil && res.Status != lbb.StatusSucceeded {
				err = fmt.Errorf("true: %s", res.Status)
			}
			return err
		})
		if err != nil {
			return err
		}
		streamed = append(streamed, d)
	}
	figs = append(figs, quantiles("exec streamed (/bin/true, Commands.Run)", streamed))
	// Output through the held stream, every byte counted: what lbb sandbox exec does.
	const seqN, seqBytes = 3000000, 22888896
	got := 0
	d, err := timed(func() error {
		res, err := c.Commands.Run(ctx, sb.ID, lbb.CommandParams{ExecParams: lbb.ExecParams{Argv: []string{"seq", "1", fmt.Sprint(seqN)}},
			OnStdout: func(b []byte) { got += len(b) }})
		if err == nil && (res.Status != lbb.StatusSucceeded || got != seqBytes) {
			err = fmt.Errorf("seq: %s, %d of %d bytes", res.Status, got, seqBytes)
		}
		return err
	})
	if err != nil {
		return err
	}
	figs = append(figs, benchFigure{Name: fmt.Sprintf("exec output streamed (seq 1 %d)", seqN), N: 1,
		MiBs: float64(seqBytes) / (1 << 20) / d.Seconds(), P50Ms: float64(d.Milliseconds())})
	var runs []time.Duration
	for range max(*n/5, 1) {
		d, err := timed(func() error {
			r, err := c.Sandboxes.RunIn(ctx, sb.ID, lbb.RunParams{Code: "def run(input, config):\n    return 1"})
			if err == nil && !r.OK {
				err = fmt.Errorf("run: %s %s", r.Status, r.Error)
			}
			return err
		})
		if err != nil {
			return err
		}
		runs = append(runs, d)
	}
	figs = append(figs, quantiles("run in a sandbox (python run())", runs))

	size := *fileMiB << 20
	mibs := func(name string, d time.Duration) benchFigure {
		return benchFigure{Name: name, N: 1, MiBs: float64(size) / (1 << 20) / d.Seconds(), P50Ms: float64(d.Milliseconds())}
	}
	h := sha256.New()
	d, err = timed(func() error {
		// size pseudo-random bytes (they do not compress), made as they are sent: never held at once.
		_, err := c.Files.Write(ctx, sb.ID, "bench.bin", io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), h))
		return err
	})
	if err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	figs = append(figs, mibs(fmt.Sprintf("file up (%d MiB)", *fileMiB), d))
	d, err = timed(func() error {
		rc, err := c.Files.Read(ctx, sb.ID, "bench.bin")
		if err != nil {
			return err
		}
		defer rc.Close()
		h := sha256.New()
		if _, err := io.Copy(h, rc); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			return fmt.Errorf("downloaded sha256 %s, uploaded %s", got, sum)
		}
		return nil
	})
	if err != nil {
		return err
	}
	figs = append(figs, mibs(fmt.Sprintf("file down (%d MiB)", *fileMiB), d))
	d, err = timed(func() error {
		f, err := c.GraphFiles.Keep(ctx, sb.ID, "bench.bin")
		if err == nil && f.SHA256 != sum {
			err = fmt.Errorf("kept sha256 %s, want %s", f.SHA256, sum)
		}
		return err
	})
	if err != nil {
		return err
	}
	figs = append(figs, mibs("keep as a File", d))
	d, err = timed(func() error { _, err := c.GraphFiles.Import(ctx, sb.ID, "bench-copy.bin", sum); return err })
	if err != nil {
		return err
	}
	figs = append(figs, mibs("import a File", d))

	return printFigures(cf, figs)
}

func printFigures(cf *clientFlags, figs []benchFigure) error {
	if cf.json {
		return json.NewEncoder(os.Stdout).Encode(figs)
	}
	w := table("FIGURE", "N", "P50 MS", "P95 MS", "P99 MS", "MIB/S")
	for _, f := range figs {
		rate := "-"
		if f.MiBs > 0 {
			rate = fmt.Sprintf("%.0f", f.MiBs)
		}
		fmt.Fprintf(w, "%s\t%d\t%.2f\t%.2f\t%.2f\t%s\n", f.Name, f.N, f.P50Ms, f.P95Ms, f.P99Ms, rate)
	}
	return w.Flush()
}
