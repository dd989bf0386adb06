//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// repoRoot is the repository this test runs from (test/e2e is two levels down).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// firstHour is the README's section "A first hour, mistakes included": its shell lines, in
// order, and the Python program it names.
type firstHour struct {
	lines  []string
	python map[string]string // file name → content
}

func readFirstHour(t *testing.T) firstHour {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## A first hour, mistakes included\n")
	if !ok {
		t.Fatal(`README.md has no section "A first hour, mistakes included"`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	fh := firstHour{python: map[string]string{}}
	blocks := regexp.MustCompile("(?s)```(sh|python)\n(.*?)```").FindAllStringSubmatch(sec, -1)
	for _, b := range blocks {
		switch b[1] {
		case "sh":
			for _, l := range strings.Split(b[2], "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					fh.lines = append(fh.lines, l)
				}
			}
		case "python":
			name, _, _ := strings.Cut(b[2], "\n")
			fh.python[strings.TrimSpace(strings.TrimPrefix(name, "#"))] = b[2]
		}
	}
	return fh
}

// step is what one line of the first hour must do: the line begins with cmd; check judges its
// exit code and output (nil: exit 0 is enough).
type step struct {
	cmd   string
	check func(r stepResult) error
}

type stepResult struct {
	code           int
	stdout, stderr string
	dir            string
	env            map[string]string
}

func (r stepResult) expect(code int, stdout func(string) bool, stderr func(string) bool) error {
	if r.code != code || stdout != nil && !stdout(r.stdout) || stderr != nil && !stderr(r.stderr) {
		return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, clip(r.stdout), clip(r.stderr))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:300] + " … " + s[len(s)-300:]
	}
	return s
}

func has(subs ...string) func(string) bool {
	return func(s string) bool {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return false
			}
		}
		return true
	}
}

func is(want string) func(string) bool { return func(s string) bool { return s == want } }

// apiError reads the error of a JSON answer.
func apiError(out string) (code, msg string) {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal([]byte(out), &e)
	return e.Error.Code, e.Error.Message
}

// TestFirstHour plays the README's first hour, mistakes included, against a real lbb serve:
// each shell line as a newcomer types it (bin/lbb, curl, python3 from Debian), in a
// directory of their own, and checks every answer exactly where it can. The README is the
// script: a line the test does not expect, or a missing one, fails it.
func TestFirstHour(t *testing.T) {
	s := startServer(t)
	fh := readFirstHour(t)
	want := seqOutput(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lbbBin, filepath.Join(dir, "bin", "lbb")); err != nil {
		t.Fatal(err)
	}
	// ./sdk/python as in a checkout, so that pip's build leaves nothing in the repository.
	if err := os.Mkdir(filepath.Join(dir, "sdk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot(t), "sdk", "python"), filepath.Join(dir, "sdk", "python")).CombinedOutput(); err != nil {
		t.Fatalf("copying sdk/python: %v: %s", err, out)
	}
	for name, code := range fh.python {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	steps := []step{
		{"export LBB_URL=", nil}, // the test's own server and key stand in
		{"bin/lbb --help", func(r stepResult) error {
			return r.expect(0, has("Usage: lbb", "sandbox ", "create|list|get|exec", "get|list|logs|kill", "audit"), is(""))
		}},
		{"bin/lbb sandboxes list", func(r stepResult) error {
			return r.expect(0, has("SANDBOX"), has("no live sandboxes (lbb sandbox list --all shows the ended ones too)"))
		}},
		{"bin/lbb sandbox lst", func(r stepResult) error {
			return r.expect(2, is(""), is("lbb sandbox: unknown verb \"lst\"; did you mean lbb sandbox list?\n"))
		}},
		{"printf 'print(\"hello\")", nil},
		{"bin/lbb run hello.py", func(r stepResult) error {
			return r.expect(1, is(""), has("the code defines no run(input, config) function", "Put the script in one:\n\ndef run(input, config):\n"))
		}},
		{"printf 'def run(input, config)", nil},
		{"bin/lbb run sum.py", func(r stepResult) error { return r.expect(0, is("6\n"), has("adding [1, 2, 3]")) }},
		{"bin/lbb templates create sum", func(r stepResult) error {
			return r.expect(0, func(s string) bool { return strings.HasPrefix(s, "saved sum version 1 (sbt_") }, nil)
		}},
		{"bin/lbb templates create sum", func(r stepResult) error {
			return r.expect(0, func(s string) bool {
				return strings.HasPrefix(s, "unchanged: sum version 1 already holds this (sbt_") && strings.HasSuffix(s, "; no new version\n")
			}, nil)
		}},
		{"bin/lbb run --template sum@9", func(r stepResult) error {
			return r.expect(1, is(""), func(s string) bool {
				return strings.HasPrefix(s, "lbb run: template sum@9 not found") && !strings.Contains(s, "lbb: ")
			})
		}},
		{"SB=$(bin/lbb sandbox create", func(r stepResult) error {
			return r.expect(0, func(s string) bool { return strings.HasPrefix(s, "sbx_") }, nil)
		}},
		{"bin/lbb sandbox exec $SB -- seq 1 3000000 > out.txt", func(r stepResult) error {
			got, err := os.ReadFile(filepath.Join(r.dir, "out.txt"))
			if err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("out.txt has %d of %d bytes (equal %v, %v); exit %d, stderr %q", len(got), len(want), bytes.Equal(got, want), err, r.code, r.stderr)
			}
			return r.expect(0, is(""), is(""))
		}},
		{"bin/lbb sandbox exec $SB 'ls -l / | wc -l'", func(r stepResult) error {
			return r.expect(0, regexp.MustCompile(`^[1-9][0-9]\n$`).MatchString, is(""))
		}},
		{"bin/lbb sandbox exec --timeout-ms 1000 $SB -- sleep 5", func(r stepResult) error {
			return r.expect(124, is(""), has("timed out after 1000 ms"))
		}},
		{`curl -s -X POST "$LBB_URL/v1/sandboxes/$SB/commands" `, func(r stepResult) error {
			code, msg := apiError(r.stdout)
			if code != "invalid_request" || !strings.HasPrefix(msg, "every route takes ?graph=: add ?graph=main (the graph API key key_") {
				return fmt.Errorf("%s: %s", code, msg)
			}
			return nil
		}},
		{`curl -s -X POST "$LBB_URL/v1/sandboxes/$SB/commands?graph=main" `, func(r stepResult) error {
			code, msg := apiError(r.stdout)
			if code != "idempotency_key_required" || !strings.Contains(msg, "a fresh random value for each new call") ||
				!strings.Contains(msg, "the same value on a retry of that call") {
				return fmt.Errorf("%s: %s", code, msg)
			}
			return nil
		}},
		{`curl -sN -X POST "$LBB_URL/v1/sandboxes/$SB/commands?graph=main" `, func(r stepResult) error {
			return r.expect(0, func(s string) bool {
				return strings.HasPrefix(s, "event: command\ndata: {") &&
					strings.Contains(s, "event: stdout\ndata: {\"stream\":\"stdout\",\"offset\":0,\"data\":\"hi\\n\"}\n\n") &&
					regexp.MustCompile(`event: exit\ndata: \{[^\n]*"status":"succeeded"[^\n]*\}\n\n$`).MatchString(s)
			}, is(""))
		}},
		{"printf '1,2\\n3,4\\n' > data.csv", nil},
		{`curl -s -X PUT "$LBB_URL/v1/sandboxes/$SB/files/content?graph=main&path=data.csv" `, func(r stepResult) error {
			return r.expect(0, has(`"path":"data.csv"`, `"size":8`), is(""))
		}},
		{"bin/lbb files put $SB data.csv", nil},
		{"bin/lbb sandbox exec $SB -- wc -l data.csv", func(r stepResult) error { return r.expect(0, is("2 data.csv\n"), is("")) }},
		{"bin/lbb sandbox list", func(r stepResult) error {
			return r.expect(0, func(s string) bool {
				return strings.Count(s, "\n") == 2 && strings.Contains(s, r.env["SB"]+"  ") && strings.Contains(s, "running")
			}, is(""))
		}},
		{"bin/lbb audit --limit 3", func(r stepResult) error {
			sb := "/v1/sandboxes/" + r.env["SB"]
			return r.expect(0, func(s string) bool {
				return strings.Count(s, "\n") == 4 && has("POST "+sb+"/commands", "PUT "+sb+"/files/content")(s)
			}, is(""))
		}},
		{"python3 -m venv --system-site-packages .venv && .venv/bin/pip install --no-index --no-build-isolation ./sdk/python", nil},
		{".venv/bin/python first_hour.py", func(r stepResult) error {
			lines := strings.Split(r.stdout, "\n")
			if len(lines) != 4 || lines[0] != "False the code defines no run(input, config) function: lbb calls run with the input and config and answers what it returns. Put the script in one:" ||
				!regexp.MustCompile(`^[1-9][0-9]$`).MatchString(lines[1]) || lines[2] != fmt.Sprintf("0 %d %d", len(want), len(want)) {
				return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, clip(r.stderr))
			}
			return r.expect(0, nil, nil)
		}},
		{"bin/lbb sandbox delete $SB", nil},
	}

	env := map[string]string{"LBB_URL": s.url, "LBB_API_KEY": s.key, "HOME": dir,
		// Debian's python3 and its httpx: a newcomer on this kind of machine has no other.
		"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
	assign := regexp.MustCompile(`^([A-Z_]+)=\$\((.*)\)$`)
	for i, line := range fh.lines {
		if i >= len(steps) {
			t.Fatalf("the README's first hour has a line %d the test does not know: %s", i+1, line)
		}
		st := steps[i]
		if !strings.HasPrefix(line, st.cmd) {
			t.Fatalf("line %d of the README's first hour is %q; the test expects one that begins %q", i+1, line, st.cmd)
		}
		if i == 0 {
			continue
		}
		script, name := line, ""
		if m := assign.FindStringSubmatch(line); m != nil {
			name, script = m[1], m[2]
		}
		r := runLine(t, dir, env, script)
		if name != "" {
			env[name] = strings.TrimSpace(r.stdout)
		}
		check := st.check
		if check == nil {
			check = func(r stepResult) error { return r.expect(0, nil, nil) }
		}
		if err := check(r); err != nil {
			t.Errorf("line %d: %s\n  %v", i+1, line, err)
		}
	}
	if len(fh.lines) != len(steps) {
		t.Errorf("the README's first hour has %d lines; the test expects %d", len(fh.lines), len(steps))
	}

	// The Go SDK's side of the same hour.
	c := s.client(t, "main")
	run, err := c.Sandboxes.Run(bg, lbb.RunParams{Code: `print("hello")`})
	if err != nil || run.OK || !strings.HasPrefix(run.Error, "the code defines no run(input, config) function: ") {
		t.Errorf("a plain script through the Go SDK: %+v %v", run, err)
	}
	_, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	var out bytes.Buffer
	res, err := c.Commands.Run(bg, sb.ID, lbb.CommandParams{ExecParams: lbb.ExecParams{Cmd: "ls -l / | wc -l"},
		OnStdout: func(b []byte) { out.Write(b) }, OutputLimit: 1 << 10})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || string(res.Stdout) != out.String() ||
		!regexp.MustCompile(`^[1-9][0-9]\n$`).MatchString(out.String()) || !slices.Equal(res.Command.Argv, []string{"bash", "-lc", "ls -l / | wc -l"}) {
		t.Errorf("a shell line through the Go SDK: %+v %q %v", res, out.String(), err)
	}
}

// runLine runs one line of the first hour under bash in dir with env, as a terminal would.
func runLine(t *testing.T, dir string, env map[string]string, line string) stepResult {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", line)
	cmd.Dir = dir
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return stepResult{code: code, stdout: out.String(), stderr: errb.String(), dir: dir, env: env}
}
