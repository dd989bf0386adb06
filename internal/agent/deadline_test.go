package agent

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestDeadlineHeld: time while held does not count; a release gives back what was left.
func TestDeadlineHeld(t *testing.T) {
	var set Deadlines
	var fired atomic.Int64
	start := time.Now()
	dl := set.Start(150*time.Millisecond, func() { fired.Store(int64(time.Since(start))) })
	time.Sleep(50 * time.Millisecond)
	set.Hold(true)
	late := set.Start(10*time.Millisecond, func() { t.Error("a deadline started while held fired") })
	time.Sleep(200 * time.Millisecond)
	if fired.Load() != 0 {
		t.Fatal("fired while held")
	}
	set.Stop(late)
	set.Hold(false)
	time.Sleep(300 * time.Millisecond)
	got := time.Duration(fired.Load())
	if got < 340*time.Millisecond || got > 500*time.Millisecond {
		t.Fatalf("fired after %v, want about 150ms + 200ms held", got)
	}
	set.Stop(dl)
}
