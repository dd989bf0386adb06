//go:build linux

package nsinit

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is applied with raw system calls rather than github.com/landlock-lsm/go-landlock:
// that library always enforces on every thread of the process (through libpsx, which is not
// in go.sum), while the sandbox init needs it on the one thread that then execs the agent.
// The policy is the library's best-effort idea: handle what the kernel's ABI knows.

// Landlock filesystem rights, by ABI version.
const (
	llRead  = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llV1 = llRead | llWrite
	llV2 = llV1 | unix.LANDLOCK_ACCESS_FS_REFER
	llV3 = llV2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llV5 = llV3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// V9 adds RESOLVE_UNIX; sockets are created where writes are allowed, so grant it there.
	llV9 = llV5 | unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
)

// llFileAccess are the rights a rule on a file may hold.
const llFileAccess = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// landlockScoped: signals and abstract unix sockets stay within the sandbox's Landlock domain.
func landlockScoped(abi int) uint64 {
	if abi >= 6 {
		return unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	return 0
}

// landlockPolicy says which paths keep which rights; everything else is read and exec only.
type landlockPolicy struct {
	// Writable trees get every right the ABI handles.
	Writable []string
}

// landlockABI is the kernel's Landlock ABI version, 0 when Landlock is off.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func handledFS(abi int) uint64 {
	switch {
	case abi >= 9:
		return llV9
	case abi >= 5:
		return llV5
	case abi >= 3:
		return llV3
	case abi >= 2:
		return llV2
	case abi >= 1:
		return llV1
	}
	return 0
}

// restrictThread enforces p on the calling thread (no TSYNC), which must hold its OS thread
// and have no_new_privs set. It returns the ABI used; 0 means the kernel has no Landlock and
// nothing was enforced.
func (p landlockPolicy) restrictThread() (int, error) {
	abi := landlockABI()
	if abi == 0 {
		return 0, nil
	}
	handled := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	attr.Scoped = landlockScoped(abi)
	// The kernel takes a longer struct than it knows when the extra fields are zero.
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return abi, fmt.Errorf("landlock_create_ruleset (ABI %d): %w", abi, errno)
	}
	fd := int(rfd)
	defer unix.Close(fd)

	add := func(path string, access uint64) error {
		// Not followed: a symlink the sandbox left in its writable layer must not steer a
		// right elsewhere (a file rule such as /etc/machine-id's, say, onto /etc/passwd).
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("landlock: open %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// Directory-only rights on a file are refused by the kernel.
			access &= llFileAccess
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access & handled, Parent_fd: int32(pfd)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", path, errno)
		}
		return nil
	}
	if err := add("/", llRead); err != nil {
		return abi, err
	}
	for _, w := range p.Writable {
		if err := add(w, handled); err != nil {
			return abi, err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return abi, fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return abi, nil
}
