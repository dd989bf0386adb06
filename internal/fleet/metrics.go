package fleet

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/store"
)

// collector answers the fleet's metrics per host at each scrape.
type collector struct{ f *Fleet }

var (
	descUp = prometheus.NewDesc("lbb_host_up",
		"1 when the host answers its heartbeats and takes new sandboxes, else 0 (state says why)", []string{"host", "state"}, nil)
	descPlaced = prometheus.NewDesc("lbb_host_sandboxes",
		"sandboxes the control plane placed on the host that it still holds (one-call runs' and long-lived ones, stopped ones too)", []string{"host"}, nil)
	descRunning = prometheus.NewDesc("lbb_host_running_sandboxes",
		"sandboxes the host agent said it runs at its last heartbeat", []string{"host"}, nil)
	descBeat = prometheus.NewDesc("lbb_host_last_heartbeat_timestamp_seconds",
		"when the host last answered a heartbeat (Unix time)", []string{"host"}, nil)
	descCPUs    = prometheus.NewDesc("lbb_host_cpus", "CPUs of the host", []string{"host"}, nil)
	descMemFree = prometheus.NewDesc("lbb_host_memory_free_bytes",
		"memory the host said was available for new work at its last heartbeat (placement passes over a host below the floor)", []string{"host"}, nil)
	descDiskFree = prometheus.NewDesc("lbb_host_disk_free_bytes",
		"free space of the host's data directory at its last heartbeat (placement passes over a host below the floor)", []string{"host"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descPlaced, descRunning, descBeat, descCPUs, descMemFree, descDiskFree} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.f.Hosts() {
		up := 0.0
		if h.State == store.HostUp {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, h.ID, h.State)
		ch <- prometheus.MustNewConstMetric(descPlaced, prometheus.GaugeValue, float64(h.Placed), h.ID)
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(h.Info.Capacity.Sandboxes), h.ID)
		ch <- prometheus.MustNewConstMetric(descCPUs, prometheus.GaugeValue, float64(h.Info.Capacity.CPUs), h.ID)
		if c := h.Info.Capacity; c.MemoryFreeMiB > 0 {
			ch <- prometheus.MustNewConstMetric(descMemFree, prometheus.GaugeValue, float64(c.MemoryFreeMiB<<20), h.ID)
		}
		if c := h.Info.Capacity; c.DiskFreeMiB > 0 {
			ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(c.DiskFreeMiB<<20), h.ID)
		}
		if !h.LastHeartbeat.IsZero() {
			ch <- prometheus.MustNewConstMetric(descBeat, prometheus.GaugeValue, float64(h.LastHeartbeat.UnixMilli())/1e3, h.ID)
		}
	}
}
