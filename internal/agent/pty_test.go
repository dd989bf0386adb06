package agent_test

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// lockedBuffer collects a terminal's output for a test that waits for text in it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitFor(t *testing.T, out *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A shell on a pty: it is a terminal (tty, size, resize), keeps state across lines, and ^C
// interrupts its foreground job.
func TestExecPty(t *testing.T) {
	ta := startAgent(t)
	ctx := ctxT(t)
	pr, pw := io.Pipe()
	p, err := ta.c.Exec(ctx, agent.ExecRequest{ID: "pty1", Argv: []string{"sh"}, Env: map[string]string{"PS1": "$ "},
		Pty: &agent.PtySize{Cols: 100, Rows: 30}}, pr)
	if err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	done := make(chan agent.Exit, 1)
	go func() {
		ex, err := p.Wait(out, nil)
		if err != nil {
			t.Error(err)
		}
		done <- ex
	}()
	type_ := func(s string) {
		if _, err := io.WriteString(pw, s); err != nil {
			t.Fatal(err)
		}
	}
	// Typed lines are echoed: what is waited for is what only the output holds.
	type_("tty >/dev/null && echo is-a-$((6*7)); stty size; echo TERM=$TERM\n")
	waitFor(t, out, "is-a-42")
	waitFor(t, out, "\n30 100")
	waitFor(t, out, "TERM=xterm-256color")
	if err := ta.c.Resize(ctx, "pty1", agent.PtySize{Cols: 132, Rows: 43}); err != nil {
		t.Fatal(err)
	}
	type_("stty size\n")
	waitFor(t, out, "\n43 132")
	type_("mkdir -p d && cd d\necho cwd=$(pwd)\n")
	waitFor(t, out, "cwd="+ta.ws+"/d")
	type_("echo zz-$((5+5)); sleep 30; echo after-$((2+2))\n")
	waitFor(t, out, "zz-10")
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	type_("\x03")
	type_("echo inter$((1+1))rupted\n")
	waitFor(t, out, "inter2rupted")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("^C took %v to interrupt sleep", d)
	}
	if strings.Contains(out.String(), "after-4") {
		t.Errorf("^C did not interrupt the sleep")
	}
	type_("exit 7\n")
	select {
	case ex := <-done:
		if ex.ExitCode != 7 {
			t.Errorf("exit code %d, want 7", ex.ExitCode)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the shell did not exit")
	}
	pw.Close()
	if err := ta.c.Resize(ctx, "pty1", agent.PtySize{Cols: 1, Rows: 1}); !agent.IsCode(err, agent.CodeNotFound) {
		t.Errorf("resize after the end: %v, want not_found", err)
	}
}
