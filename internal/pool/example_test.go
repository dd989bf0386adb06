package pool_test

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

// How lbb serve wires the pool: built before the service, started after it has reaped what
// a crash left behind, closed after the runs have ended.
func Example() {
	var (
		driver  runtime.Driver // the ns driver
		rootfs  string         // the base image's rootfs
		reg     = prometheus.NewRegistry()
		log     = slog.Default()
		limits  = runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024} // the server's defaults
		recover = func() error { return nil }                                       // control.Service.Recover
	)
	p, err := pool.New(pool.Options{
		Driver: driver, Keys: pool.DefaultKeys(rootfs, limits),
		Min: 2, Max: 8, Refill: 1, Registerer: reg, Log: log,
	})
	if err != nil {
		return
	}
	defer p.Close()
	h := hostagent.NewLocal(hostagent.Options{Driver: driver, Pool: p, Rootfs: rootfs, Log: log})
	_ = h // control.New(control.Options{Host: h, …})
	if err := recover(); err != nil {
		return
	}
	p.Start()
	// Each one-call run says what it runs (hostagent.RunRequest.Language), so that it claims
	// the right slot: h.Run(ctx, req) → p.Acquire(ctx, pool.Request{Spec: …, Language: "node"}).
}
