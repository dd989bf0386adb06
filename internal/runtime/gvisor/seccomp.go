//go:build linux

package gvisor

import (
	libseccomp "github.com/elastic/go-seccomp-bpf"

	"github.com/littlebigbrain/lbb/internal/runtime/seccomp"
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

// seccompProgram answers the filter as raw BPF (struct sock_filter[], native byte order).
func seccompProgram() ([]byte, error) {
	pidOne := func(name string) libseccomp.NameWithConditions {
		return libseccomp.NameWithConditions{Name: name, Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.Equal, Value: 1},
		}}
	}
	raw, err := seccomp.Program(
		libseccomp.SyscallGroup{
			NamesWithCondtions: []libseccomp.NameWithConditions{
				pidOne("kill"), pidOne("tgkill"), pidOne("rt_sigqueueinfo"), pidOne("rt_tgsigqueueinfo"),
			},
			Action: seccomp.Succeed,
		},
		libseccomp.SyscallGroup{
			Names:              []string{"tkill"},
			NamesWithCondtions: []libseccomp.NameWithConditions{pidOne("pidfd_open")},
			Action:             libseccomp.ActionErrno,
		},
	)
	if err != nil {
		return nil, err
	}
	return seccomp.Encode(raw), nil
}
