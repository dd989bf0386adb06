//go:build linux

package gvisor_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// TestMemoryBombs runs memory bombs the hostile suite does not: a bomb of many threads, and
// several greedy processes at once. Each must end with the greedy processes killed, OOM kills
// counted, the memory within the limit (lifted a little per round) and the agent alive.
//
// Several greedy processes is a known failure (issue 7), run only with
// LBB_GVISOR_KNOWN_FAILURES=1: the guard kills one per round, the others take the memory it
// frees, and in a later round the Sentry, parked stubs and lifted limit notwithstanding,
// sometimes does not answer `runsc ps`; the guard then lets the kernel end the sandbox
// (about one run in three).
func TestMemoryBombs(t *testing.T) {
	d, img := newDriver(t)
	for i, bomb := range []struct{ name, script, known string }{
		{"three processes", `for i in 1 2 3; do python3 -c "x = b'x' * (300 << 20); print('survived')" & done; wait`,
			"in a later round the Sentry may not answer and the sandbox ends (issue 7)"},
		{"threads", `python3 -c "
import threading
bufs = []
def grab():
    for _ in range(40):
        bufs.append(bytearray(b'x' * (8 << 20)))
ts = [threading.Thread(target=grab) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print('survived', len(bufs))"`, ""},
	} {
		t.Run(bomb.name, func(t *testing.T) {
			if bomb.known != "" && os.Getenv("LBB_GVISOR_KNOWN_FAILURES") == "" {
				t.Skipf("known failure: %s (LBB_GVISOR_KNOWN_FAILURES=1 runs it)", bomb.known)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b := boot(t, ctx, d, runtime.Spec{ID: fmt.Sprintf("sbx_bomb%d", i), Image: img, Limits: runtime.Limits{MemoryMiB: 128}})
			p, err := b.c.Exec(ctx, agent.ExecRequest{ID: "bomb", Argv: []string{"/bin/sh", "-c", bomb.script}, TimeoutMs: 60000}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out, errb strings.Builder
			t0 := time.Now()
			ex, err := p.Wait(&out, &errb)
			t.Logf("%v after %v: stdout %q stderr %q", ex, time.Since(t0), out.String(), lastLine(errb.String()))
			if err != nil || ex.TimedOut || strings.Contains(out.String(), "survived") {
				t.Errorf("bomb: %+v %v", ex, err)
			}
			st, err := b.sb.Stats(ctx)
			// Several bombs may take a few rounds, each lifting the limit a little more.
			if err != nil || st.OOMKills == 0 || st.MemoryMaxBytes > 160<<20 {
				t.Errorf("stats after the bomb: %+v %v (want OOMKills > 0, peak <= 160 MiB)", st, err)
			}
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			defer pcancel()
			if err := b.c.Ping(pctx); err != nil {
				t.Fatalf("agent after the bomb: %v", err)
			}
			b.sh("true")
		})
	}
}

// TestMemoryBombInSentry fills memory through a system call: the Sentry itself writes the
// 600 MB a read asks for into the process's memory, so the thread that waits on the full
// cgroup is the Sentry's own, which the guard cannot park, and the read does not end until
// it is done. The guard cannot save the sandbox; what it must do is let the kernel end it
// whole (the Sentry killed) within moments, and leave nothing behind.
func TestMemoryBombInSentry(t *testing.T) {
	d, img := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := boot(t, ctx, d, runtime.Spec{ID: "sbx_bomb_read", Image: img, Limits: runtime.Limits{MemoryMiB: 128}})
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: "bomb", Argv: []string{"python3", "-c",
		"x = open('/dev/zero', 'rb').read(600 << 20); print('survived', len(x))"}, TimeoutMs: 60000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	go p.Wait(io.Discard, io.Discard)
	select {
	case <-b.sb.Done():
		t.Logf("the sandbox ended after %v", time.Since(t0))
	case <-time.After(45 * time.Second):
		t.Fatal("the sandbox still runs 45 s after its memory was full")
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork: %v", err)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
