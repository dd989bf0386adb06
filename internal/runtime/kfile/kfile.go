//go:build linux

// Package kfile reads and writes the small files of the kernel's pseudo file systems (/proc,
// /sys, cgroupfs) with plain system calls. os.ReadFile and os.WriteFile would register each
// file with the network poller (cgroupfs and sysfs files are pollable: an epoll_ctl to add and
// one to remove) and stat it: three system calls of five wasted, on paths a sandbox's start
// and stop walk dozens of times.
package kfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// Read reads the file at path whole.
func Read(path string) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// Write writes value to the existing file at path in one write, as the kernel's files of
// settings want it (a short write is an error).
func Write(path string, value []byte) error {
	fd, err := open(path, unix.O_WRONLY)
	if err != nil {
		return err
	}
	for {
		n, err := unix.Write(fd, value)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n < len(value) {
			err = unix.EIO
		}
		cerr := unix.Close(fd)
		if err == nil {
			err = cerr
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		return nil
	}
}

func open(path string, mode int) (int, error) {
	for {
		fd, err := unix.Open(path, mode|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}
