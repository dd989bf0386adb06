//go:build linux

package e2e

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// counterScript prints 1, 2, 3… every 100 ms, and "got X" for each line X it reads on stdin.
const counterScript = `
import select, sys
n = 0
while True:
    r, _, _ = select.select([sys.stdin], [], [], 0.1)
    if r:
        line = sys.stdin.readline()
        if not line:
            break
        print("got " + line.strip(), flush=True)
    n += 1
    print(n, flush=True)
`

// TestPauseCommandsRunning: a sandbox pauses and resumes with commands running, on ns and
// gvisor. A counter's SSE stream, attached before the pause, shows a gap in time but none in
// the sequence; the command's timeout does not count the paused time; stdin written after
// the resume reaches it; kill ends it, killed. A dev server answers after the resume.
func TestPauseCommandsRunning(t *testing.T) {
	for _, rt := range []string{"ns", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "gvisor" {
				requireGvisor(t)
			} else {
				requireEnv(t)
			}
			s := startServer(t, "--runtime", rt, "--pool=false")
			c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
			pauseCommandsRunning(t, c, sb.ID)
		})
	}
}

type timedLine struct {
	at   time.Time
	line string
}

func pauseCommandsRunning(t *testing.T, c *lbb.Client, id string) {
	const timeout, paused = 5 * time.Second, 5 * time.Second
	server, err := c.Sandboxes.Exec(bg, id, lbb.ExecParams{Argv: []string{"python3", "-m", "http.server", "8000"}, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.Sandboxes.Exec(bg, id, lbb.ExecParams{Argv: []string{"python3", "-u", "-c", counterScript},
		StdinOpen: true, WaitMs: -1, TimeoutMs: timeout.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	st, err := c.Commands.Output(bg, cmd.ID, "stdout", true)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []timedLine
	var partial string
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(lines) == 0 {
			return ""
		}
		return lines[len(lines)-1].line
	}
	has := func(want string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if l.line == want {
				return true
			}
		}
		return false
	}
	streamDone := make(chan *lbb.Command, 1)
	go func() {
		var next int64
		for st.Next() {
			ch := st.Chunk()
			mu.Lock()
			if ch.Offset != next {
				t.Errorf("chunk at offset %d, want %d (bytes lost or repeated)", ch.Offset, next)
			}
			next = ch.Offset + int64(len(ch.Data))
			partial += string(ch.Data)
			for {
				i := strings.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				lines = append(lines, timedLine{time.Now(), partial[:i]})
				partial = partial[i+1:]
			}
			mu.Unlock()
		}
		if err := st.Err(); err != nil {
			t.Errorf("the stream: %v", err)
		}
		streamDone <- st.Exit()
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s; last line %q", what, last())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	counter := func() int { n, _ := strconv.Atoi(last()); return n }
	waitFor("the counter to reach 10", func() bool { return counter() >= 10 })

	p, err := c.Sandboxes.Pause(bg, id)
	if err != nil || p.Status != "paused" || p.PauseMode != "freeze" {
		t.Fatalf("pause with commands running: %+v %v, want it paused by the freezer", p, err)
	}
	pausedAt := time.Now()
	time.Sleep(500 * time.Millisecond)
	frozen := last()
	if got, err := c.Commands.Get(bg, cmd.ID, -1); err != nil || got.Status != "running" {
		t.Fatalf("the command while paused: %+v %v", got, err)
	}
	time.Sleep(paused - 500*time.Millisecond)
	if last() != frozen {
		t.Fatalf("output while paused: %q after %q", last(), frozen)
	}
	r, err := c.Sandboxes.Resume(bg, id)
	if err != nil || r.Status != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	resumedAt := time.Now()
	n := counter()
	waitFor("the counter to go on", func() bool { return counter() >= n+5 })
	if time.Since(started) < timeout {
		t.Fatalf("the test ran %v, less than the timeout %v: it shows nothing", time.Since(started), timeout)
	}
	if got, err := c.Commands.Get(bg, cmd.ID, -1); err != nil || got.Status != "running" {
		t.Fatalf("the command after resume, %v after it started (timeout %v, %v of it paused): %+v %v",
			time.Since(started), timeout, resumedAt.Sub(pausedAt), got, err)
	}
	if err := c.Commands.WriteStdin(bg, cmd.ID, []byte("after-resume\n"), false); err != nil {
		t.Fatal(err)
	}
	waitFor("stdin to reach the command", func() bool { return has("got after-resume") })

	// The dev server answers.
	get, err := c.Commands.Run(bg, id, lbb.CommandParams{ExecParams: lbb.ExecParams{Argv: []string{"python3", "-c",
		"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/', timeout=10).status)"}}, OutputLimit: 1 << 10})
	if err != nil || string(get.Stdout) != "200\n" {
		t.Fatalf("the dev server after resume: %+v %v", get, err)
	}

	if _, err := c.Commands.Kill(bg, cmd.ID, ""); err != nil {
		t.Fatal(err)
	}
	var end *lbb.Command
	select {
	case end = <-streamDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after kill")
	}
	if end == nil || end.Status != "killed" {
		t.Fatalf("the command's end: %+v", end)
	}
	if _, err := c.Commands.Kill(bg, server.ID, ""); err != nil {
		t.Fatal(err)
	}

	// The sequence: 1, 2, 3… with no gap and no repeat, one gap in time of about the pause.
	mu.Lock()
	defer mu.Unlock()
	want, gap := 1, time.Duration(0)
	for i, l := range lines {
		if strings.HasPrefix(l.line, "got ") {
			continue
		}
		if l.line != strconv.Itoa(want) {
			t.Fatalf("line %d is %q, want %d", i, l.line, want)
		}
		want++
		if i > 0 {
			gap = max(gap, l.at.Sub(lines[i-1].at))
		}
	}
	if gap < paused-time.Second {
		t.Fatalf("the longest gap between lines is %v, want about the pause (%v)", gap, paused)
	}
	t.Logf("%d lines, the pause's gap %v", want-1, gap)
}
