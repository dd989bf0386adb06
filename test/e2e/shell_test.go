package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestShellCLI runs `lbb sandbox shell` under a real terminal (tmux): raw mode (^C reaches
// the sandbox's shell, not lbb), the size at the start and after the window is resized
// (SIGWINCH), state across lines, and the shell's exit code as lbb's; then --new.
func TestShellCLI(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		testkit.SkipPrivileged(t, "tmux is not installed (scripts/deps.sh installs it): the test needs a real terminal")
	}
	s := startServer(t, "--pool=false")
	_, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	tm := newTmux(t, s)
	tm.start(fmt.Sprintf("%s sandbox shell %s -- sh; echo LBB-EXIT=$?; sleep 600", lbbBin, sb.ID))
	tm.keys("PS1='$ '; stty size; echo ok-$((6*7))\n")
	tm.wait("ok-42")
	tm.wait("30 100")
	tm.run("resize-window", "-x", "120", "-y", "40")
	time.Sleep(300 * time.Millisecond)
	tm.keys("cd /tmp; stty size\n")
	tm.wait("40 120")
	tm.keys("echo zz-$((5+5)); sleep 60; echo slept-$((2+2))\n")
	tm.wait("zz-10")
	time.Sleep(300 * time.Millisecond)
	tm.run("send-keys", "-t", "main", "C-c")
	tm.keys("echo at-$(pwd)-$((1+1))\n")
	tm.wait("at-/tmp-2")
	if strings.Contains(tm.screen(), "slept-4") {
		t.Error("^C did not interrupt the sleep in the sandbox")
	}
	tm.keys("exit 7\n")
	tm.wait("LBB-EXIT=7")

	// --new: a scratch sandbox for one session, deleted after.
	// A second session before the first goes: the last session's end ends the tmux server.
	tm.run("rename-session", "-t", "main", "first")
	tm.start(fmt.Sprintf("%s sandbox shell --new -- sh -c 'echo scratch-$((3*3)); exit 0'; echo LBB-EXIT=$?; sleep 600", lbbBin))
	tm.wait("LBB-EXIT=0")
	tm.wait("scratch-9")
	out, _, err := s.cli("sandbox", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, `"status": "running"`) + strings.Count(out, `"status":"running"`); n > 1 {
		t.Errorf("the --new sandbox is still running: %s", out)
	}
}

type tmux struct {
	t      *testing.T
	socket string
	env    []string
}

func newTmux(t *testing.T, s *server) *tmux {
	tm := &tmux{t: t, socket: fmt.Sprintf("lbb-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
		env: append(os.Environ(), "LBB_URL="+s.url, "LBB_API_KEY="+s.key, "LBB_GRAPH=main", "TERM=xterm-256color")}
	t.Cleanup(func() {
		tm.cmd("kill-server").Run()
		os.Remove(filepath.Join(os.TempDir(), fmt.Sprintf("tmux-%d", os.Getuid()), tm.socket))
	})
	return tm
}

func (tm *tmux) cmd(args ...string) *exec.Cmd {
	c := exec.Command("tmux", append([]string{"-L", tm.socket, "-f", "/dev/null"}, args...)...)
	c.Env = tm.env
	return c
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := tm.cmd(args...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

func (tm *tmux) start(line string) {
	tm.t.Helper()
	tm.run("new-session", "-d", "-s", "main", "-x", "100", "-y", "30", line)
	tm.run("set-option", "-t", "main", "window-size", "manual")
}

func (tm *tmux) keys(text string) {
	tm.t.Helper()
	for _, line := range strings.SplitAfter(text, "\n") {
		if l := strings.TrimSuffix(line, "\n"); l != "" {
			tm.run("send-keys", "-t", "main", "-l", l)
		}
		if strings.HasSuffix(line, "\n") {
			tm.run("send-keys", "-t", "main", "Enter")
		}
	}
}

func (tm *tmux) screen() string { return tm.run("capture-pane", "-p", "-t", "main", "-S", "-200") }

func (tm *tmux) wait(want string) {
	tm.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sc := tm.screen()
		if strings.Contains(sc, want) {
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %q on the screen:\n%s", want, sc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
