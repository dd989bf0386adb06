// Package bench measures lbb beside baselines run in the same invocation (a bare process,
// bubblewrap), and prints medians, tails and ratios.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Sample is the durations measured for one metric.
type Sample struct {
	Name string
	Durs []time.Duration
	// Errors counts attempts that failed; they are not in Durs.
	Errors int
}

// Quantile returns the q-quantile (0..1) by the nearest-rank method.
func (s Sample) Quantile(q float64) time.Duration {
	if len(s.Durs) == 0 {
		return 0
	}
	d := append([]time.Duration(nil), s.Durs...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(math.Ceil(q*float64(len(d)))) - 1
	if i < 0 {
		i = 0
	}
	return d[i]
}

// Median is the 0.5 quantile.
func (s Sample) Median() time.Duration { return s.Quantile(0.5) }

// Row is one printed line: a metric measured by lbb beside its baselines.
type Row struct {
	Metric    string
	LBB       Sample
	Baselines []Sample
	// Extra is free text printed after the row (counts, rates).
	Extra string
	// Values are figures that are not durations (memory, sizes), by name with their unit
	// (e.g. "pss_mib_per_sandbox"); printed after the row and kept in the JSON.
	Values map[string]float64
}

// Report is everything one invocation measured.
type Report struct {
	Started time.Time
	Load    string
	Rows    []Row
	Notes   []string
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Print writes the report as a table for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "lbb bench — %s — load: %s\n\n", r.Started.UTC().Format(time.RFC3339), r.Load)
	fmt.Fprintf(w, "%-44s %6s %9s %9s %9s  %s\n", "metric", "n", "p50 ms", "p90 ms", "p99 ms", "vs baseline (p50 ratio)")
	fmt.Fprintln(w, strings.Repeat("-", 110))
	for _, row := range r.Rows {
		var ratios []string
		for _, b := range row.Baselines {
			if b.Median() > 0 {
				ratios = append(ratios, fmt.Sprintf("%s %.2fx", b.Name, float64(row.LBB.Median())/float64(b.Median())))
			}
		}
		line := func(name string, s Sample, extra string) {
			errs := ""
			if s.Errors > 0 {
				errs = fmt.Sprintf(" errors=%d", s.Errors)
			}
			fmt.Fprintf(w, "%-44s %6d %9.2f %9.2f %9.2f  %s%s\n", name, len(s.Durs), ms(s.Median()), ms(s.Quantile(0.9)), ms(s.Quantile(0.99)), extra, errs)
		}
		line(row.Metric, row.LBB, strings.Join(ratios, ", "))
		for _, b := range row.Baselines {
			line("  baseline: "+b.Name, b, "")
		}
		if row.Extra != "" {
			fmt.Fprintf(w, "  %s\n", row.Extra)
		}
		if len(row.Values) > 0 {
			names := make([]string, 0, len(row.Values))
			for k := range row.Values {
				names = append(names, k)
			}
			sort.Strings(names)
			var kv []string
			for _, k := range names {
				kv = append(kv, fmt.Sprintf("%s=%.2f", k, row.Values[k]))
			}
			fmt.Fprintf(w, "  %s\n", strings.Join(kv, " "))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// JSON writes the figures for tracking over time.
func (r *Report) JSON(w io.Writer) error {
	type fig struct {
		Name   string  `json:"name"`
		N      int     `json:"n"`
		Errors int     `json:"errors"`
		P50    float64 `json:"p50_ms"`
		P90    float64 `json:"p90_ms"`
		P99    float64 `json:"p99_ms"`
	}
	conv := func(s Sample) fig {
		return fig{s.Name, len(s.Durs), s.Errors, ms(s.Median()), ms(s.Quantile(0.9)), ms(s.Quantile(0.99))}
	}
	type row struct {
		Metric    string             `json:"metric"`
		LBB       fig                `json:"lbb"`
		Baselines []fig              `json:"baselines"`
		Ratios    map[string]float64 `json:"ratios"`
		Extra     string             `json:"extra,omitempty"`
		Values    map[string]float64 `json:"values,omitempty"`
	}
	out := struct {
		Started time.Time `json:"started"`
		Load    string    `json:"load"`
		Rows    []row     `json:"rows"`
		Notes   []string  `json:"notes,omitempty"`
	}{Started: r.Started, Load: r.Load, Notes: r.Notes}
	for _, rw := range r.Rows {
		o := row{Metric: rw.Metric, LBB: conv(rw.LBB), Ratios: map[string]float64{}, Extra: rw.Extra, Values: rw.Values}
		for _, b := range rw.Baselines {
			o.Baselines = append(o.Baselines, conv(b))
			if b.Median() > 0 {
				o.Ratios[b.Name] = float64(rw.LBB.Median()) / float64(b.Median())
			}
		}
		out.Rows = append(out.Rows, o)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// Time runs f n times and records each duration; a failing run counts as an error.
func Time(name string, n int, f func() error) Sample {
	s := Sample{Name: name}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			s.Errors++
			continue
		}
		s.Durs = append(s.Durs, time.Since(t0))
	}
	return s
}

// Baselines measures each baseline once per invocation and hands the same Sample to every
// row that compares with it, so that the ns and gvisor figures have the same denominators.
// The zero value is ready; a nil *Baselines measures every time.
type Baselines struct {
	mu sync.Mutex
	m  map[string]Sample
}

// Time is Time(name, n, f), measured on the first call for name and n only.
func (b *Baselines) Time(name string, n int, f func() error) Sample {
	if b == nil {
		return Time(name, n, f)
	}
	key := fmt.Sprintf("%s\x00%d", name, n)
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.m[key]; ok {
		return s
	}
	s := Time(name, n, f)
	if b.m == nil {
		b.m = map[string]Sample{}
	}
	b.m[key] = s
	return s
}
