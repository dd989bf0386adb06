//go:build linux

package gvisor

import (
	"encoding/binary"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"

	nsseccomp "github.com/littlebigbrain/lbb/internal/runtime/ns/seccomp"
)

// The agent's seccomp filter, which every process in the sandbox inherits: the ns driver's
// (same deny list, same answers), plus what gVisor's kernel does not do itself. The init of a
// PID namespace ignores signals it has no handler for, SIGKILL from inside included; gVisor's
// does not, so a signal to PID 1 (kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo) is dropped
// here, answering success as Linux does, and tkill, which could name one of the agent's
// threads, and pidfd_open of PID 1 are refused. gVisor runs the filter itself (the Sentry
// evaluates it for each system call) and applies runsc's OCI seccomp with EPERM only, hence a
// filter of our own rather than the OCI spec's. It is loaded by the agent (connect mode) from
// /.lbb/seccomp.bpf.

// errnoZero marks the rules that answer 0: the assembler turns a plain errno action into
// EPERM, so they are written with this errno and rewritten after assembly.
const errnoZero = 0xfff

// seccompProgram answers the filter as raw BPF (struct sock_filter[], native byte order).
func seccompProgram() ([]byte, error) {
	p, info, err := nsseccomp.Policy()
	if err != nil {
		return nil, err
	}
	pidOne := func(name string) libseccomp.NameWithConditions {
		return libseccomp.NameWithConditions{Name: name, Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.Equal, Value: 1},
		}}
	}
	p.Syscalls = append(p.Syscalls,
		libseccomp.SyscallGroup{
			NamesWithCondtions: []libseccomp.NameWithConditions{
				pidOne("kill"), pidOne("tgkill"), pidOne("rt_sigqueueinfo"), pidOne("rt_tgsigqueueinfo"),
			},
			Action: libseccomp.ActionErrno | errnoZero,
		},
		libseccomp.SyscallGroup{
			Names:              []string{"tkill"},
			NamesWithCondtions: []libseccomp.NameWithConditions{pidOne("pidfd_open")},
			Action:             libseccomp.ActionErrno,
		},
	)
	body, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	for i, in := range body {
		if r, ok := in.(bpf.RetConstant); ok && r.Val == uint32(libseccomp.ActionErrno|errnoZero) {
			body[i] = bpf.RetConstant{Val: uint32(libseccomp.ActionErrno)}
		}
	}
	const archOffset = 4 // offsetof(struct seccomp_data, arch)
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(libseccomp.ActionKillProcess)},
	}, body...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}
