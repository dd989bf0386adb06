package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStartDeps: every package the agent links runs its initialisation at each start of a
// sandbox's init and agent (twice per sandbox on ns). The seccomp assembler (its syscall
// tables' maps) must stay out: the init loads the filter assembled ahead of time
// (internal/runtime/seccomp/compiled).
func TestStartDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/elastic/go-seccomp-bpf") {
			t.Errorf("lbb-agent links %s", p)
		}
	}
}
