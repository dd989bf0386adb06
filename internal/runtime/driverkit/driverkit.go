// Package driverkit holds what every runtime driver needs the same way: sandbox id checks,
// per-sandbox locks for the lifecycle calls, and the agent's log lines.
package driverkit

import (
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

var (
	validID       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	validHostname = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$`)
)

// ValidID reports whether id can name a sandbox's state directory and cgroups.
func ValidID(id string) bool { return validID.MatchString(id) }

// CheckID refuses an id that could not name a sandbox (a path, an empty string…).
func CheckID(id string) error {
	if !validID.MatchString(id) {
		return errdefs.InvalidArgument("sandbox id %q: want 1-64 letters, digits, _ or -", id)
	}
	return nil
}

// ValidHostname reports whether name can be a sandbox's hostname.
func ValidHostname(name string) bool { return validHostname.MatchString(name) }

// NotFound is the error for a sandbox id a driver holds nothing for.
func NotFound(id string) error {
	return errdefs.Wrap(errdefs.ClassNotFound, "", fmt.Errorf("%w: %s", runtime.ErrNotFound, id))
}

// Locks serializes the lifecycle calls of one sandbox; different sandboxes run in parallel.
// The zero value is ready.
type Locks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// Lock takes id's lock and returns what releases it.
func (ls *Locks) Lock(id string) (unlock func()) {
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[string]*idLock{}
	}
	l := ls.m[id]
	if l == nil {
		l = &idLock{}
		ls.m[id] = l
	}
	l.refs++
	ls.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		ls.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(ls.m, id)
		}
		ls.mu.Unlock()
	}
}

// LogAgent copies the agent's stdout and stderr to the logger, a line at a time, up to a
// budget: a sandbox could otherwise flood the host's log.
func LogAgent(log *slog.Logger, r io.ReadCloser) {
	defer r.Close()
	const budget = 1 << 20
	buf := make([]byte, 4096)
	var line []byte
	total := 0
	for {
		n, err := r.Read(buf)
		for _, c := range buf[:n] {
			if total > budget {
				break
			}
			if c == '\n' || len(line) >= 2048 {
				log.Info("agent", "line", string(line))
				total += len(line)
				line = line[:0]
				if total > budget {
					log.Warn("agent log budget exhausted; dropping the rest")
				}
				if c == '\n' {
					continue
				}
			}
			line = append(line, c)
		}
		if err != nil {
			if len(line) > 0 && total <= budget {
				log.Info("agent", "line", string(line))
			}
			return
		}
	}
}
