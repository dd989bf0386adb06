package guest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

func stdoutFrame(s string) []byte {
	f := make([]byte, agent.FrameHeaderLen+len(s))
	agent.PutFrameHeader(f, agent.FrameStdout, len(s))
	copy(f[agent.FrameHeaderLen:], s)
	return f
}

// payloads joins the stdout payloads of the frames in b.
func payloads(t *testing.T, b []byte) string {
	t.Helper()
	var out []byte
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		kind, p, err := agent.ReadFrame(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if kind == agent.FrameStdout {
			out = append(out, p...)
		}
	}
	return string(out)
}

// TestAttachReplays: an attach sends again what the host lacks from its offset on, and skips
// what it has beyond what the stream counted as sent (the write that failed reached it).
func TestAttachReplays(t *testing.T) {
	first := httptest.NewRecorder()
	fw := &frameWriter{w: first, rc: http.NewResponseController(first)}
	fw.cond = sync.NewCond(&fw.mu)
	for _, s := range []string{"abc", "def"} {
		if err := fw.write(stdoutFrame(s)); err != nil {
			t.Fatal(err)
		}
	}
	fw.mu.Lock()
	fw.err = errDetached // the channel ended
	fw.mu.Unlock()

	// The host read 2 bytes: "cdef" again.
	second := httptest.NewRecorder()
	if _, err := fw.attach(second, http.NewResponseController(second), nil, [2]int64{2, 0}, false); err != nil {
		t.Fatal(err)
	}
	if err := fw.write(stdoutFrame("ghi")); err != nil {
		t.Fatal(err)
	}
	if got := payloads(t, second.Body.Bytes()); got != "cdefghi" {
		t.Fatalf("after an attach at 2: %q, want %q", got, "cdefghi")
	}

	// The host has 11 bytes, 2 more than were counted as sent: of "jkl" only "l" goes.
	fw.mu.Lock()
	fw.err = errDetached
	fw.mu.Unlock()
	third := httptest.NewRecorder()
	if _, err := fw.attach(third, http.NewResponseController(third), nil, [2]int64{11, 0}, false); err != nil {
		t.Fatal(err)
	}
	if err := fw.write(stdoutFrame("jkl")); err != nil {
		t.Fatal(err)
	}
	if got := payloads(t, third.Body.Bytes()); got != "l" {
		t.Fatalf("after an attach past what was sent: %q, want %q", got, "l")
	}
	if fw.sent[0] != 12 {
		t.Fatalf("sent %d, want 12", fw.sent[0])
	}
}

// TestDetachedWriteWaits: a detachable stream's write waits for an attach instead of failing.
func TestDetachedWriteWaits(t *testing.T) {
	first := httptest.NewRecorder()
	fw := &frameWriter{w: first, rc: http.NewResponseController(first), err: errDetached}
	fw.cond = sync.NewCond(&fw.mu)
	done := make(chan error, 1)
	go func() { done <- fw.write(stdoutFrame("x")) }()
	select {
	case err := <-done:
		t.Fatalf("a write with no channel answered %v, want it to wait", err)
	case <-time.After(100 * time.Millisecond):
	}
	second := httptest.NewRecorder()
	if _, err := fw.attach(second, http.NewResponseController(second), nil, [2]int64{}, false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := payloads(t, second.Body.Bytes()); got != "x" {
		t.Fatalf("%q, want x", got)
	}
}
