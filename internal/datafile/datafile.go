// Package datafile reads and writes the small files a server keeps in its data directory
// (the admin key, the host secret, the control plane's id): whole, durable, 0600.
package datafile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ReadOrCreate answers the trimmed content of path, or, when it does not exist, makes it
// with make's value: written and synced in a file of its own, then linked into place, so
// that path never holds a partial value, of two processes making it at once one wins and
// both answer its value, and a crash never loses a value that was answered. An empty path
// (left by an older build's crash) is replaced.
func ReadOrCreate(path string, make func() (string, error)) (string, error) {
	for range 3 {
		b, err := os.ReadFile(path)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			return string(bytes.TrimSpace(b)), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		v, merr := make()
		if merr != nil {
			return "", merr
		}
		if err == nil {
			return v, Write(path, v)
		}
		f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".new-*")
		if err != nil {
			return "", err
		}
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			os.Remove(f.Name())
			return "", err
		}
		if err := writeSync(f, v); err != nil {
			os.Remove(f.Name())
			return "", fmt.Errorf("%s: %w", path, err)
		}
		err = os.Link(f.Name(), path)
		os.Remove(f.Name())
		if errors.Is(err, os.ErrExist) {
			continue // made meanwhile: read it
		}
		if err != nil {
			return "", err
		}
		return v, syncDir(filepath.Dir(path))
	}
	return "", fmt.Errorf("%s: made and removed by another process meanwhile", path)
}

// Write replaces path's content with v at once (a new file renamed over it), durably.
func Write(path, v string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := writeSync(f, v); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func writeSync(f *os.File, v string) error {
	_, err := f.WriteString(v + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
