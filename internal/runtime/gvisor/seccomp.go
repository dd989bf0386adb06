//go:build linux

package gvisor

import "github.com/littlebigbrain/lbb/internal/runtime/seccomp"

// The agent's seccomp filter, which every process in the sandbox inherits, is the ns driver's
// (internal/runtime/seccomp: same deny list, same answers). gVisor runs the filter itself (the
// Sentry evaluates it for each system call) and applies runsc's OCI seccomp with EPERM only,
// which would break clone3's fallback to clone (ENOSYS) and the silent drop of signals to
// PID 1; hence a filter of our own rather than the OCI spec's. The agent loads it (connect
// mode) from /.lbb/seccomp.bpf.

// seccompProgram answers the filter as raw BPF (struct sock_filter[], native byte order).
func seccompProgram() ([]byte, error) {
	raw, err := seccomp.Program()
	if err != nil {
		return nil, err
	}
	return seccomp.Encode(raw), nil
}
