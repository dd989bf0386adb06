//go:build linux

package nsinit

import (
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// The child side of TestHardening: harden this thread, then exec a shell that probes.
func init() {
	dir := os.Getenv("LBB_HARDEN_TEST_DIR")
	if dir == "" {
		return
	}
	goruntime.LockOSThread()
	h := hardening{NoFile: 256, FileSizeBytes: 1 << 20, Writable: []string{dir}}
	if err := h.apply(); err != nil {
		fmt.Println("harden:", err)
		os.Exit(3)
	}
	err := syscall.Exec("/bin/sh", []string{"sh", "-c", os.Getenv("LBB_HARDEN_TEST_SCRIPT")}, os.Environ())
	fmt.Println("exec:", err)
	os.Exit(3)
}

// TestHardening applies the agent's hardening in a child and checks from a shell it execs
// that every capability is gone and Landlock, seccomp and the rlimits hold. It needs no
// root: the child gets its own user namespace (as root does, it starts with capabilities
// there).
func TestHardening(t *testing.T) {
	testkit.RequiresUserNS(t)
	if landlockABI() == 0 {
		t.Log("no Landlock on this kernel: the write checks below are skipped")
	}
	inside, outside := t.TempDir(), t.TempDir()
	script := `
grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
echo ok > "$IN/f" && echo write-inside-ok
echo no > "$OUT/f" 2>/dev/null && echo write-outside-ok
unshare -U true 2>/dev/null && echo unshare-ok
echo nofile=$(ulimit -n) core=$(ulimit -c)
`
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LBB_HARDEN_TEST_DIR="+inside, "LBB_HARDEN_TEST_SCRIPT="+script, "IN="+inside, "OUT="+outside)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
		"CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "nofile=256 core=0"} {
		if !strings.Contains(s, want) {
			t.Errorf("lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "unshare-ok") {
		t.Errorf("unshare -U worked:\n%s", s)
	}
	if landlockABI() > 0 {
		if !strings.Contains(s, "write-inside-ok") || strings.Contains(s, "write-outside-ok") {
			t.Errorf("landlock:\n%s", s)
		}
	}
}
