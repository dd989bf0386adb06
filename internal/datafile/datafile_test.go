package datafile

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestReadOrCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	made := 0
	v, err := ReadOrCreate(path, func() (string, error) { made++; return "one", nil })
	if err != nil || v != "one" {
		t.Fatalf("first: %q, %v", v, err)
	}
	v, err = ReadOrCreate(path, func() (string, error) { made++; return "two", nil })
	if err != nil || v != "one" || made != 1 {
		t.Fatalf("second: %q, %v, made %d times", v, err, made)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	// An empty file (a crash between create and write) is made again.
	os.WriteFile(path, nil, 0o600)
	if v, err := ReadOrCreate(path, func() (string, error) { return "three", nil }); err != nil || v != "three" {
		t.Fatalf("after an empty file: %q, %v", v, err)
	}
}

func TestReadOrCreateRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id")
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := ReadOrCreate(path, func() (string, error) { return string(rune('a' + i)), nil })
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatalf("callers answered different values: %q", got)
		}
	}
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.key")
	if err := Write(path, "a"); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, "b"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "b\n" {
		t.Fatalf("content %q", b)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is left: %v", err)
	}
}
