//go:build linux

package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain doubles as the filtered child: the filter must not touch the test process.
func TestMain(m *testing.M) {
	if os.Getenv("LBB_SECCOMP_CHILD") == "1" {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fmt.Println("nnp:", err)
			os.Exit(2)
		}
		if err := Load(); err != nil {
			fmt.Println("load:", err)
			os.Exit(2)
		}
		probe := func(name string, nr uintptr, args ...uintptr) {
			var a [6]uintptr
			copy(a[:], args)
			_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
			fmt.Printf("%s=%d\n", name, errno)
		}
		probe("mount", unix.SYS_MOUNT)
		probe("unshare_user", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
		probe("unshare_files", unix.SYS_UNSHARE, unix.CLONE_FILES)
		probe("clone3", unix.SYS_CLONE3)
		probe("keyctl", unix.SYS_KEYCTL)
		probe("bpf", unix.SYS_BPF)
		probe("ptrace", unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1)
		probe("getpid", unix.SYS_GETPID)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestProgramAssembles(t *testing.T) {
	raw, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 10 || len(raw) > 4096 {
		t.Fatalf("program of %d instructions", len(raw))
	}
}

func TestFilter(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LBB_SECCOMP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	eperm, enosys := fmt.Sprint(int(unix.EPERM)), fmt.Sprint(int(unix.ENOSYS))
	for name, want := range map[string]string{
		"mount": eperm, "unshare_user": eperm, "unshare_files": "0", "clone3": enosys,
		"keyctl": eperm, "bpf": eperm, "ptrace": eperm, "getpid": "0",
	} {
		if got[name] != want {
			t.Errorf("%s: errno %s, want %s", name, got[name], want)
		}
	}
}
