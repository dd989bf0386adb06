// Package timing measures the phases of one request for its Server-Timing header: how long
// authentication, the durable reservation, the claim of a sandbox, the run and the record
// of its end took. Phases may overlap (a warm claim runs while the reservation commits).
//
//	ctx, t := timing.New(ctx)
//	end := timing.Start(ctx, "reserve")
//	… // the phase
//	end()
//	w.Header().Set("Server-Timing", t.Header())
package timing

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Timings are the phases measured so far for one request. Safe for concurrent use.
type Timings struct {
	mu     sync.Mutex
	phases []phase
}

type phase struct {
	name string
	dur  time.Duration
}

type key struct{}

// New attaches fresh Timings to ctx.
func New(ctx context.Context) (context.Context, *Timings) {
	t := &Timings{}
	return context.WithValue(ctx, key{}, t), t
}

// From answers the Timings of ctx, or nil.
func From(ctx context.Context) *Timings {
	t, _ := ctx.Value(key{}).(*Timings)
	return t
}

// With attaches t to ctx (to carry a request's timings into work it hands over).
func With(ctx context.Context, t *Timings) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, key{}, t)
}

// Start begins phase name of ctx's request; calling the answer ends it. Without Timings in
// ctx it measures nothing.
func Start(ctx context.Context, name string) func() {
	t := From(ctx)
	if t == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() { t.Add(name, time.Since(t0)) }
}

// Add records a phase that took d.
func (t *Timings) Add(name string, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.phases = append(t.phases, phase{name, d})
	t.mu.Unlock()
}

// Header renders the phases as a Server-Timing value: "reserve;dur=1.62, claim;dur=0.91".
func (t *Timings) Header() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for i, p := range t.phases {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.name)
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(float64(p.dur.Microseconds())/1000, 'f', 2, 64))
	}
	return b.String()
}
