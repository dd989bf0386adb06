package undo

import (
	"errors"
	"slices"
	"testing"
)

func TestUndoStack(t *testing.T) {
	var log []string
	var u Stack
	ok := func(name string) error {
		return u.Step(name, func() error { log = append(log, "do "+name); return nil },
			func() error { log = append(log, "undo "+name); return nil })
	}
	if err := ok("a"); err != nil {
		t.Fatal(err)
	}
	if err := u.Step("b", func() error { return nil }, func() error { return errors.New("b stuck") }); err != nil {
		t.Fatal(err)
	}
	if err := ok("c"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := u.Step("d", func() error { return boom }, func() error { t.Error("undo of a failed step ran"); return nil })
	if !errors.Is(err, boom) || err.Error() != "d: boom\nundo b: b stuck" {
		t.Fatalf("error %q", err)
	}
	if want := []string{"do a", "do c", "undo c", "undo a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	if err := u.Undo(); err != nil {
		t.Fatalf("second undo: %v", err)
	}
	if len(log) != 4 {
		t.Fatalf("second undo ran again: %v", log)
	}
}
