//go:build linux

// Package spawn starts the host's long-lived children: from one OS thread that lives as long
// as the process (Start, As), and, for children in a user namespace of their own, through a
// small helper process (Helper), so that the fork copies the helper's few pages rather than
// the server's.
package spawn

import (
	"fmt"
	"os/exec"
	goruntime "runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Start starts cmd from one OS thread that lives as long as the process: Pdeathsig fires when
// the thread that forked the child exits, and a caller's thread may exit (a goroutine that
// ends while locked to its thread takes the thread with it).
func Start(cmd *exec.Cmd) error { return As(cmd, 0) }

// As is Start with the forking thread's effective uid set to euid (its capabilities kept) for
// the fork: a user namespace the child makes (CLONE_NEWUSER) is then owned by euid, and what
// the kernel counts per user for the processes in it (inotify instances, queued signals,
// message queues, processes) is charged to euid in the host's namespace, not to the host's
// root. The thread keeps every capability, so the child may still exec what root may, join
// any cgroup (CLONE_INTO_CGROUP), and the thread writes its id maps. Only that one thread
// changes (a raw setresuid; Go's syscall.Setresuid would change every thread of the
// process), and it is root again before any other spawn.
func As(cmd *exec.Cmd, euid uint32) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			goruntime.LockOSThread()
			for r := range spawnReqs {
				r.done <- startOn(r.cmd, r.euid)
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd, euid, done}
	return <-done
}

type spawnReq struct {
	cmd  *exec.Cmd
	euid uint32
	done chan error
}

var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

func startOn(cmd *exec.Cmd, euid uint32) error {
	if euid == 0 {
		return cmd.Start()
	}
	if err := setThreadEUID(euid); err != nil {
		return fmt.Errorf("spawn as uid %d: %w", euid, err)
	}
	err := cmd.Start()
	if rerr := setThreadEUID(0); rerr != nil {
		// This thread cannot be trusted with another spawn; neither can the process.
		panic(fmt.Sprintf("spawn: the spawn thread cannot become root again: %v", rerr))
	}
	return err
}

// setThreadEUID sets the calling thread's effective uid (its real and saved uids stay 0) and
// raises its effective capabilities to its permitted ones, which a change away from uid 0
// clears. Back at 0, the kernel raises them itself.
func setThreadEUID(euid uint32) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(euid), ^uintptr(0)); errno != 0 {
		return fmt.Errorf("setresuid: %w", errno)
	}
	if euid == 0 {
		return nil
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
