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

// follower reads a command's stdout over SSE from its start, line by line, and checks that
// every chunk starts where the one before ended.
type follower struct {
	mu      sync.Mutex
	lines   []timedLine
	partial string
	done    chan *lbb.Command
}

func follow(t *testing.T, c *lbb.Client, id string) *follower {
	t.Helper()
	st, err := c.Commands.Output(bg, id, "stdout", true)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{done: make(chan *lbb.Command, 1)}
	go func() {
		var next int64
		for st.Next() {
			ch := st.Chunk()
			f.mu.Lock()
			if ch.Offset != next {
				t.Errorf("chunk at offset %d, want %d (bytes lost or repeated)", ch.Offset, next)
			}
			next = ch.Offset + int64(len(ch.Data))
			f.partial += string(ch.Data)
			for {
				i := strings.IndexByte(f.partial, '\n')
				if i < 0 {
					break
				}
				f.lines = append(f.lines, timedLine{time.Now(), f.partial[:i]})
				f.partial = f.partial[i+1:]
			}
			f.mu.Unlock()
		}
		if err := st.Err(); err != nil {
			t.Errorf("the stream: %v", err)
		}
		f.done <- st.Exit()
	}()
	return f
}

func (f *follower) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lines) == 0 {
		return ""
	}
	return f.lines[len(f.lines)-1].line
}

func (f *follower) has(want string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.lines {
		if l.line == want {
			return true
		}
	}
	return false
}

// counter is the last number the counter printed.
func (f *follower) counter() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.lines) - 1; i >= 0; i-- {
		if n, err := strconv.Atoi(f.lines[i].line); err == nil {
			return n
		}
	}
	return 0
}

func (f *follower) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; last line %q", what, f.last())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// end waits for the stream's end and answers the command's record.
func (f *follower) end(t *testing.T) *lbb.Command {
	t.Helper()
	select {
	case c := <-f.done:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end")
		return nil
	}
}

// first is the first number the counter printed.
func (f *follower) first() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.lines {
		if n, err := strconv.Atoi(l.line); err == nil {
			return n
		}
	}
	return 0
}

// checkSequenceFrom checks the counter's lines are from, from+1… with no gap and no repeat.
func (f *follower) checkSequenceFrom(t *testing.T, from int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := from
	for i, l := range f.lines {
		if strings.HasPrefix(l.line, "got ") {
			continue
		}
		if i == 0 && l.line != strconv.Itoa(from) {
			// The copy's first line may be the end of one the source began.
			continue
		}
		if l.line != strconv.Itoa(want) {
			t.Fatalf("line %d is %q, want %d", i, l.line, want)
		}
		want++
	}
}

// checkSequence checks the counter's lines are 1, 2, 3… with no gap and no repeat, and that
// the longest pause between two is at least gap; it answers that longest pause.
func (f *follower) checkSequence(t *testing.T, gap time.Duration) time.Duration {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	want, longest := 1, time.Duration(0)
	for i, l := range f.lines {
		if strings.HasPrefix(l.line, "got ") {
			continue
		}
		if l.line != strconv.Itoa(want) {
			t.Fatalf("line %d is %q, want %d", i, l.line, want)
		}
		want++
		if i > 0 {
			longest = max(longest, l.at.Sub(f.lines[i-1].at))
		}
	}
	if longest < gap {
		t.Fatalf("the longest pause between lines is %v, want at least %v", longest, gap)
	}
	t.Logf("%d lines, the longest pause between two %v", want-1, longest)
	return longest
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
	f := follow(t, c, cmd.ID)
	f.waitFor(t, "the counter to reach 10", func() bool { return f.counter() >= 10 })

	p, err := c.Sandboxes.Pause(bg, id)
	if err != nil || p.Status != "paused" || p.PauseMode != "freeze" {
		t.Fatalf("pause with commands running: %+v %v, want it paused by the freezer", p, err)
	}
	pausedAt := time.Now()
	time.Sleep(500 * time.Millisecond)
	frozen := f.last()
	if got, err := c.Commands.Get(bg, cmd.ID, -1); err != nil || got.Status != "running" {
		t.Fatalf("the command while paused: %+v %v", got, err)
	}
	time.Sleep(paused - 500*time.Millisecond)
	if f.last() != frozen {
		t.Fatalf("output while paused: %q after %q", f.last(), frozen)
	}
	r, err := c.Sandboxes.Resume(bg, id)
	if err != nil || r.Status != "running" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	resumedAt := time.Now()
	n := f.counter()
	f.waitFor(t, "the counter to go on", func() bool { return f.counter() >= n+5 })
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
	f.waitFor(t, "stdin to reach the command", func() bool { return f.has("got after-resume") })

	// The dev server answers.
	get, err := c.Commands.Run(bg, id, lbb.CommandParams{ExecParams: lbb.ExecParams{Argv: []string{"python3", "-c",
		"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/', timeout=10).status)"}}, OutputLimit: 1 << 10})
	if err != nil || string(get.Stdout) != "200\n" {
		t.Fatalf("the dev server after resume: %+v %v", get, err)
	}

	if _, err := c.Commands.Kill(bg, cmd.ID, ""); err != nil {
		t.Fatal(err)
	}
	if end := f.end(t); end == nil || end.Status != "killed" {
		t.Fatalf("the command's end: %+v", end)
	}
	if _, err := c.Commands.Kill(bg, server.ID, ""); err != nil {
		t.Fatal(err)
	}
	// One gap in time of about the pause, none in the sequence.
	f.checkSequence(t, paused-time.Second)
}

// TestSnapshotCommandsRunningGvisor: a snapshot of a gvisor sandbox with a command running
// leaves the command running: its SSE stream, attached before, goes on with no byte lost or
// repeated across the checkpoint and restore; stdin written after reaches it; kill ends it.
// A fork of that snapshot starts without the source's command (the fork's copy is ended); a
// fork without a snapshot carries it on as a command of its own (forked_from), counting on
// from the fork point, with its own stdin and kill, the source's untouched.
func TestSnapshotCommandsRunningGvisor(t *testing.T) {
	requireGvisor(t)
	snapshotCommandsRunning(t, "gvisor")
}

func snapshotCommandsRunning(t *testing.T, rt string) {
	s := startServer(t, "--runtime", rt, "--pool=false")
	c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	cmd, err := c.Sandboxes.Exec(bg, sb.ID, lbb.ExecParams{Argv: []string{"python3", "-u", "-c", counterScript},
		StdinOpen: true, WaitMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, c, cmd.ID)
	f.waitFor(t, "the counter to reach 10", func() bool { return f.counter() >= 10 })
	snap, err := c.Sandboxes.Snapshot(bg, sb.ID, lbb.SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot with a command running: %v", err)
	}
	n := f.counter()
	f.waitFor(t, "the counter to go on after the snapshot", func() bool { return f.counter() >= n+5 })
	if got, err := c.Commands.Get(bg, cmd.ID, -1); err != nil || got.Status != "running" {
		t.Fatalf("the command after the snapshot: %+v %v", got, err)
	}
	if err := c.Commands.WriteStdin(bg, cmd.ID, []byte("after-snapshot\n"), false); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "stdin to reach the command", func() bool { return f.has("got after-snapshot") })

	fork, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork of the snapshot: %v", err)
	}
	t.Cleanup(func() { c.Sandboxes.Delete(bg, fork.ID) })
	ps, err := c.Commands.Run(bg, fork.ID, lbb.CommandParams{ExecParams: lbb.ExecParams{Cmd: "ps -eo args"}, OutputLimit: 1 << 16})
	if err != nil || strings.Contains(string(ps.Stdout), "select.select") {
		t.Fatalf("the fork's processes: %s %v, want no copy of the source's command", ps.Stdout, err)
	}
	m := f.counter()
	f.waitFor(t, "the source's counter to go on after the fork", func() bool { return f.counter() >= m+3 })

	// A fork without a snapshot carries the command on as one of its own.
	carried, err := c.Sandboxes.Fork(bg, sb.ID, lbb.ForkRequest{})
	if err != nil {
		t.Fatalf("fork with a command running: %v", err)
	}
	t.Cleanup(func() { c.Sandboxes.Delete(bg, carried.ID) })
	l, err := c.Sandboxes.Commands(bg, carried.ID, lbb.ListParams{})
	if err != nil || len(l.Data) != 1 || l.Data[0].ForkedFrom != cmd.ID || l.Data[0].Status != "running" || l.Data[0].ID == cmd.ID {
		t.Fatalf("the fork's commands: %+v %v, want one running, forked from %s", l, err, cmd.ID)
	}
	copyCmd := l.Data[0]
	g := follow(t, c, copyCmd.ID)
	g.waitFor(t, "the fork's copy to count", func() bool { return g.counter() > 0 && g.counter() >= g.first()+5 })
	if g.first() <= m {
		t.Fatalf("the fork's copy starts at %d, want past %d (the fork point)", g.first(), m)
	}
	if err := c.Commands.WriteStdin(bg, copyCmd.ID, []byte("to-the-fork\n"), false); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "stdin to reach the fork's copy", func() bool { return g.has("got to-the-fork") })
	if f.has("got to-the-fork") {
		t.Fatal("the fork's stdin reached the source's command")
	}
	if _, err := c.Commands.Kill(bg, copyCmd.ID, ""); err != nil {
		t.Fatal(err)
	}
	if end := g.end(t); end == nil || end.Status != "killed" || end.ForkedFrom != cmd.ID {
		t.Fatalf("the fork's copy's end: %+v", end)
	}
	k := f.counter()
	f.waitFor(t, "the source's counter to go on after the copy's kill", func() bool { return f.counter() >= k+3 })

	if _, err := c.Commands.Kill(bg, cmd.ID, ""); err != nil {
		t.Fatal(err)
	}
	end := f.end(t)
	if end == nil || end.Status != "killed" {
		t.Fatalf("the command's end: %+v", end)
	}
	f.checkSequence(t, 0)
	g.checkSequenceFrom(t, g.first())
}
