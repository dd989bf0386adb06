//go:build linux

// Package seccomp builds and loads the sandbox's system call filter: allow by default, and
// deny what a sandbox never needs — mounting, namespaces, kernel modules, kexec, bpf, perf,
// keyrings, ptrace and cross-process memory access, io_uring, clock setting, raw I/O ports,
// socket families other than unix, inet, inet6 and netlink routes, and signals to PID 1.
//
// The filter is assembled by github.com/elastic/go-seccomp-bpf, with one addition: a call
// from any architecture other than the native one (on amd64, the i386 ABI reachable via
// int 0x80) kills the process, since a deny list keyed on native numbers would not match it.
package seccomp

import (
	"encoding/binary"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/seccomp/compiled"
)

// Denied are refused with EPERM. Names unknown to the running architecture are skipped.
var Denied = []string{
	// Filesystems and mount namespaces.
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	"open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd", "swapon", "swapoff",
	// Namespaces: setns always; unshare and clone only with CLONE_NEW* (see below).
	"setns",
	// The kernel itself.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "get_kernel_syms", "query_module", "reboot", "syslog", "acct", "lookup_dcookie",
	"bpf", "perf_event_open", "userfaultfd", "uselib", "vhangup", "nfsservctl", "_sysctl",
	"iopl", "ioperm", "fanotify_init",
	// Keyrings are per host uid, shared by every sandbox.
	"keyctl", "add_key", "request_key",
	// Other processes' memory and file descriptors.
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	// io_uring bypasses this filter for the operations it performs.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Clocks are host-wide.
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
}

// newNamespaces are the CLONE_NEW* flags. CLONE_NEWTIME (0x80) is left out for clone, where
// the low byte is the exit signal, and added for unshare.
const newNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Policy is the sandbox's filter policy for the running architecture.
func Policy() (libseccomp.Policy, *arch.Info, error) { return PolicyFor("") }

// PolicyFor is the sandbox's filter policy for the architecture goarch ("": the running one).
func PolicyFor(goarch string) (libseccomp.Policy, *arch.Info, error) {
	info, err := arch.GetInfo(goarch)
	if err != nil {
		return libseccomp.Policy{}, nil, err
	}
	var names []string
	for _, n := range Denied {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	nsFlag := func(name string, mask uint64) libseccomp.NameWithConditions {
		return libseccomp.NameWithConditions{Name: name, Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.BitsSet, Value: mask},
		}}
	}
	// clone's flags are its first argument on amd64 and arm64 alike.
	withArgs := []libseccomp.NameWithConditions{
		nsFlag("clone", newNamespaces),
		nsFlag("unshare", newNamespaces|unix.CLONE_NEWTIME),
	}
	p := libseccomp.Policy{
		DefaultAction: libseccomp.ActionAllow,
		Syscalls: []libseccomp.SyscallGroup{
			{Names: names, NamesWithCondtions: withArgs, Action: libseccomp.ActionErrno},
			// clone3 passes its flags in memory that a filter cannot read: answer ENOSYS so that
			// libc falls back to clone, whose flags are checked above.
			{Names: []string{"clone3"}, Action: libseccomp.ActionErrno | libseccomp.Action(unix.ENOSYS)},
			socketFamilies(),
		},
	}
	p.Syscalls = append(p.Syscalls, signalsToInit()...)
	return p, info, nil
}

// signalsToInit keeps processes from signalling PID 1, the agent: a script's kill -HUP 1 would
// end the sandbox (the agent handles every signal, as a Go program does, so Linux's shield
// for a namespace's init, which drops the signals it has no handler for, does not hold; and
// gVisor's init has no such shield at all, not even against SIGKILL). kill, tgkill,
// rt_sigqueueinfo and rt_tgsigqueueinfo of pid 1 answer success without sending, as Linux
// does for an init that ignores the signal; tkill, which could name one of the agent's
// threads, and pidfd_open of pid 1 are refused, and so is pidfd_send_signal, which also
// takes a descriptor of /proc/1 (callers fall back to kill). The agent also ignores the
// signals it does not use (cmd/lbb-agent), for those sent to its threads' ids.
func signalsToInit() []libseccomp.SyscallGroup {
	pidOne := func(name string) libseccomp.NameWithConditions {
		return libseccomp.NameWithConditions{Name: name, Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.Equal, Value: 1},
		}}
	}
	return []libseccomp.SyscallGroup{
		{
			NamesWithCondtions: []libseccomp.NameWithConditions{
				pidOne("kill"), pidOne("tgkill"), pidOne("rt_sigqueueinfo"), pidOne("rt_tgsigqueueinfo"),
			},
			Action: Succeed,
		},
		{
			Names:              []string{"tkill"},
			NamesWithCondtions: []libseccomp.NameWithConditions{pidOne("pidfd_open")},
			Action:             libseccomp.ActionErrno,
		},
		{Names: []string{"pidfd_send_signal"}, Action: libseccomp.ActionErrno | libseccomp.Action(unix.ENOSYS)},
	}
}

// Families are the socket families a sandbox may open: unix, IPv4, IPv6 (loopback only, in
// its network namespace), and netlink for route queries (NETLINK_ROUTE: glibc's getaddrinfo
// asks it which addresses exist). Every other family answers EAFNOSUPPORT, as a kernel
// without it would: AF_VSOCK above all, which no network namespace separates (it reaches
// the host and the hypervisor), and AF_PACKET, AF_ALG, AF_XDP and the rest, which a sandbox
// never needs and whose kernel code is rarely exercised.
var Families = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

func socketFamilies() libseccomp.SyscallGroup {
	var other libseccomp.ArgumentConditions // the domain is none of Families
	for _, f := range Families {
		other = append(other, libseccomp.Condition{Argument: 0, Operation: libseccomp.NotEqual, Value: f})
	}
	return libseccomp.SyscallGroup{
		NamesWithCondtions: []libseccomp.NameWithConditions{
			{Name: "socket", Conditions: other},
			{Name: "socketpair", Conditions: other},
			// Netlink for routes only: not audit, uevents, netfilter, xfrm…
			{Name: "socket", Conditions: libseccomp.ArgumentConditions{
				{Argument: 0, Operation: libseccomp.Equal, Value: unix.AF_NETLINK},
				{Argument: 2, Operation: libseccomp.NotEqual, Value: unix.NETLINK_ROUTE},
			}},
		},
		Action: libseccomp.ActionErrno | libseccomp.Action(unix.EAFNOSUPPORT),
	}
}

// Succeed is an action that answers 0 without running the call. The assembler turns a
// plain errno action into EPERM, so such rules carry this errno and Program rewrites them
// after assembly.
const Succeed = libseccomp.ActionErrno | 0xfff

// Program assembles the filter, prefixed with the architecture check. The sandbox's own
// stages load the copy assembled ahead of time (package compiled, which the test
// TestCompiledIsCurrent keeps equal to this): assembling it, and the assembler's package
// initialisation, cost every sandbox's start CPU.
func Program() ([]bpf.RawInstruction, error) { return ProgramFor("") }

// ProgramFor assembles the filter for the architecture goarch ("": the running one).
func ProgramFor(goarch string) ([]bpf.RawInstruction, error) {
	p, info, err := PolicyFor(goarch)
	if err != nil {
		return nil, err
	}
	body, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	for i, in := range body {
		if r, ok := in.(bpf.RetConstant); ok && r.Val == uint32(Succeed) {
			body[i] = bpf.RetConstant{Val: uint32(libseccomp.ActionErrno)}
		}
	}
	const archOffset = 4 // offsetof(struct seccomp_data, arch)
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(libseccomp.ActionKillProcess)},
	}, body...)
	return bpf.Assemble(prog)
}

// Encode answers raw as struct sock_filter[] in native byte order: what a process that loads
// a filter from a file (gVisor's agent) reads.
func Encode(raw []bpf.RawInstruction) []byte {
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out
}

// Load installs the filter, as package compiled holds it, on the calling thread only; the
// caller must hold its OS thread and have set no_new_privs (or hold CAP_SYS_ADMIN). The
// filter survives execve.
func Load() error { return compiled.Load() }
