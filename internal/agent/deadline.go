package agent

import (
	"sync"
	"time"
)

// Deadline is a timer that can be held: time while it is held does not count toward it. A
// command's timeout is one, on both ends of the channel (the agent's, and the host's
// backstop), so that a sandbox paused with commands running gives them, once resumed, the
// time they had left.
type Deadline struct {
	mu      sync.Mutex
	fire    func()
	left    time.Duration // while held
	at      time.Time     // while running
	t       *time.Timer
	held    bool
	stopped bool
}

// NewDeadline calls fire after d of time not held; held, when set, starts it held.
func NewDeadline(d time.Duration, held bool, fire func()) *Deadline {
	dl := &Deadline{fire: fire, left: d, held: true}
	if !held {
		dl.Release()
	}
	return dl
}

// Hold stops the clock; Release starts it again with what was left.
func (d *Deadline) Hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held || d.stopped {
		return
	}
	d.held = true
	if !d.t.Stop() {
		d.stopped = true // it fired
		return
	}
	d.left = max(time.Until(d.at), 0)
}

// Release starts a held clock again with what was left.
func (d *Deadline) Release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.held || d.stopped {
		return
	}
	d.held = false
	d.at = time.Now().Add(d.left)
	d.t = time.AfterFunc(d.left, d.fire)
}

// Stop ends the deadline without firing it (when it has not fired yet).
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.t != nil {
		d.t.Stop()
	}
}

// Deadlines is a set of deadlines held and released together: a sandbox's commands.
type Deadlines struct {
	mu   sync.Mutex
	set  map[*Deadline]struct{}
	held bool
}

// Start adds a deadline of d to the set (held when the set is); remove it with Stop.
func (s *Deadlines) Start(d time.Duration, fire func()) *Deadline {
	s.mu.Lock()
	defer s.mu.Unlock()
	dl := NewDeadline(d, s.held, fire)
	if s.set == nil {
		s.set = map[*Deadline]struct{}{}
	}
	s.set[dl] = struct{}{}
	return dl
}

// Stop stops dl and takes it out of the set.
func (s *Deadlines) Stop(dl *Deadline) {
	dl.Stop()
	s.mu.Lock()
	delete(s.set, dl)
	s.mu.Unlock()
}

// Hold holds (hold) or releases every deadline of the set, and those started meanwhile.
func (s *Deadlines) Hold(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = hold
	for dl := range s.set {
		if hold {
			dl.Hold()
		} else {
			dl.Release()
		}
	}
}
