package api_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// agentBin is a guest agent built for the tests: Level 3 routes run on the local driver
// (no isolation; real processes, real files), which needs no root.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lbb-api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "lbb-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/littlebigbrain/lbb/cmd/lbb-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building lbb-agent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
