// Package testkit is what the tree's tests share: the checks that skip a test whose
// precondition is missing (root, user namespaces, runsc, the base image, the agent), the
// CI switch that turns those skips into failures, and the static lbb-agent built once per
// test binary.
//
// A privileged suite skips, saying why, where it cannot run, so `go test ./...` works on a
// laptop. CI sets LBB_REQUIRE_PRIVILEGED=1 (.ci/run): the same checks then fail the test with
// the same message, so a green CI run proves the namespace, cgroup and gVisor suites ran.
// A -short skip stays a skip: it is asked for, not missing.
package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RequirePrivilegedEnv names the CI switch: "1" turns SkipPrivileged into a failure.
const RequirePrivilegedEnv = "LBB_REQUIRE_PRIVILEGED"

// SkipPrivileged ends a test whose precondition is missing on this host, saying which: it
// skips, or fails with the same message when LBB_REQUIRE_PRIVILEGED=1.
func SkipPrivileged(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		t.Fatalf("%s (%s=1: a privileged test may not skip)", msg, RequirePrivilegedEnv)
		return
	}
	t.Skip(msg)
}

// RequiresRoot stops a test unless it runs as root (euid 0).
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipPrivileged(t, "needs root (euid 0)")
	}
}

// RequiresUserNS stops a test unless this host lets a process make a user namespace.
func RequiresUserNS(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		SkipPrivileged(t, "needs user namespaces (user.max_user_namespaces > 0)")
	}
}

// RequiresRunsc stops a test unless runsc is at path.
func RequiresRunsc(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		SkipPrivileged(t, "runsc is not installed at %s (run scripts/install-runsc.sh): %v", path, err)
	}
}

// Main runs the tests of a package (call it from TestMain) and removes what Build built.
// A non-nil agent is set to AgentBinary first; a failed build ends the run with status 1.
func Main(m *testing.M, agent *string) {
	if agent != nil {
		p, err := AgentBinary()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*agent = p
	}
	code := m.Run()
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

var atExit []func()

// AtExit runs f after the package's tests, in Main: for what the first test that needs it
// starts and later tests share (a database server).
func AtExit(f func()) { atExit = append(atExit, f) }

// Agent is AgentBinary for a test or benchmark: a failed build fails it.
func Agent(t testing.TB) string {
	t.Helper()
	p, err := AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// AgentBinary answers the static guest agent tests run: $LBB_AGENT when set, else
// cmd/lbb-agent built once for this test binary. LBB_AGENT_RACE=1 always builds it, under
// the race detector (which needs cgo).
func AgentBinary() (string, error) {
	race := os.Getenv("LBB_AGENT_RACE") != ""
	if p := os.Getenv("LBB_AGENT"); p != "" && !race {
		return p, nil
	}
	return build("github.com/littlebigbrain/lbb/cmd/lbb-agent", race)
}

var built struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// Build builds pkg (an import path in this module) once for this test binary, static
// (CGO_ENABLED=0), into a temporary directory that Main removes, and answers its path: the
// binary is named for the package's last element, so binaries built together find each
// other (lbb finds lbb-agent next to itself).
func Build(pkg string) (string, error) { return build(pkg, false) }

func build(pkg string, race bool) (string, error) {
	built.Lock()
	defer built.Unlock()
	if p, ok := built.bins[pkg]; ok {
		return p, nil
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "lbb-test-bin-")
		if err != nil {
			return "", err
		}
		// The ns driver bind-mounts the agent into sandboxes, whose users must reach it.
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", err
		}
		built.dir, built.bins = dir, map[string]string{}
	}
	out := filepath.Join(built.dir, filepath.Base(pkg))
	args, cgo := []string{"build", "-trimpath", "-o", out}, "CGO_ENABLED=0"
	if race {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), cgo)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	built.bins[pkg] = out
	return out, nil
}
