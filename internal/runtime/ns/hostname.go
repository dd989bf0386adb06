//go:build linux

package ns

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
)

// SetHostname renames started sandbox id (runtime.Renamer). The agent cannot (it has no
// CAP_SYS_ADMIN, and Landlock keeps /etc read-only), so the host does it: one OS thread
// joins the sandbox's uts namespace, sets the name and goes back. That needs privilege over
// the sandbox's user namespace, which the driver's root has.
func (d *Driver) SetHostname(ctx context.Context, id, name string) error {
	if err := driverkit.CheckHostname(name); err != nil {
		return err
	}
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	target := fmt.Sprintf("/proc/%d/ns/uts", sb.InitPID())
	var st, self unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		return err
	}
	if err := unix.Stat("/proc/self/ns/uts", &self); err != nil {
		return err
	}
	if st.Ino == self.Ino && st.Dev == self.Dev {
		// The sandbox shares the host's uts namespace: renaming it would rename the host.
		return errors.New("the sandbox shares the host's uts namespace")
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
