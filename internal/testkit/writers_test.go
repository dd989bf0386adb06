package testkit

import (
	"fmt"
	"regexp"
	"testing"
)

func TestLineWatch(t *testing.T) {
	w := WatchLines(regexp.MustCompile(`serving on (\S+)`))
	// A line arrives in pieces, after others; only the first match counts.
	for _, s := range []string{"starting\nlbb: serv", "ing on http://127.0.0.1:1", "\nlbb: serving on http://x\n"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	select {
	case got := <-w.Found():
		if got != "http://127.0.0.1:1" {
			t.Errorf("found %q", got)
		}
	default:
		t.Fatal("nothing found")
	}
	select {
	case got := <-w.Found():
		t.Errorf("a second match %q", got)
	default:
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			fmt.Fprintf(&b, "%d\n", i)
		}
	}()
	for range 100 {
		_ = b.String()
	}
	<-done
	if got := b.String(); len(got) != 290 {
		t.Errorf("%d bytes written", len(got))
	}
}
