package bench

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Phases is an http.RoundTripper that keeps the Server-Timing phases of the answers to the
// calls it names (POST /v1/sandboxes: "create"; POST /v1/sandboxes/{id}/commands: "exec"),
// and the time each call took to its answer ("total"), to say where a shape's time goes.
type Phases struct {
	next  http.RoundTripper
	mu    sync.Mutex
	calls map[string]map[string][]float64 // call → phase → ms
}

// NewPhases wraps next (http.DefaultTransport when nil).
func NewPhases(next http.RoundTripper) *Phases {
	if next == nil {
		next = http.DefaultTransport
	}
	return &Phases{next: next, calls: map[string]map[string][]float64{}}
}

func (p *Phases) RoundTrip(r *http.Request) (*http.Response, error) {
	t0 := time.Now()
	resp, err := p.next.RoundTrip(r)
	name := callName(r)
	if err != nil || name == "" || resp.StatusCode >= 300 {
		return resp, err
	}
	d := float64(time.Since(t0).Microseconds()) / 1000
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.calls[name]
	if m == nil {
		m = map[string][]float64{}
		p.calls[name] = m
	}
	m["total"] = append(m["total"], d)
	for phase, ms := range ParseServerTiming(resp.Header.Get("Server-Timing")) {
		m[phase] = append(m[phase], ms)
	}
	return resp, nil
}

func callName(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	switch p := r.URL.Path; {
	case p == "/v1/sandboxes":
		return "create"
	case strings.HasPrefix(p, "/v1/sandboxes/") && strings.HasSuffix(p, "/commands"):
		return "exec"
	}
	return ""
}

// ParseServerTiming reads a Server-Timing value ("auth;dur=0.82, claim;dur=1.32") into
// milliseconds by phase; a phase named twice adds up.
func ParseServerTiming(h string) map[string]float64 {
	out := map[string]float64{}
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		for _, kv := range strings.Split(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "dur="); ok && name != "" {
				if ms, err := strconv.ParseFloat(v, 64); err == nil {
					out[name] += ms
				}
			}
		}
	}
	return out
}

// Summary is each call's median phases in milliseconds, the total first:
// "create 4.9 (auth 0.3, claim 0.3, admit 1.6); exec 19.7 (…)".
func (p *Phases) Summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var calls []string
	for _, name := range []string{"create", "exec"} {
		m := p.calls[name]
		if len(m["total"]) == 0 {
			continue
		}
		var phases []string
		for phase := range m {
			if phase != "total" {
				phases = append(phases, phase)
			}
		}
		sort.Strings(phases)
		var parts []string
		for _, phase := range phases {
			parts = append(parts, fmt.Sprintf("%s %.2f", phase, median(m[phase])))
		}
		calls = append(calls, fmt.Sprintf("%s %.2f (%s)", name, median(m["total"]), strings.Join(parts, ", ")))
	}
	return strings.Join(calls, "; ")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
