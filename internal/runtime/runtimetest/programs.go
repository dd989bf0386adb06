package runtimetest

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A HostileProgram is one of the hostile suite's Python programs with the check of what it
// printed, so that every way user code runs — a command here, a code context's cell in a
// real server (test/e2e) — asserts the same containment with the same program.
type HostileProgram struct {
	Name string
	Code string
	// Check answers what is wrong with the program's stdout; nil when it was contained.
	Check func(stdout string) error
}

// ForkCount forks until it cannot: in a sandbox of at most limit processes it must stop
// below limit with EAGAIN.
func ForkCount(limit int) HostileProgram {
	return HostileProgram{Name: "fork count", Code: `
import os, time, errno
n, err, kids = 0, None, []
while n < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
    n += 1
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
print(n, err)
`, Check: func(out string) error {
		var n, errno int
		if _, err := fmt.Sscan(out, &n, &errno); err != nil || n >= limit || errno != int(syscall.EAGAIN) {
			return fmt.Errorf("forks: %q, want fewer than %d then EAGAIN", out, limit)
		}
		return nil
	}}
}

// Network reaches for a server on the host's loopback (port, HostSecret), one on the host's
// abstract unix socket @abstract, and the Internet: it must reach none, and its own loopback
// must work.
func Network(port int, abstract string) HostileProgram {
	return HostileProgram{Name: "network", Code: AttemptPy + fmt.Sprintf(`
print("host", attempt("127.0.0.1", %d))
u = socket.socket(socket.AF_UNIX)
try:
    u.connect("\0%s"); print("abstract connected")
except OSError as e:
    print("abstract", errno.errorcode.get(e.errno, str(e)))
print("out", attempt("1.1.1.1", 80))
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname(), timeout=3)
print("lo", "works")
`, port, abstract), Check: func(out string) error {
		for _, want := range []string{"host ECONNREFUSED", "out ENETUNREACH", "abstract ECONNREFUSED", "lo works"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("network: %q, want %q", out, want)
			}
		}
		return nil
	}}
}

type syscallProbe struct {
	name string
	nr   uintptr
	args []uint64
	want syscall.Errno
}

var syscallProbes = []syscallProbe{
	{"mount", unix.SYS_MOUNT, []uint64{0, 0, 0, 0, 0}, unix.EPERM},
	{"umount2", unix.SYS_UMOUNT2, []uint64{0, 0}, unix.EPERM},
	{"init_module", unix.SYS_INIT_MODULE, []uint64{0, 0, 0}, unix.EPERM},
	{"finit_module", unix.SYS_FINIT_MODULE, []uint64{0, 0, 0}, unix.EPERM},
	{"delete_module", unix.SYS_DELETE_MODULE, []uint64{0, 0}, unix.EPERM},
	{"keyctl", unix.SYS_KEYCTL, []uint64{0, 0}, unix.EPERM},
	{"add_key", unix.SYS_ADD_KEY, []uint64{0, 0, 0, 0, 0}, unix.EPERM},
	{"request_key", unix.SYS_REQUEST_KEY, []uint64{0, 0, 0, 0}, unix.EPERM},
	{"bpf", unix.SYS_BPF, []uint64{0, 0, 0}, unix.EPERM},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, []uint64{0, 0, 0, 0, 0}, unix.EPERM},
	{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, unix.EPERM},
	{"unshare(CLONE_NEWNS)", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNS}, unix.EPERM},
	{"setns", unix.SYS_SETNS, []uint64{0, 0}, unix.EPERM},
	{"ptrace(ATTACH, 1)", unix.SYS_PTRACE, []uint64{unix.PTRACE_ATTACH, 1, 0, 0}, unix.EPERM},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV, []uint64{1, 0, 0, 0, 0, 0}, unix.EPERM},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, []uint64{1, 0}, unix.EPERM},
	{"userfaultfd", unix.SYS_USERFAULTFD, []uint64{0}, unix.EPERM},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, []uint64{0, 0, 0}, unix.EPERM},
	{"kexec_load", unix.SYS_KEXEC_LOAD, []uint64{0, 0, 0, 0}, unix.EPERM},
	{"clock_settime", unix.SYS_CLOCK_SETTIME, []uint64{0, 0}, unix.EPERM},
	{"chroot", unix.SYS_CHROOT, []uint64{0}, unix.EPERM},
	{"pivot_root", unix.SYS_PIVOT_ROOT, []uint64{0, 0}, unix.EPERM},
	{"clone3", unix.SYS_CLONE3, []uint64{0, 0}, unix.ENOSYS},
}

// Syscalls tries what a sandbox must never do, with raw system calls from Python (the image
// has no compiler). Numbers are the host architecture's, which is the sandbox's.
func Syscalls() HostileProgram {
	var py strings.Builder
	py.WriteString("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n")
	py.WriteString("def sc(nr, *a):\n    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])\n    return 0 if r != -1 else ctypes.get_errno()\n")
	for _, p := range syscallProbes {
		args := ""
		for _, a := range p.args {
			args += fmt.Sprintf(", %d", a)
		}
		fmt.Fprintf(&py, "print(%q, sc(%d%s))\n", p.name, p.nr, args)
	}
	// The same through the libraries a program would use.
	py.WriteString(`
try:
    os.unshare(os.CLONE_NEWUSER); print("os.unshare", 0)
except OSError as e:
    print("os.unshare", e.errno)
`)
	return HostileProgram{Name: "forbidden syscalls", Code: py.String(), Check: func(out string) error {
		got := lastWord(out)
		var errs []error
		for _, p := range syscallProbes {
			if got[p.name] != fmt.Sprint(int(p.want)) {
				errs = append(errs, fmt.Errorf("%s: errno %q, want %d (%v)", p.name, got[p.name], int(p.want), p.want))
			}
		}
		if got["os.unshare"] != fmt.Sprint(int(unix.EPERM)) {
			errs = append(errs, fmt.Errorf("os.unshare(CLONE_NEWUSER): %q", got["os.unshare"]))
		}
		return errors.Join(errs...)
	}}
}

// lastWord maps each line's text before its last space to its last word.
func lastWord(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i := strings.LastIndex(line, " "); i > 0 {
			got[line[:i]] = line[i+1:]
		}
	}
	return got
}

// ProcSelfExe writes to the running binaries (its own interpreter, the agent) and renames
// the agent: none of it may work.
func ProcSelfExe() HostileProgram {
	return HostileProgram{Name: "proc self exe", Code: `
import os
for p in ["/proc/self/exe", "/proc/1/exe", "/.lbb/agent"]:
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try:
            fd = os.open(p, flags)
            os.write(fd, b"\x7fELF pwned")
            print("WROTE", p)
        except OSError as e:
            pass
try:
    os.rename("/.lbb/agent", "/.lbb/agent.old"); print("RENAMED")
except OSError:
    pass
print("done")
`, Check: func(out string) error {
		if strings.Contains(out, "WROTE") || strings.Contains(out, "RENAMED") || !strings.Contains(out, "done") {
			return fmt.Errorf("/proc/self/exe: %q", out)
		}
		return nil
	}}
}

// AgentOutOfReach: user code runs as the same id as the agent, yet must not open its memory,
// environment or descriptors, nor kill it. The caller checks that the agent still answers.
func AgentOutOfReach() HostileProgram {
	return HostileProgram{Name: "agent out of reach", Code: `
import os
for path, mode in [("/proc/1/mem", "r+b"), ("/proc/1/environ", "rb"), ("/proc/1/fd/3", "rb"), ("/.lbb/agent", "rb")]:
    try:
        open(path, mode, buffering=0)
        print("OPENED", path)
    except OSError as e:
        print("refused", path, e.errno)
os.kill(1, 9)  # the kernel drops it: the init of a pid namespace has no handler for it
`, Check: func(out string) error {
		if strings.Contains(out, "OPENED") || !strings.Contains(out, "refused /.lbb/agent") {
			return fmt.Errorf("the agent is within reach: %q", out)
		}
		return nil
	}}
}

// SocketFamilies: only the families a sandbox needs open a socket (unix, IPv4, IPv6, and
// netlink for route queries). The others reach past the network namespace (AF_VSOCK to the
// host or hypervisor) or into little-used kernel code (AF_ALG, AF_XDP, AF_PACKET…).
func SocketFamilies() HostileProgram {
	return HostileProgram{Name: "socket families", Code: `
import socket, errno
def attempt(family, type_, proto=0):
    try:
        socket.socket(family, type_, proto).close(); return 0
    except OSError as e:
        return e.errno
def pair(family):
    try:
        a, b = socket.socketpair(family, socket.SOCK_STREAM); a.close(); b.close(); return 0
    except OSError as e:
        return e.errno
S, D, R = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW
for name, fam, typ, proto in [
    ("unix", 1, S, 0), ("inet", 2, S, 0), ("inet6", 10, S, 0), ("netlink route", 16, R, 0),
    ("vsock", 40, S, 0), ("packet", 17, R, 0), ("alg", 38, 5, 0), ("xdp", 44, R, 0),
    ("key", 15, R, 2), ("appletalk", 5, D, 0), ("x25", 9, 5, 0), ("rds", 21, 5, 0),
    ("can", 29, R, 1), ("tipc", 30, 5, 0), ("bluetooth", 31, R, 0), ("kcm", 41, D, 0),
    ("qipcrtr", 42, D, 0), ("smc", 43, S, 0), ("mctp", 45, D, 0),
    ("netlink audit", 16, R, 9), ("netlink uevent", 16, D, 15),
]:
    print(name, attempt(fam, typ, proto))
print("pair unix", pair(1))
print("pair vsock", pair(40))
`, Check: func(out string) error {
		got := lastWord(out)
		var errs []error
		for _, name := range []string{"unix", "inet", "inet6", "netlink route", "pair unix"} {
			if got[name] != "0" {
				errs = append(errs, fmt.Errorf("%s: errno %q, want it to open", name, got[name]))
			}
		}
		refused := map[string]bool{fmt.Sprint(int(unix.EAFNOSUPPORT)): true, fmt.Sprint(int(unix.EPERM)): true}
		for _, name := range []string{"vsock", "packet", "alg", "xdp", "key", "appletalk", "x25", "rds", "can", "tipc",
			"bluetooth", "kcm", "qipcrtr", "smc", "mctp", "netlink audit", "netlink uevent", "pair vsock"} {
			if !refused[got[name]] {
				errs = append(errs, fmt.Errorf("%s: errno %q, want EAFNOSUPPORT or EPERM", name, got[name]))
			}
		}
		return errors.Join(errs...)
	}}
}

// SignalsToInit signals the agent's threads and PID 1 through a pidfd; the caller checks that
// the agent and the sandbox live on.
func SignalsToInit() HostileProgram {
	return HostileProgram{Name: "signals to init", Code: `
import os, signal, time
tids = []
try: tids = [int(t) for t in os.listdir("/proc/1/task")]
except OSError: pass
for tid in sorted(set(tids + list(range(2, 40)))):
    for s in (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGTERM):
        try:
            if tid != os.getpid(): os.kill(tid, s)
        except OSError: pass
try:
    fd = os.open("/proc/1", os.O_RDONLY | os.O_DIRECTORY)
    signal.pidfd_send_signal(fd, signal.SIGHUP)
except (OSError, AttributeError): pass
time.sleep(0.5)
`, Check: func(string) error { return nil }}
}

// Int80Py makes a system call through the i386 ABI (int 0x80), a second system call table a
// deny list keyed on native numbers would miss (amd64 only). Contained means it never runs:
// ns's filter kills the process (SIGSYS, nothing printed); a kernel with no i386 table at all
// (gVisor's) answers ENOSYS: "int80 returned -38".
const Int80Py = `
import ctypes, mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20 (getpid); int 0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
print("int80 returned", ctypes.CFUNCTYPE(ctypes.c_int)(addr)())
`
