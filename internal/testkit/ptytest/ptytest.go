// Package ptytest drives a terminal of a sandbox through the API's WebSocket (the Go SDK's
// Terminal), for the tests of every driver and of the API.
package ptytest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Screen collects a terminal's output as it reads it.
type Screen struct {
	T    *lbb.Terminal
	mu   sync.Mutex
	b    bytes.Buffer
	done chan struct{}
	err  error
}

// Follow reads t's output in the background until it ends.
func Follow(t *lbb.Terminal) *Screen {
	s := &Screen{T: t, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := t.Read(buf)
			s.mu.Lock()
			s.b.Write(buf[:n])
			if s.b.Len() > 1<<20 { // a flood: keep the end
				rest := append([]byte(nil), s.b.Bytes()[s.b.Len()-256<<10:]...)
				s.b.Reset()
				s.b.Write(rest)
			}
			s.mu.Unlock()
			if err != nil {
				if err != io.EOF {
					s.err = err
				}
				return
			}
		}
	}()
	return s
}

func (s *Screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is how many bytes were read.
func (s *Screen) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// Type sends what is typed.
func (s *Screen) Type(t testing.TB, text string) {
	t.Helper()
	if _, err := s.T.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
}

// WaitFor waits until the output holds want. Typed lines are echoed: want must be what only
// the output holds (echo $((6*7)) shows 42).
func (s *Screen) WaitFor(t testing.TB, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output:\n%s", want, tail(s.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitEnd waits until the terminal has ended and answers its exit code.
func (s *Screen) WaitEnd(t testing.TB) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the terminal did not end:\n%s", tail(s.String()))
	}
	if s.err != nil {
		t.Fatalf("reading the terminal: %v", s.err)
	}
	return s.T.ExitCode()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// Drive runs the terminal suite in a running sandbox: a shell's size and resize, its state
// across lines, full-screen output, ^C, a dropped connection and a re-attach that shows the
// recent output, an exit code, and the record (kind terminal, no keystrokes kept).
func Drive(t *testing.T, c *lbb.Client, sandboxID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	term, err := c.Sandboxes.OpenTerminal(ctx, sandboxID, lbb.TerminalParams{Argv: []string{"sh"}, Cols: 100, Rows: 30,
		Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	s := Follow(term)
	s.Type(t, "tty >/dev/null && echo is-a-$((6*7)); stty size; echo TERM=$TERM\n")
	s.WaitFor(t, "is-a-42")
	s.WaitFor(t, "\n30 100")
	s.WaitFor(t, "TERM=xterm-256color")
	if err := term.Resize(ctx, 132, 43); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the resize and the line travel apart
	s.Type(t, "stty size\n")
	s.WaitFor(t, "\n43 132")
	s.Type(t, "mkdir -p sub && cd sub\necho cwd=$(basename $(pwd))\n")
	s.WaitFor(t, "cwd=sub")
	// Full-screen output (the alternate screen, clears, cursor moves, 256 colours, UTF-8),
	// as an editor draws, then back: the stream carries it and the shell answers after.
	s.Type(t, `printf '\033[?1049h\033[2J\033[H'; i=0; while [ $i -lt 40 ]; do printf '\033[%d;1H\033[38;5;%dm── line %d ✓\033[0m' $i $i $i; i=$((i+1)); done; printf '\033[?1049l'; echo full-$((3*3))`+"\n")
	s.WaitFor(t, "full-9")
	// ^C once sleep runs (a ^C before it starts would not reach it).
	s.Type(t, "echo zz-$((5+5)); sleep 60; echo slept-$((2+2))\n")
	s.WaitFor(t, "zz-10")
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	s.Type(t, "\x03")
	s.Type(t, "echo inter$((1+1))rupted\n")
	s.WaitFor(t, "inter2rupted")
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("^C took %v", d)
	}
	if strings.Contains(s.String(), "slept-4") {
		t.Error("^C did not interrupt the sleep")
	}

	// Drop the connection; the terminal lives on, and a re-attach sees what it wrote since.
	s.Type(t, "sleep 1; echo while-$((5*5))-away\n")
	term.Close()
	time.Sleep(2 * time.Second)
	term2, err := c.Sandboxes.AttachTerminal(ctx, sandboxID, term.ID, 90, 20)
	if err != nil {
		t.Fatal(err)
	}
	if term2.ID != term.ID {
		t.Fatalf("re-attached to %s, want %s", term2.ID, term.ID)
	}
	s2 := Follow(term2)
	s2.WaitFor(t, "while-25-away")
	s2.WaitFor(t, "cwd=sub") // recent output from before the drop too
	s2.Type(t, "echo still-in=$(basename $(pwd)); stty size\n")
	s2.WaitFor(t, "still-in=sub")
	s2.WaitFor(t, "\n20 90")
	s2.Type(t, "exit 3\n")
	if code := s2.WaitEnd(t); code != 3 {
		t.Errorf("exit code %d, want 3; exit %+v", code, term2.Exit())
	}
	term2.Close()

	rec, err := c.Commands.Get(ctx, term.ID, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != "terminal" || rec.ExitCode == nil || *rec.ExitCode != 3 || rec.StdinBytes == 0 {
		t.Errorf("record: kind %q exit %v stdin_bytes %d", rec.Kind, rec.ExitCode, rec.StdinBytes)
	}
	if !strings.Contains(rec.Stdout.Tail+rec.Stdout.Head, "still-in=sub") {
		t.Errorf("the record's output lacks the session's end: %q", rec.Stdout.Tail)
	}
	if _, err := c.Sandboxes.AttachTerminal(ctx, sandboxID, term.ID, 0, 0); !lbb.IsConflict(err) {
		t.Errorf("attaching to an ended terminal: %v, want a conflict", err)
	}
}

// Shell opens a terminal running sh (prompt "$ ") and follows it.
func Shell(ctx context.Context, t testing.TB, c *lbb.Client, sandboxID string) *Screen {
	t.Helper()
	term, err := c.Sandboxes.OpenTerminal(ctx, sandboxID, lbb.TerminalParams{Argv: []string{"sh"}, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	return Follow(term)
}

// Pause opens a terminal and pauses its sandbox with it open: the pause freezes it (the
// socket stays open), and after resume the same socket answers with the shell's state; a
// re-attach then shows its recent output. With snapshot (gvisor) a snapshot and a fork
// follow: the terminal is carried on and still answers, and the fork does not refuse.
func Pause(t *testing.T, c *lbb.Client, sandboxID string, snapshot bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := Shell(ctx, t, c, sandboxID)
	defer s.T.Close()
	s.Type(t, "v=$((1+2)); echo up-$v\n")
	s.WaitFor(t, "up-3")
	p, err := c.Sandboxes.Pause(ctx, sandboxID)
	if err != nil || p.Status != "paused" {
		t.Fatalf("pause with a terminal open: %+v %v", p, err)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-s.done:
		t.Fatalf("the terminal ended with the pause: %+v %v", s.T.Exit(), s.err)
	default:
	}
	if _, err := c.Sandboxes.Resume(ctx, sandboxID); err != nil {
		t.Fatal(err)
	}
	s.Type(t, "echo kept-$((v*2))\n")
	s.WaitFor(t, "kept-6")
	if snapshot {
		if _, err := c.Sandboxes.Snapshot(ctx, sandboxID, lbb.SnapshotRequest{}); err != nil {
			t.Fatalf("snapshot with a terminal open: %v", err)
		}
		s.Type(t, "echo moved-$((v*3))\n")
		s.WaitFor(t, "moved-9")
		f, err := c.Sandboxes.Fork(ctx, sandboxID, lbb.ForkRequest{})
		if err != nil {
			t.Fatalf("fork with a terminal open: %v", err)
		}
		defer c.Sandboxes.Delete(context.Background(), f.ID)
	}
	// Dropped and re-attached: the recent output first, and the shell goes on.
	s.T.Close()
	<-s.done
	term2, err := c.Sandboxes.AttachTerminal(ctx, sandboxID, s.T.ID, 0, 0)
	if err != nil {
		t.Fatalf("re-attaching after resume: %v", err)
	}
	s2 := Follow(term2)
	defer term2.Close()
	s2.WaitFor(t, "kept-6")
	s2.Type(t, "echo again-$((v*4)); exit 0\n")
	s2.WaitFor(t, "again-12")
	if code := s2.WaitEnd(t); code != 0 {
		t.Errorf("exit code %d after resume; exit %+v", code, term2.Exit())
	}
}

// Flood writes much output through a terminal nobody reads quickly and checks that the
// terminal still answers: the server keeps bounded buffers.
func Flood(t *testing.T, c *lbb.Client, sandboxID string, bytes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := Shell(ctx, t, c, sandboxID)
	defer s.T.Close()
	s.Type(t, "head -c "+itoa(bytes)+" /dev/zero | tr '\\0' x; echo; echo flood-$((4*4))\n")
	s.WaitFor(t, "flood-16")
	s.Type(t, "exit\n")
	s.WaitEnd(t)
}

// Lines runs seq 1 n on a terminal and reads its output through the WebSocket, with a pause
// after each read of 16 KiB when slow: every line arrives, whole and in order (the server
// holds the output for the client and slows the program, it skips nothing), then the exit.
func Lines(t *testing.T, c *lbb.Client, sandboxID string, n int, slow bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	term, err := c.Sandboxes.OpenTerminal(ctx, sandboxID, lbb.TerminalParams{Argv: []string{"seq", "1", itoa(n)}})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var out bytes.Buffer
	buf := make([]byte, 16<<10)
	start := time.Now()
	for {
		k, err := term.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading after %d bytes: %v", out.Len(), err)
		}
		if slow {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if code := term.ExitCode(); code != 0 {
		t.Errorf("seq exited %d; exit %+v", code, term.Exit())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\r\n"), "\r\n")
	for i, l := range lines {
		if l != itoa(i+1) {
			t.Fatalf("line %d is %q, want %d (%d lines, %d bytes)", i+1, tail(l), i+1, len(lines), out.Len())
		}
	}
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	t.Logf("seq 1 %d (%d bytes, slow %v): every line in order in %v", n, out.Len(), slow, time.Since(start).Round(time.Millisecond))
}

// LinesReattach runs seq 1 n on a terminal, drops the connection after reading a little, and
// re-attaches: the held output goes on from what was delivered before the drop, every line
// from there on in order to the last (what was in flight on the dropped socket may be lost).
func LinesReattach(t *testing.T, c *lbb.Client, sandboxID string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	term, err := c.Sandboxes.OpenTerminal(ctx, sandboxID, lbb.TerminalParams{Argv: []string{"seq", "1", itoa(n)}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	for read := 0; read < 64<<10; {
		k, err := term.Read(buf)
		if err != nil {
			t.Fatalf("reading before the drop: %v", err)
		}
		read += k
	}
	term.Close()
	time.Sleep(500 * time.Millisecond)
	term2, err := c.Sandboxes.AttachTerminal(ctx, sandboxID, term.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer term2.Close()
	out, err := io.ReadAll(term2)
	if err != nil {
		t.Fatalf("reading after the re-attach: %v", err)
	}
	_, rest, _ := strings.Cut(string(out), "\r\n") // the first line may be cut
	lines := strings.Split(strings.TrimSuffix(rest, "\r\n"), "\r\n")
	first := 0
	for _, d := range lines[0] {
		first = first*10 + int(d-'0')
	}
	for i, l := range lines {
		if l != itoa(first+i) {
			t.Fatalf("after the re-attach, line %d is %q, want %d", i, tail(l), first+i)
		}
	}
	if last := first + len(lines) - 1; last != n {
		t.Fatalf("after the re-attach the lines end at %d, want %d", last, n)
	}
	t.Logf("seq 1 %d dropped and re-attached: lines %d to %d in order", n, first, n)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
