package api

import (
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// CodeTooManyStreams: the key holds as many open streams and long-polls as the server allows.
const CodeTooManyStreams = "too_many_streams"

// streamLimiter bounds the output streams and long-polls each API key holds open at once,
// so that one key cannot hold every connection and goroutine of the server.
type streamLimiter struct {
	mu   sync.Mutex
	open map[string]int
	max  int
}

// acquire counts one more open stream of key; release ends it.
func (l *streamLimiter) acquire(key string) (release func(), _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return nil, errdefs.New(errdefs.ClassLimitExceeded, CodeTooManyStreams,
			"API key %s holds %d open streams and long-polls, the most this server allows (--max-streams-per-key); close one first", key, l.max)
	}
	if l.open == nil {
		l.open = map[string]int{}
	}
	l.open[key]++
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[key]--; l.open[key] <= 0 {
			delete(l.open, key)
		}
	}), nil
}

// heldGrace is how long a command's held output waits for a reader after its last one went
// away, before the hold is let go: a client whose connection broke resumes the same stream
// (its Idempotency-Key, Last-Event-ID) within it and reads on where it was.
const heldGrace = 10 * time.Second

// heldReaders counts the streams reading each command's held output, so that the hold is let
// go only once none reads it (release) for heldGrace.
type heldReaders struct {
	mu      sync.Mutex
	readers map[string]int
	release func(commandID string)
	grace   time.Duration
}

// attach counts one more reader of commandID's held output; detach ends it.
func (h *heldReaders) attach(commandID string) (detach func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.readers == nil {
		h.readers = map[string]int{}
	}
	h.readers[commandID]++
	return sync.OnceFunc(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.readers[commandID]--; h.readers[commandID] > 0 {
			return
		}
		delete(h.readers, commandID)
		time.AfterFunc(h.grace, func() {
			h.mu.Lock()
			back := h.readers[commandID] > 0
			h.mu.Unlock()
			if !back {
				h.release(commandID)
			}
		})
	})
}
