// Package output keeps what a command printed, in bounded memory: the first and last bytes of
// a stream and how many there were in all, and lets readers follow the stream live from any
// point that is still kept (Capture, for the record and for SSE readers who join late); and
// holds every byte of it for the caller who started the command until that caller has read
// it, making the process wait rather than dropping anything (Hold).
package output

import (
	"context"
	"io"
	"sync"
	"unicode/utf8"
)

// DefaultKeep is how many bytes Capture keeps at each end by default.
const DefaultKeep = 64 << 10

// Capture is an io.Writer that keeps the first headMax bytes written (the head), the last
// tailMax bytes written (the tail), and the total count. Head and tail never repeat a byte:
// the tail is the last bytes of the stream, and the head the first bytes that are not in the
// tail, so a stream that fits the tail is all in the tail and the head is empty (a caller
// reading `stdout.tail` of a one-line print gets that line, as seed 000's Level 3 sample
// does), and head + tail is the whole stream whenever Dropped is 0. It is safe for concurrent
// use; its memory is bounded whatever is written.
type Capture struct {
	mu      sync.Mutex
	headMax int
	tailMax int
	head    []byte
	ring    []byte // the tail: a ring of tailMax bytes once full
	start   int    // index of the oldest tail byte in ring, once full
	total   int64
	closed  bool
	changed chan struct{} // closed and replaced on every write and on Close
}

// NewCapture keeps headMax and tailMax bytes (0 means DefaultKeep).
func NewCapture(headMax, tailMax int) *Capture {
	if headMax <= 0 {
		headMax = DefaultKeep
	}
	if tailMax <= 0 {
		tailMax = DefaultKeep
	}
	return &Capture{headMax: headMax, tailMax: tailMax, changed: make(chan struct{})}
}

// Write keeps p's bytes; it never fails, also after Close (the bytes are counted).
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(n)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		if c.head == nil {
			c.head = make([]byte, 0, min(c.headMax, max(k, 4096)))
		}
		c.head = append(c.head, p[:k]...)
	}
	c.appendTail(p)
	close(c.changed)
	c.changed = make(chan struct{})
	return n, nil
}

func (c *Capture) appendTail(p []byte) {
	if len(p) >= c.tailMax {
		if cap(c.ring) < c.tailMax {
			c.ring = make([]byte, c.tailMax)
		}
		c.ring = c.ring[:c.tailMax]
		copy(c.ring, p[len(p)-c.tailMax:])
		c.start = 0
		return
	}
	if len(c.ring) < c.tailMax {
		// Not full yet: grow (amortised) up to tailMax.
		if free := c.tailMax - len(c.ring); len(p) <= free {
			c.ring = append(c.ring, p...)
			return
		}
		k := c.tailMax - len(c.ring)
		c.ring = append(c.ring, p[:k]...)
		p = p[k:]
		c.start = 0
	}
	// Full: overwrite the oldest bytes.
	for len(p) > 0 {
		k := copy(c.ring[c.start:], p)
		p = p[k:]
		c.start = (c.start + k) % c.tailMax
	}
}

// tailBytes returns a copy of the tail, oldest first.
func (c *Capture) tailBytes() []byte { return c.tailCopy(0, len(c.ring)) }

// tailCopy copies n bytes of the tail from its j-th byte on.
func (c *Capture) tailCopy(j, n int) []byte {
	out := make([]byte, n)
	if len(c.ring) < c.tailMax {
		copy(out, c.ring[j:j+n])
		return out
	}
	i := (c.start + j) % c.tailMax
	k := copy(out, c.ring[i:])
	copy(out[k:], c.ring[:n-k])
	return out
}

// kept is what the capture keeps of the stream, head and tail without a byte in both. Where
// bytes were dropped between them, a UTF-8 sequence cut at the head's end or the tail's start
// is dropped too; where they meet, a sequence the seam cuts moves whole into the tail.
// c.mu is held.
func (c *Capture) kept() (head, tail []byte) {
	tail = c.tailBytes()
	tailStart := c.total - int64(len(tail))
	head = c.head[:min(int64(len(c.head)), tailStart)]
	if int64(len(head)) == tailStart {
		if k := len(head) - len(trimEnd(head)); k > 0 {
			tail = append(append([]byte(nil), head[len(head)-k:]...), tail...)
			head = head[:len(head)-k]
		}
		return head, tail
	}
	return trimEnd(head), trimStart(tail)
}

// Head is the first bytes written that are not in the tail (empty when the whole stream fits
// the tail).
func (c *Capture) Head() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, _ := c.kept()
	return string(h)
}

// Tail is the last bytes written.
func (c *Capture) Tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, t := c.kept()
	return string(t)
}

// Bytes is how many bytes were written in all.
func (c *Capture) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Dropped is how many bytes of the stream are in neither head nor tail.
func (c *Capture) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, t := c.kept()
	return c.total - int64(len(h)+len(t))
}

// Recent is the offset n bytes before the end, or where the tail starts when it keeps less.
func (c *Capture) Recent(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	tailStart := c.total - int64(len(c.ring))
	if int64(len(c.head)) == c.total {
		tailStart = 0
	}
	return max(tailStart, c.total-n, 0)
}

// Close marks the end of the stream: followers get io.EOF once they have read everything.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.changed)
		c.changed = make(chan struct{})
	}
	return nil
}

// Next is a live follower's cursor: it returns kept bytes from offset off on (at most max,
// 0 meaning any), waiting while there are none yet. start is the offset of data: when it is
// more than off, the bytes between were dropped (they were between head and tail). The next
// call passes start+len(data). At the end of a closed stream it returns io.EOF; when ctx
// ends, ctx's error.
//
//	for off := int64(0); ; {
//		start, data, err := c.Next(ctx, off, 0)
//		if err != nil { break }
//		if start > off { /* say that start-off bytes were skipped */ }
//		send(data)
//		off = start + int64(len(data))
//	}
func (c *Capture) Next(ctx context.Context, off int64, max int) (start int64, data []byte, err error) {
	for {
		c.mu.Lock()
		if off < c.total {
			start, data = c.readAt(off, max)
			c.mu.Unlock()
			return start, data, nil
		}
		if c.closed {
			c.mu.Unlock()
			return c.total, nil, io.EOF
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return off, nil, ctx.Err()
		}
	}
}

// readAt copies kept bytes from off (< total), skipping to the tail's start if off is in
// the dropped middle. c.mu is held.
func (c *Capture) readAt(off int64, max int) (int64, []byte) {
	if off < 0 {
		off = 0
	}
	if off < int64(len(c.head)) {
		b := c.head[off:]
		if max > 0 && len(b) > max {
			b = b[:max]
		}
		return off, append([]byte(nil), b...)
	}
	tailStart := c.total - int64(len(c.ring))
	if off < tailStart {
		off = tailStart
	}
	j := int(off - tailStart)
	n := len(c.ring) - j
	if max > 0 && n > max {
		n = max
	}
	return off, c.tailCopy(j, n)
}

// trimEnd drops an incomplete UTF-8 sequence at the end of b.
func trimEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing is cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// trimStart drops UTF-8 continuation bytes at the start of b (at most 3).
func trimStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b // not UTF-8 anyway: keep it as it is
}
