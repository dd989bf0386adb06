//go:build linux

// Package compiled is the sandbox's seccomp filter (package seccomp's Program) assembled
// ahead of time, for the processes that load it at every sandbox's start: the ns driver's
// init stage and the interpreters its zygote forks. It imports nothing but x/sys/unix, so
// that the binary of those stages (lbb-agent) neither links the assembler nor runs its
// package initialisation (its syscall tables' maps), and no sandbox assembles the same
// program again. seccomp's TestCompiledIsCurrent fails when the tables here differ from what
// seccomp.ProgramFor assembles; `go generate ./internal/runtime/seccomp/compiled` writes them.
package compiled

//go:generate go run ./gen -o zfilter.go

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// For answers the filter for the architecture goarch, nil for one it has none of.
func For(goarch string) []unix.SockFilter {
	switch goarch {
	case "amd64":
		return filterAMD64[:]
	case "arm64":
		return filterARM64[:]
	}
	return nil
}

// Arches are the architectures For knows.
var Arches = []string{"amd64", "arm64"}

// Filter answers the filter for the running architecture.
func Filter() ([]unix.SockFilter, error) {
	f := For(runtime.GOARCH)
	if len(f) == 0 {
		return nil, fmt.Errorf("seccomp: no compiled filter for %s", runtime.GOARCH)
	}
	return f, nil
}

// Encoded answers the filter as struct sock_filter[] in native byte order (seccomp.Encode's
// form): what a process that loads a filter from bytes reads.
func Encoded() ([]byte, error) {
	f, err := Filter()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(f))
	for _, in := range f {
		out = binary.NativeEndian.AppendUint16(out, in.Code)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}

// Load installs the filter on the calling thread only; the caller must hold its OS thread
// and have set no_new_privs (or hold CAP_SYS_ADMIN). The filter survives execve.
func Load() error {
	f, err := Filter()
	if err != nil {
		return err
	}
	if len(f) > 0xffff {
		return errors.New("seccomp: program size out of range")
	}
	// The kernel copies the program; the table itself is never written.
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: load filter: %w", errno)
	}
	return nil
}
