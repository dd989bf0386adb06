package output

import (
	"context"
	"io"
	"sync"
	"time"
)

// Stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Piece is a run of bytes of one stream, Offset being where they start in it.
type Piece struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
}

// Held is what one Hold.Read answers: pieces in the order they were written; when there are
// none left, Ended (the output is over and was all held) or Released (from some point on the
// output was not held: the rest is what the Capture kept).
type Held struct {
	Pieces   []Piece `json:"pieces,omitempty"`
	Ended    bool    `json:"ended,omitempty"`
	Released bool    `json:"released,omitempty"`
}

// Hold keeps the unread output of one command for the one reader that started it: every
// byte of stdout and stderr from the first, interleaved as they were written, until the
// reader has taken them. It holds at most max bytes: past that a write waits until the reader
// takes some, which stops whoever feeds it (the host agent's reading of the guest's frames,
// and through HTTP/2 flow control the process itself, in write(2)). The process is slowed;
// no byte is dropped.
//
// A hold nobody reads is let go so that the process is not blocked forever: Release (its
// reader went away), or a write that waited idle with no Read meanwhile. From then on writes
// pass without waiting and are not held; a reader gets what is held, then Released.
type Hold struct {
	mu       sync.Mutex
	max      int
	idle     time.Duration
	queue    []Piece
	size     int
	written  map[string]int64
	closed   bool
	released bool
	// idled says the hold was let go because a write waited idle.
	idled    bool
	lastRead time.Time
	changed  chan struct{} // closed and replaced on every change
}

// NewHold holds up to max bytes, and lets go once a write has waited idle with no Read.
func NewHold(max int, idle time.Duration) *Hold {
	return &Hold{max: max, idle: idle, written: map[string]int64{}, changed: make(chan struct{})}
}

// signal wakes the writer and readers waiting for a change. h.mu is held.
func (h *Hold) signal() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// Writer is the io.Writer of one stream ("stdout" or "stderr") into the hold.
func (h *Hold) Writer(stream string) io.Writer { return holdWriter{h, stream} }

type holdWriter struct {
	h      *Hold
	stream string
}

func (w holdWriter) Write(p []byte) (int, error) {
	w.h.write(w.stream, p)
	return len(p), nil
}

func (h *Hold) write(stream string, p []byte) {
	if len(p) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	off := h.written[stream]
	h.written[stream] += int64(len(p))
	if h.released || h.closed {
		return
	}
	h.queue = append(h.queue, Piece{Stream: stream, Offset: off, Data: append([]byte(nil), p...)})
	h.size += len(p)
	h.signal()
	since := time.Now()
	for h.size > h.max && !h.released {
		wait := time.Until(later(h.lastRead, since).Add(h.idle))
		if wait <= 0 {
			h.released, h.idled = true, true
			h.signal()
			return
		}
		changed := h.changed
		h.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		h.mu.Lock()
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Read takes the held output from the offsets from[stream] on (0 for a stream not named): the
// hold lets go of the bytes before them, which the reader has taken, and answers the pieces
// after them, at most max bytes (0: any), waiting while there are none. Reading again from the
// same offsets answers the same pieces, so an answer lost on the way can be asked for again.
// When ctx ends first it answers no pieces and ctx's error.
func (h *Hold) Read(ctx context.Context, from map[string]int64, max int) (Held, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastRead = time.Now()
	if h.take(from) {
		h.signal()
	}
	for {
		switch {
		case len(h.queue) > 0:
			h.lastRead = time.Now()
			return Held{Pieces: h.front(max)}, nil
		case h.released:
			return Held{Released: true}, nil
		case h.closed:
			return Held{Ended: true}, nil
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		h.mu.Lock()
		if ctx.Err() != nil {
			h.lastRead = time.Now()
			return Held{}, ctx.Err()
		}
	}
}

// take drops what the reader has taken: the front pieces up to its offsets. It reports
// whether it dropped anything. h.mu is held.
func (h *Hold) take(from map[string]int64) bool {
	took := false
	for len(h.queue) > 0 {
		p := &h.queue[0]
		at := from[p.Stream]
		end := p.Offset + int64(len(p.Data))
		if at >= end {
			h.size -= len(p.Data)
			h.queue[0] = Piece{}
			h.queue = h.queue[1:]
			took = true
			continue
		}
		if at > p.Offset {
			k := at - p.Offset
			p.Data, p.Offset = p.Data[k:], at
			h.size -= int(k)
			took = true
		}
		break
	}
	return took
}

// front answers the first pieces, at most max bytes (0: any); the first is cut when it alone
// is more. The pieces' bytes are never written again, so they are answered without a copy.
// h.mu is held.
func (h *Hold) front(max int) []Piece {
	var out []Piece
	n := 0
	for _, p := range h.queue {
		if max > 0 && n+len(p.Data) > max {
			if len(out) == 0 {
				p.Data = p.Data[:max]
				out = append(out, p)
			}
			break
		}
		out = append(out, p)
		n += len(p.Data)
	}
	return out
}

// Release lets go of the hold: what it holds is dropped, and writes no longer wait nor are
// held. A reader that comes back gets Released, and the rest from the Capture.
func (h *Hold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released {
		h.released = true
		h.queue, h.size = nil, 0
		h.signal()
	}
}

// LetGo lets go of the hold as an idle wait does, keeping what it holds: writes no longer
// wait nor are held, and a reader gets what is held, then Released (the rest from the
// Capture). The host agent lets go of a command's hold when its sandbox stops or the command
// passes its backstop, so that a command whose reader stalled ends then, not after the idle
// time, and the reader still gets every byte that was held.
func (h *Hold) LetGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released && !h.closed {
		h.released = true
		h.signal()
	}
}

// Close marks the end of the output: once a reader has taken everything it gets Ended.
func (h *Hold) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.signal()
	}
}

// Idled reports whether the hold was let go because a write waited idle with no Read.
func (h *Hold) Idled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.idled
}
