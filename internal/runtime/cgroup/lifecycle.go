package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// What v1 and v2 share to make, kill and remove a group.

// errBusy is what removing a group answers while the kernel still counts exiting tasks.
var errBusy = syscall.EBUSY

func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("cgroup: invalid name %q", name)
	}
	return nil
}

// create makes group name of m with setup (its directories and limits); on failure it
// removes what setup left, as Manager.Create promises.
func create(m Manager, name string, setup func() error) (err error) {
	if err := validName(name); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = errors.Join(err, m.Remove(ctx, name))
		}
	}()
	return setup()
}

// freezeKill SIGKILLs what is in group name of m, frozen so that nothing forks between
// reading the list and killing it, then thaws it so that the killed tasks can exit. A task
// stuck in the kernel may keep the group freezing: it kills anyway after a short wait.
func freezeKill(ctx context.Context, m Manager, name string) error {
	fctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	ferr := m.Freeze(fctx, name)
	cancel()
	pids, err := m.Procs(name)
	if err != nil {
		return err
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if err := m.Thaw(ctx, name); err != nil {
		return errors.Join(err, ferr)
	}
	return nil
}

// killLoop kills until group name of m is empty: without a frozen group, a fork may race a
// kill.
func killLoop(ctx context.Context, m Manager, name string) error {
	return poll(ctx, "kill group "+name, func() (bool, error) {
		pids, err := m.Procs(name)
		if err != nil {
			return false, err
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		return len(pids) == 0, nil
	})
}

// Rmdir removes a group directory, retrying while the kernel still counts exiting tasks. A
// missing directory is no error.
func Rmdir(ctx context.Context, dir string) error {
	return poll(ctx, "remove "+dir, func() (bool, error) {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		if errors.Is(err, errBusy) {
			return false, nil // tasks still exiting
		}
		return false, err
	})
}

// remove kills what is left in group name of m and removes its directories.
func remove(ctx context.Context, m Manager, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := m.Kill(ctx, name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, d := range m.Paths(name) {
		errs = append(errs, Rmdir(ctx, d))
	}
	return errors.Join(errs...)
}

// poll calls f until it reports done, backing off from 100µs to 20ms.
func poll(ctx context.Context, what string, f func() (bool, error)) error {
	for delay := 100 * time.Microsecond; ; delay *= 2 {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if delay > 20*time.Millisecond {
			delay = 20 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(delay):
		}
	}
}
