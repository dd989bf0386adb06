package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
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

func TestContentAndDigest(t *testing.T) {
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("abc")), nil }
	if got := Content(t)(open()); got != "abc" {
		t.Errorf("content %q", got)
	}
	sum, n, err := Digest(t)(open())
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; sum != want || n != 3 || err != nil {
		t.Errorf("digest %s %d %v, want %s", sum, n, err, want)
	}
	r := &recorder{TB: t}
	Content(r)(nil, errors.New("no such file"))
	if r.fatal != "no such file" {
		t.Errorf("a failed call: %q", r.fatal)
	}
}

func TestGreeter(t *testing.T) {
	port := Greeter(t, "hello\n")
	for range 2 {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if string(b) != "hello\n" || err != nil {
			t.Errorf("read %q %v", b, err)
		}
	}
}
