//go:build linux

package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// exitCode is the status a CLI run ended with (0 when err is nil).
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatalf("lbb did not run: %v", err)
	}
	return ee.ExitCode()
}

// cliSandbox creates a long-lived sandbox with the CLI and deletes it at the end of the test.
func cliSandbox(t *testing.T, s *server) string {
	t.Helper()
	out, errb, err := s.cli("sandbox", "create", "--expires", "600")
	if err != nil {
		t.Fatalf("lbb sandbox create: %v: %s", err, errb)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { s.cli("sandbox", "delete", id) })
	return id
}

// The CLI as a newcomer meets it: the mistakes of issue 20's first hour, against a real server.
func TestCLIForgivesANewcomer(t *testing.T) {
	s := startServer(t)
	sb := cliSandbox(t, s)

	t.Run("help exits 0 on stdout", func(t *testing.T) {
		for _, args := range [][]string{{"run", "--help"}, {"sandbox", "exec", "--help"}, {"commands", "--help"}, {"help"}} {
			out, errb, err := s.cli(args...)
			if code := exitCode(t, err); code != 0 || !strings.Contains(out, "Usage: lbb") || errb != "" {
				t.Errorf("lbb %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errb)
			}
		}
		if out, _, _ := s.cli("help"); !strings.Contains(out, "get|list|logs|kill") {
			t.Errorf("lbb help does not list commands logs and kill:\n%s", out)
		}
	})
	t.Run("aliases", func(t *testing.T) {
		for _, args := range [][]string{{"sandboxes", "list"}, {"sandbox", "ls"}, {"template", "list"}, {"templates", "ls"}} {
			out, errb, err := s.cli(args...)
			if err != nil || !strings.Contains(out, "\n") {
				t.Errorf("lbb %s: %v, stdout %q, stderr %q", strings.Join(args, " "), err, out, errb)
			}
		}
		if out, _, _ := s.cli("sandboxes", "list"); !strings.Contains(out, sb) {
			t.Errorf("lbb sandboxes list does not show %s:\n%s", sb, out)
		}
	})
	t.Run("did you mean", func(t *testing.T) {
		_, errb, err := s.cli("sandboxs", "list")
		if code := exitCode(t, err); code != 2 || errb != "lbb: unknown command \"sandboxs\"; did you mean lbb sandbox?\n" {
			t.Errorf("lbb sandboxs list: exit %d, stderr %q", code, errb)
		}
	})
	t.Run("one prefix", func(t *testing.T) {
		_, errb, err := s.cli("run", "--template", "sum@9")
		if code := exitCode(t, err); code != 1 || !strings.HasPrefix(errb, "lbb run: ") || strings.Contains(errb, "lbb: ") || !strings.Contains(errb, "sum") {
			t.Errorf("lbb run --template sum@9: exit %d, stderr %q", code, errb)
		}
	})
	t.Run("audit", func(t *testing.T) {
		out, errb, err := s.cli("audit", "--limit", "50")
		if err != nil || !strings.Contains(out, "POST /v1/sandboxes") {
			t.Errorf("lbb audit: %v, stderr %q, stdout\n%s", err, errb, out)
		}
	})
}

func TestCLIExecTimeoutSaysSo(t *testing.T) {
	s := startServer(t)
	sb := cliSandbox(t, s)
	out, errb, err := s.cli("sandbox", "exec", "--timeout-ms", "1000", sb, "--", "sleep", "5")
	code := exitCode(t, err)
	if code != 124 || out != "" || !strings.Contains(errb, "timed out after 1000 ms") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 124 and \"timed out after 1000 ms\"", code, out, errb)
	}
	// The same through commands logs -f of a detached one.
	out, errb, err = s.cli("sandbox", "exec", "--detach", "--timeout-ms", "500", sb, "--", "sleep", "5")
	if err != nil {
		t.Fatalf("exec --detach: %v: %s", err, errb)
	}
	_, errb, err = s.cli("commands", "logs", "-f", strings.TrimSpace(out))
	if code := exitCode(t, err); code != 124 || !strings.Contains(errb, "timed out after 500 ms") {
		t.Errorf("commands logs -f: exit %d, stderr %q", code, errb)
	}
}

func TestCLISandboxListShowsLiveSandboxes(t *testing.T) {
	s := startServer(t)
	_, run := s.run("cli-list-1", `{"run": {"code": "def run(input, config):\n    return 1"}, "wait_ms": 60000}`)
	oneCall, _ := run["sandbox"].(string)
	if oneCall == "" || run["ok"] != true {
		t.Fatalf("one-call run: %v", run)
	}
	live := cliSandbox(t, s)
	stopped := cliSandbox(t, s)
	if _, errb, err := s.cli("sandbox", "stop", stopped); err != nil {
		t.Fatalf("stop: %v: %s", err, errb)
	}

	out, errb, err := s.cli("sandbox", "list")
	if err != nil || !strings.Contains(out, live) || !strings.Contains(out, stopped) || strings.Contains(out, oneCall) {
		t.Errorf("lbb sandbox list (%v, %s) should show %s and %s, not the ended one-call %s:\n%s", err, errb, live, stopped, oneCall, out)
	}
	out, _, err = s.cli("sandbox", "list", "--all")
	if err != nil || !strings.Contains(out, live) || !strings.Contains(out, oneCall) {
		t.Errorf("lbb sandbox list --all (%v) should show %s and %s:\n%s", err, live, oneCall, out)
	}
	out, _, err = s.cli("sandbox", "list", "--status", "destroyed")
	if err != nil || strings.Contains(out, live) || !strings.Contains(out, oneCall) {
		t.Errorf("lbb sandbox list --status destroyed (%v) should show %s alone:\n%s", err, oneCall, out)
	}
	out, _, err = s.cli("sandbox", "list", "--status", "stopped,running")
	if err != nil || !strings.Contains(out, live) || !strings.Contains(out, stopped) || strings.Contains(out, oneCall) {
		t.Errorf("lbb sandbox list --status stopped,running (%v):\n%s", err, out)
	}
}
