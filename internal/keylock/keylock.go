// Package keylock serializes work by key: calls with one key take turns, calls with different
// keys run in parallel, and a key nobody holds or waits for costs nothing.
package keylock

import "sync"

// Locks is a lock per key. The zero value is ready.
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
