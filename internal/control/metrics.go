package control

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	runs        *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	running     prometheus.Gauge
	reaped      prometheus.Counter
	lost        prometheus.Counter
	adoptions   prometheus.Counter
	// vcpuMs and gibMs are the metered usage of ended commands, per graph.
	vcpuMs    *prometheus.CounterVec
	gibMs     *prometheus.CounterVec
	queueWait prometheus.Histogram

	r prometheus.Registerer
}

// watchAdmission exports a's run slots in use and queue depth.
func (m *metrics) watchAdmission(a *admission) {
	if m.r == nil {
		return
	}
	m.r.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lbb_run_slots_busy", Help: "One-call runs holding a run slot (executing)."},
			func() float64 { b, _ := a.depth(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lbb_run_queue_depth", Help: "One-call runs waiting for a run slot."},
			func() float64 { _, q := a.depth(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lbb_run_slots", Help: "One-call runs the host executes at once (--run-slots)."},
			func() float64 { return float64(a.limit()) }),
	)
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_runs_total", Help: "One-call runs that ended, by status.",
		}, []string{"status"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lbb_run_duration_seconds", Help: "Wall time of one-call runs, sandbox start to destroy, by status.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"status"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lbb_sandboxes_running", Help: "Sandboxes running now.",
		}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lbb_sandboxes_reaped_total", Help: "Sandboxes a restart found left behind and destroyed.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lbb_commands_lost_total", Help: "Commands a restart found unfinished and marked lost.",
		}),
		adoptions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lbb_control_plane_adoptions_total", Help: "Dead control planes on the shared store whose records this one adopted and recovered.",
		}),
		vcpuMs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_usage_vcpu_ms_total", Help: "CPU time of ended runs and commands, in milliseconds, by graph.",
		}, []string{"graph"}),
		gibMs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lbb_usage_gib_ms_total", Help: "Memory reserved by ended runs and commands over their time, in GiB·ms, by graph.",
		}, []string{"graph"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lbb_run_queue_wait_seconds", Help: "How long one-call runs waited for a run slot (0 for those that found one free).",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		r: r,
	}
	if r != nil {
		r.MustRegister(m.runs, m.runDuration, m.running, m.reaped, m.lost, m.adoptions, m.vcpuMs, m.gibMs, m.queueWait)
	}
	return m
}
