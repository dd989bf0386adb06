package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ownUID makes the agent a user of its own inside the sandbox: real and saved uid uid, its
// effective uid still 0 (what it writes is root's, as before). The processes it starts run as
// root all through (startSpec's Credential), and a process may signal another only when its
// real or effective uid is the other's real or saved uid: none of them can signal the agent,
// by its pid or by any of its threads' ids. That is what keeps them from ending it under
// gVisor, whose PID 1 has no shield against SIGKILL and SIGSTOP from inside.
//
// The agent keeps one capability, CAP_SETUID, to give its processes uid 0; those get none:
// root's exec gives a process its bounding and inheritable sets, both empty here. (Linux's
// securebits would say so too, but gVisor has only SECBIT_KEEP_CAPS.) It must hold CAP_SETUID
// and CAP_SETPCAP when it starts, and must call this before loading its seccomp filter, which
// drops the signals Go sends each thread to change them all.
func ownUID(uid int) error {
	// Every thread: credentials and capabilities are per thread (syscall.Setresuid and
	// AllThreadsSyscall change them all).
	if err := syscall.Setresuid(uid, 0, uid); err != nil {
		return fmt.Errorf("setresuid(%d, 0, %d): %w", uid, uid, err)
	}
	for c := 0; c <= lastCap(); c++ {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); errno != 0 && errno != syscall.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, errno)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: 1 << unix.CAP_SETUID, Permitted: 1 << unix.CAP_SETUID}}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	if r, e, s := unix.Getresuid(); r != uid || e != 0 || s != uid {
		return errors.New("the agent's uids did not change")
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}
