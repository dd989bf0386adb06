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

	"github.com/littlebigbrain/lbb/internal/runtime/seccomp/compiled"
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
		probe("tkill_1", unix.SYS_TKILL, 1, 0)
		probe("pidfd_open_1", unix.SYS_PIDFD_OPEN, 1, 0)
		probe("pidfd_send_signal", unix.SYS_PIDFD_SEND_SIGNAL, ^uintptr(0), 0, 0, 0)
		probe("socket_vsock", unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM)
		probe("socket_alg", unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET)
		probe("socket_netlink_audit", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)
		probe("socketpair_vsock", unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM)
		probe("socket_unix", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM)
		probe("socket_inet6", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM)
		probe("socket_netlink_route", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
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
	eperm, enosys, eafnosupport := fmt.Sprint(int(unix.EPERM)), fmt.Sprint(int(unix.ENOSYS)), fmt.Sprint(int(unix.EAFNOSUPPORT))
	for name, want := range map[string]string{
		"mount": eperm, "unshare_user": eperm, "unshare_files": "0", "clone3": enosys,
		"keyctl": eperm, "bpf": eperm, "ptrace": eperm, "getpid": "0",
		"socket_vsock": eafnosupport, "socket_alg": eafnosupport, "socket_netlink_audit": eafnosupport,
		"socketpair_vsock": eafnosupport, "socket_unix": "0", "socket_inet6": "0", "socket_netlink_route": "0",
		"tkill_1": eperm, "pidfd_open_1": eperm, "pidfd_send_signal": enosys,
	} {
		if got[name] != want {
			t.Errorf("%s: errno %s, want %s", name, got[name], want)
		}
	}
}

// TestCompiledIsCurrent: the filter the sandboxes load (package compiled, assembled ahead of
// time) is the one this package assembles, for every architecture it holds one of.
func TestCompiledIsCurrent(t *testing.T) {
	for _, arch := range compiled.Arches {
		raw, err := ProgramFor(arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		got := compiled.For(arch)
		same := len(got) == len(raw)
		for i := 0; same && i < len(raw); i++ {
			same = got[i] == unix.SockFilter{Code: raw[i].Op, Jt: raw[i].Jt, Jf: raw[i].Jf, K: raw[i].K}
		}
		if !same {
			t.Errorf("%s: package compiled's filter (%d instructions) is not ProgramFor's (%d): run go generate ./internal/runtime/seccomp/compiled", arch, len(got), len(raw))
		}
	}
	enc, err := compiled.Encoded()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := Program()
	if string(enc) != string(Encode(raw)) {
		t.Error("compiled.Encoded() is not Encode(Program())")
	}
}
