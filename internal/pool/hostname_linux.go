//go:build linux

package pool

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// The agent cannot rename its sandbox (it has no CAP_SYS_ADMIN, and Landlock keeps /etc
// read-only), so a claim that asks for another hostname than the slot was made with renames
// the sandbox's uts namespace from the host: one OS thread joins it, sets the name and goes
// back. It needs a sandbox that names its init's host pid (InitPID, which the ns driver's
// sandboxes have) and privilege over its user namespace (root on the host).

type initPIDer interface{ InitPID() int }

var errNoRename = errors.New("the driver's sandboxes cannot be renamed from the host")

// canRename says whether claims may ask for a hostname: the driver's sandboxes have their
// own uts namespace the host can enter (the ns driver's, with the server run as root).
func canRename(d runtime.Driver) bool {
	return d != nil && d.Name() == "ns" && os.Geteuid() == 0
}

func setHostname(sb runtime.Sandbox, name string) error {
	ip, ok := sb.(initPIDer)
	if !ok {
		return errNoRename
	}
	target := fmt.Sprintf("/proc/%d/ns/uts", ip.InitPID())
	var st, self unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		return err
	}
	if err := unix.Stat("/proc/self/ns/uts", &self); err != nil {
		return err
	}
	if st.Ino == self.Ino && st.Dev == self.Dev {
		// The sandbox shares the host's uts namespace: renaming it would rename the host.
		return errNoRename
	}
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		back, err := renameFromThread(target, name)
		if back {
			goruntime.UnlockOSThread()
		} // else the thread ends with this goroutine, still in the sandbox's namespace
		done <- err
	}()
	return <-done
}

// renameFromThread sets the hostname of the uts namespace at target from the calling
// (locked) thread. back says the thread is in its own namespace again.
func renameFromThread(target, name string) (back bool, _ error) {
	tfd, err := unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, err
	}
	defer unix.Close(tfd)
	sfd, err := unix.Open("/proc/thread-self/ns/uts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, err
	}
	defer unix.Close(sfd)
	if err := unix.Setns(tfd, unix.CLONE_NEWUTS); err != nil {
		return true, fmt.Errorf("entering the sandbox's uts namespace: %w", err)
	}
	serr := unix.Sethostname([]byte(name))
	if err := unix.Setns(sfd, unix.CLONE_NEWUTS); err != nil {
		return false, errors.Join(serr, err)
	}
	return true, serr
}
