//go:build linux

package ns_test

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// TestMain lets this test binary be the sandbox init, as cmd/lbb is in production.
func TestMain(m *testing.M) {
	ns.MaybeInit()
	os.Exit(m.Run())
}

func TestRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("the runtime suites start real sandboxes; skipped in -short mode")
	}
	runtimetest.RequiresRoot(t)
	runtimetest.RequiresUserNS(t)
	agentBin := agentBinary(t)
	stateDir := traversableTempDir(t)
	cfg := ns.Config{StateDir: stateDir, AgentPath: agentBin, CgroupParent: "lbb-test", Logger: testLogger(t)}
	var d *ns.Driver
	runtimetest.Run(t, func(t *testing.T) runtime.Driver {
		d = ns.New(cfg)
		return d
	}, runtimetest.Options{
		Leftovers: func(id string) []string { return d.Leftovers(id) },
		HostFiles: []string{agentBin},
	})
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// agentBinary is $LBB_AGENT, or the agent built (static) into a directory the sandbox's ids
// can reach: the init bind-mounts it as the sandbox's root, which owns nothing on the host.
func agentBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LBB_AGENT"); p != "" {
		return p
	}
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lbb-agent-")
		if err != nil {
			agentErr = err
			return
		}
		os.Chmod(dir, 0o755)
		agentPath = filepath.Join(dir, "lbb-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", agentPath, "github.com/littlebigbrain/lbb/cmd/lbb-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = err
			agentPath = string(out)
		}
	})
	if agentErr != nil {
		t.Fatalf("build lbb-agent: %v\n%s", agentErr, agentPath)
	}
	t.Cleanup(func() {}) // the binary is removed with the process's temp files below
	return agentPath
}

// traversableTempDir is a fresh state directory whose ancestors the sandbox's ids can pass.
func traversableTempDir(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
