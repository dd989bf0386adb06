package pool

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	ready        *prometheus.GaugeVec
	target       *prometheus.GaugeVec
	claims       *prometheus.CounterVec
	claimSeconds *prometheus.HistogramVec
	refillErrors *prometheus.CounterVec
	discarded    *prometheus.CounterVec
	build        *prometheus.HistogramVec
	zygote       *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lbb_pool_ready", Help: "Parked slots ready to be claimed, by pool key.",
		}, []string{"key"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lbb_pool_target", Help: "Ready slots the refill aims for, by pool key (follows demand).",
		}, []string{"key"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_pool_claims_total", Help: `Sandboxes handed out, by pool key ("none" when no key matched) and path: warm (a ready slot) or cold (created for the claim).`,
		}, []string{"key", "path"}),
		claimSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lbb_pool_claim_seconds", Help: "Time to hand out a sandbox whose agent answers, by path (warm or cold).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"path"}),
		refillErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_pool_refill_errors_total", Help: "Slots that failed to build, by pool key.",
		}, []string{"key"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_pool_slots_discarded_total", Help: "Slots destroyed without serving, by pool key and reason (claim_failed, ended, surplus).",
		}, []string{"key", "reason"}),
		build: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lbb_pool_slot_build_seconds", Help: "Time to build one slot (create, start, pre-start, park), by pool key.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 4, 8, 16, 32},
		}, []string{"key"}),
		zygote: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_pool_zygote_total", Help: "Slot interpreters asked of the driver's zygote, by path (warm: a slot's; cold: a claim's the pool could not serve) and outcome: forked; fallback (it failed: the agent starts one); unsupported (such sandboxes cannot have one: the pool stops asking for them).",
		}, []string{"path", "outcome"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ready, m.target, m.claims, m.claimSeconds, m.refillErrors, m.discarded, m.build, m.zygote}
}

// Collectors are the pool's metrics, for a registry of the caller's (Options.Registerer
// registers them instead).
func (p *Pool) Collectors() []prometheus.Collector { return p.m.collectors() }
