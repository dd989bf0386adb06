package guest

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// A pump scheduled after its drain deadline must still get what the process wrote.
func TestReadDrainAfterDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Write([]byte(`{"ok":true}`))
	r.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := r.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Skipf("the poller read despite the deadline (%v): nothing to test", err)
	}
	r.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 64)
	n, err := readDrain(r, buf)
	if err != nil || string(buf[:n]) != `{"ok":true}` {
		t.Fatalf("readDrain = %q, %v", buf[:n], err)
	}
	r.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := readDrain(r, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("empty pipe: %v, want the deadline", err)
	}
	w.Close()
	r.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := readDrain(r, buf); err != io.EOF {
		t.Fatalf("closed pipe: %v, want EOF", err)
	}
}
