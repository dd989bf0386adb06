//go:build linux

package kfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789"), 1000) // past the first buffer, several times
	for _, want := range [][]byte{nil, []byte("1"), big} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Write(p, want); err != nil {
			t.Fatal(err)
		}
		got, err := Read(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Read after Write of %d bytes: %d bytes, %v", len(want), len(got), err)
		}
	}
	// A file of /proc, whose size stat does not know.
	b, err := Read("/proc/self/status")
	if err != nil || !strings.Contains(string(b), "\nPid:\t"+strconv.Itoa(os.Getpid())+"\n") {
		t.Fatalf("Read(/proc/self/status) = %q, %v", b, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Read(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Read of a missing file: %v", err)
	}
	if err := Write(missing, []byte("1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Write to a missing file: %v (it must not create it)", err)
	}
}
