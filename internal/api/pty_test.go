package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/testkit/ptytest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestPty drives a terminal through the WebSocket with the Go SDK, on the local driver
// (test/e2e runs the same on ns and gvisor).
func TestPty(t *testing.T) {
	c, sb := ptySandbox(t, 0)
	ptytest.Drive(t, c, sb.ID)
	ptytest.Lines(t, c, sb.ID, 30000, false)
	ptytest.Lines(t, c, sb.ID, 200000, true)
	ptytest.LinesReattach(t, c, sb.ID, 300000)
	ptytest.Flood(t, c, sb.ID, 20<<20)
	ptytest.Pause(t, c, sb.ID, false) // the fake checkpoint keeps no processes
}

// TestPtyGraceAndMany: two terminals of one sandbox at once, each its own shell; a terminal
// nobody re-attaches is hung up after the grace and its record says how it ended, while
// one still attached lives on.
func TestPtyGraceAndMany(t *testing.T) {
	c, sb := ptySandbox(t, time.Second)
	a, b := ptytest.Shell(bg, t, c, sb.ID), ptytest.Shell(bg, t, c, sb.ID)
	defer b.T.Close()
	a.Type(t, "X=a-$((1+1)); echo $X\n")
	b.Type(t, "X=b-$((2+2)); echo $X\n")
	a.WaitFor(t, "a-2")
	b.WaitFor(t, "b-4")
	if strings.Contains(a.String(), "b-4") || strings.Contains(b.String(), "a-2") {
		t.Fatal("two terminals share output")
	}
	a.T.Close()
	time.Sleep(3 * time.Second)
	rec, err := c.Commands.Get(bg, a.T.ID, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status == "running" || rec.Signal != "SIGHUP" {
		t.Errorf("the detached terminal after the grace: status %s signal %q", rec.Status, rec.Signal)
	}
	if _, err := c.Sandboxes.AttachTerminal(bg, sb.ID, a.T.ID, 0, 0); !lbb.IsConflict(err) {
		t.Errorf("attaching to a hung-up terminal: %v, want a conflict", err)
	}
	b.Type(t, "echo still-$((3+3))\n")
	b.WaitFor(t, "still-6")
}

// TestPtyGracePaused: a terminal nobody is attached to outlives a pause longer than its
// grace (paused time does not count), and re-attaches after resume with its recent output.
func TestPtyGracePaused(t *testing.T) {
	c, sb := ptySandbox(t, time.Second)
	a := ptytest.Shell(bg, t, c, sb.ID)
	a.Type(t, "X=$((4+4)); echo before-$X\n")
	a.WaitFor(t, "before-8")
	a.T.Close()
	if p, err := c.Sandboxes.Pause(bg, sb.ID); err != nil || p.Status != "paused" {
		t.Fatalf("pause with a terminal open: %+v %v", p, err)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := c.Sandboxes.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	term, err := c.Sandboxes.AttachTerminal(bg, sb.ID, a.T.ID, 0, 0)
	if err != nil {
		t.Fatalf("re-attaching after a pause longer than the grace: %v", err)
	}
	b := ptytest.Follow(term)
	defer term.Close()
	b.WaitFor(t, "before-8")
	b.Type(t, "echo after-$((X+1)); exit 4\n")
	b.WaitFor(t, "after-9")
	if code := b.WaitEnd(t); code != 4 {
		t.Errorf("exit code %d, want 4", code)
	}
}

// ptySandbox starts a server whose terminals' grace is grace (0: the default) and a sandbox
// in it.
func ptySandbox(t *testing.T, grace time.Duration) (*lbb.Client, *lbb.Sandbox) {
	s := newServer(t, func(c *config.Config) { c.TerminalGrace = grace })
	c, err := lbb.New(lbb.Options{BaseURL: s.url, APIKey: s.admin, Graph: "main"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(bg, lbb.CreateParams{ExpiresInSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	return c, sb
}

// TestPtyTwoSockets: a second socket on one terminal takes its held output, and the first,
// still open, goes on following what is kept: both see what is typed in either.
func TestPtyTwoSockets(t *testing.T) {
	c, sb := ptySandbox(t, 0)
	a := ptytest.Shell(bg, t, c, sb.ID)
	defer a.T.Close()
	a.Type(t, "echo one-$((1+1))\n")
	a.WaitFor(t, "one-2")
	term, err := c.Sandboxes.AttachTerminal(bg, sb.ID, a.T.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := ptytest.Follow(term)
	b.WaitFor(t, "one-2") // the repaint
	b.Type(t, "echo two-$((2+2))\n")
	b.WaitFor(t, "two-4")
	a.WaitFor(t, "two-4")
	a.Type(t, "echo three-$((3+3)); exit 5\n")
	b.WaitFor(t, "three-6")
	a.WaitFor(t, "three-6")
	if code := b.WaitEnd(t); code != 5 {
		t.Errorf("exit code %d on the second socket, want 5", code)
	}
	if code := a.WaitEnd(t); code != 5 {
		t.Errorf("exit code %d on the first socket, want 5", code)
	}
}
