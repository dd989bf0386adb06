package bench

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var s Sample
	for i := 1; i <= 100; i++ {
		s.Durs = append(s.Durs, time.Duration(101-i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.9, 90 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {0, time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := s.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if (Sample{}).Median() != 0 {
		t.Error("empty sample has a median")
	}
}
