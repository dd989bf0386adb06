package testkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"regexp"
	"sync"
	"testing"
)

// Content answers the whole of what a call that opens a reader gives:
// testkit.Content(t)(c.Files.Read(ctx, id, path)). An error of the call or of the read
// fails t.
func Content(t testing.TB) func(io.ReadCloser, error) string {
	return func(rc io.ReadCloser, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
			return ""
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// Digest reads to its end what a call that opens a reader gives, and answers its sha256
// (hex), its size and the error of the read: sum, n, err := testkit.Digest(t)(c.Read(…)).
// An error of the call fails t.
func Digest(t testing.TB) func(io.ReadCloser, error) (string, int64, error) {
	return func(rc io.ReadCloser, err error) (string, int64, error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
			return "", 0, err
		}
		defer rc.Close()
		h := sha256.New()
		n, err := io.Copy(h, rc)
		return hex.EncodeToString(h.Sum(nil)), n, err
	}
}

// Buffer is a bytes.Buffer that one goroutine may read while another writes to it: the
// output of a process still running.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// LineWatch is a writer that watches the lines written to it for the first that matches a
// pattern: a server's "serving on" line in its log.
type LineWatch struct {
	re    *regexp.Regexp
	found chan string
	mu    sync.Mutex
	line  []byte
	seen  bool
}

// WatchLines answers a LineWatch for re.
func WatchLines(re *regexp.Regexp) *LineWatch {
	return &LineWatch{re: re, found: make(chan string, 1)}
}

// Found receives the first group of re in the first line that matches (the whole match
// when re has no group).
func (w *LineWatch) Found() <-chan string { return w.found }

func (w *LineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if m := w.re.FindSubmatch(w.line[:i]); m != nil {
			w.seen, w.line = true, nil
			w.found <- string(m[min(1, len(m)-1)])
			return len(p), nil
		}
		w.line = w.line[i+1:]
	}
}
