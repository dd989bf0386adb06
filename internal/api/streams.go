package api

import (
	"sync"

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
