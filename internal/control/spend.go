package control

import (
	"context"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Spend caps (seed 002): a key may carry a cap on what its runs use in a period (a UTC day,
// a UTC month, or in all): CPU time, memory over time, or cost at the server's prices
// (--price-vcpu-ms, --price-gib-ms). Its runs, the runs of the grants it mints and of the
// in-sandbox API grants of its sandboxes count toward it; a grant, an in-sandbox grant or a
// key it mints can only narrow it (each key up the chain is checked). At the cap a call that
// would start a run or a sandbox answers 402 spend_cap_reached, and nothing starts; a run
// already running is not stopped by a cap (budgets do that).

func checkSpendCap(c *store.SpendCap) error {
	if c == nil {
		return nil
	}
	if c.VCPUMs < 0 || c.GiBMs < 0 || c.Cost < 0 {
		return errdefs.InvalidArgument("spend_cap: vcpu_ms, gib_ms and cost must not be negative")
	}
	switch c.Period {
	case "":
		c.Period = store.PeriodMonth
	case store.PeriodDay, store.PeriodMonth, store.PeriodTotal:
	default:
		return errdefs.InvalidArgument("spend_cap.period %q: want day, month or total", c.Period)
	}
	return nil
}

// capWithin reports whether cap a is within b: the same period, and each of b's limits set
// and not above b's.
func capWithin(a, b store.SpendCap) bool {
	le := func(x, y float64) bool { return y == 0 || x > 0 && x <= y }
	return a.Period == b.Period && le(a.VCPUMs, b.VCPUMs) && le(a.GiBMs, b.GiBMs) && le(a.Cost, b.Cost)
}

// periodStart is when the period of now began.
func periodStart(period string, now time.Time) time.Time {
	now = now.UTC()
	switch period {
	case store.PeriodDay:
		return time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	case store.PeriodMonth:
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// checkSpend refuses a call of key k when k, or a key it came from, has reached its cap.
func (s *Service) checkSpend(ctx context.Context, k store.Key) error {
	for depth := 0; depth < 8; depth++ {
		if c := k.SpendCap; c != nil {
			u, err := s.st.KeyUsage(ctx, k.ID, periodStart(c.Period, s.now()))
			if err != nil {
				return err
			}
			cost := s.cfg.Prices.Cost(u.VCPUMs, u.GiBMs)
			if c.VCPUMs > 0 && u.VCPUMs >= c.VCPUMs || c.GiBMs > 0 && u.GiBMs >= c.GiBMs || c.Cost > 0 && s.cfg.Prices.Set() && cost >= c.Cost {
				return errdefs.New(errdefs.ClassPaymentRequired, errdefs.CodeSpendCapReached,
					"API key %s reached its spend cap for this %s (vcpu_ms %.0f of %.0f, gib_ms %.0f of %.0f, cost %g of %g; 0 is no cap); nothing started",
					k.ID, c.Period, u.VCPUMs, c.VCPUMs, u.GiBMs, c.GiBMs, cost, c.Cost)
			}
		}
		if k.Parent == "" {
			return nil
		}
		p, err := s.st.GetKey(ctx, k.Parent)
		if err != nil {
			return err
		}
		k = p
	}
	return nil
}
