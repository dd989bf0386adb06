//go:build linux && amd64

package idmap

import (
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneWaiter clones with flags onto stack; the child (in this address space, so it runs no
// Go) sets its parent-death signal to SIGKILL, exits if its parent is no longer ppid, and
// otherwise pauses until killed. It answers the child's pid, or an errno.
func cloneWaiter(flags, stack, ppid uintptr) (pid, errno uintptr)

// waiterStack is the child's stack: it uses none, but a stack of its own keeps it off the
// calling goroutine's.
var waiterStack = sync.OnceValues(func() ([]byte, error) {
	return unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
})

// waiter starts a child in a new user namespace, unmapped yet, that waits to be killed;
// wait kills and reaps it. The calling thread is locked: the child's parent-death signal
// follows it.
func waiter() (pid int, wait func(), err error) {
	stack, err := waiterStack()
	if err != nil {
		return tracedChild()
	}
	// The child runs on the parent's memory with this thread's signal mask: with a signal
	// handled there, Go's handler would run as this thread. All blocked, only SIGKILL (and
	// SIGSTOP) reach it.
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return 0, nil, err
	}
	p, errno := cloneWaiter(unix.CLONE_NEWUSER|unix.CLONE_VM|unix.CLONE_FILES|uintptr(unix.SIGCHLD),
		uintptr(unsafe.Pointer(&stack[0]))+uintptr(len(stack)), uintptr(os.Getpid()))
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); err != nil {
		panic(err) // this thread would run on with every signal blocked
	}
	if errno != 0 {
		if errno == uintptr(unix.EINVAL) || errno == uintptr(unix.ENOSYS) {
			return tracedChild()
		}
		return 0, nil, unix.Errno(errno)
	}
	pid = int(p)
	return pid, func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		for {
			_, err := unix.Wait4(pid, nil, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}, nil
}
