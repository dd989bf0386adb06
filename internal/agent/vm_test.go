package agent

import (
	"strings"
	"testing"
)

func TestVMConfigRoundTrip(t *testing.T) {
	c := VMConfig{SandboxID: "sbx_1", Hostname: "box", MemoryMiB: 512, Pids: 256, TmpMiB: 64, DiskMiB: 1024, NoFile: 4096}
	for _, layer := range []bool{false, true} {
		c := c
		c.Layer = layer
		env := append([]string{"HOME=/", "TERM=linux"}, c.Cmdline()...)
		got, ok, err := ParseVMConfig(env)
		if !ok || err != nil || got != c {
			t.Fatalf("ParseVMConfig(%q) = %+v %v %v, want %+v", env, got, ok, err, c)
		}
	}
	for _, w := range c.Cmdline() {
		// The kernel passes NAME=value words without dots or spaces to init's environment.
		if strings.ContainsAny(w, " .") && !strings.HasPrefix(w, vmEnv+"HOSTNAME=") {
			t.Errorf("word %q would not reach init's environment", w)
		}
	}
	if _, ok, _ := ParseVMConfig([]string{"HOME=/"}); ok {
		t.Error("an environment without the config parsed as one")
	}
	bad := []string{vmEnv + "SANDBOX=x", vmEnv + "HOSTNAME=h", vmEnv + "MEMORY_MIB=0", vmEnv + "PIDS=1", vmEnv + "TMP_MIB=1", vmEnv + "DISK_MIB=1", vmEnv + "NOFILE=1"}
	if _, ok, err := ParseVMConfig(bad); !ok || err == nil {
		t.Errorf("a zero memory limit: ok=%v err=%v, want an error", ok, err)
	}
}
