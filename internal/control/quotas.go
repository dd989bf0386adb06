package control

import (
	"context"
	"fmt"
	"sync"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Quotas per graph bound what a graph keeps on the host between runs: its sandboxes (running,
// and holding a disk), stopped sandboxes' disks, checkpoints of paused sandboxes, Files and
// snapshots, each by count and bytes. A call that would take a graph past one is refused
// before it does anything lasting: 429 quota_exceeded for a count, 413 quota_bytes_exceeded
// for bytes, saying which quota, the usage and the limit. The running cap stays transient
// (429 too_many_sandboxes: a retry may pass once a run ends).
//
// Each check shares a transaction with the record the call writes, so concurrent calls
// cannot pass one together. What is measured only once made (a snapshot's or a checkpoint's
// bytes) is checked then, and undone when over. A stop is checked before the host stops the
// sandbox, under a per-graph lock. What the server does by itself (a stop at shutdown, a
// sandbox that dies, a run's result kept as a File when the graph has room) is never refused.

// Quota names, as GET /v1/quotas answers them.
const (
	QuotaRunning          = "running_sandboxes"
	QuotaSandboxes        = "sandboxes"
	QuotaStopped          = "stopped_sandboxes"
	QuotaStoppedDiskBytes = "stopped_disk_bytes"
	QuotaCheckpoints      = "checkpoints"
	QuotaCheckpointBytes  = "checkpoint_bytes"
	QuotaFiles            = "files"
	QuotaFileBytes        = "file_bytes"
	QuotaSnapshots        = "snapshots"
	QuotaSnapshotBytes    = "snapshot_bytes"
)

// quota is one of a graph's quotas.
type quota struct {
	name, flag string
	bytes      bool
	// what it counts, and how to make room.
	what, free string
	usage      func(store.GraphUsage) int64
	limit      func(config.Config) int64
}

var quotas = []quota{
	{QuotaRunning, "--max-running-per-graph", false, "sandboxes starting or running", "wait for a run to end, or stop or delete a sandbox",
		func(u store.GraphUsage) int64 { return u.Running }, func(c config.Config) int64 { return int64(c.MaxRunningPerGraph) }},
	{QuotaSandboxes, "--max-sandboxes-per-graph", false, "sandboxes holding a disk (running, paused or stopped)", "delete a sandbox (DELETE /v1/sandboxes/{id})",
		func(u store.GraphUsage) int64 { return u.Sandboxes }, func(c config.Config) int64 { return int64(c.MaxSandboxesPerGraph) }},
	{QuotaStopped, "--quota-stopped-sandboxes", false, "stopped sandboxes", "delete a stopped sandbox, or delete this one instead of stopping it",
		func(u store.GraphUsage) int64 { return u.Stopped }, func(c config.Config) int64 { return c.Quotas.StoppedSandboxes }},
	{QuotaStoppedDiskBytes, "--quota-stopped-disk-bytes", true, "bytes of stopped sandboxes' disks, each at its size limit", "delete a stopped sandbox, or delete this one instead of stopping it",
		func(u store.GraphUsage) int64 { return u.StoppedDiskBytes }, func(c config.Config) int64 { return c.Quotas.StoppedDiskBytes }},
	{QuotaCheckpoints, "--quota-checkpoints", false, "sandboxes paused with their memory on disk", "resume, stop or delete a paused sandbox",
		func(u store.GraphUsage) int64 { return u.Checkpoints }, func(c config.Config) int64 { return c.Quotas.Checkpoints }},
	{QuotaCheckpointBytes, "--quota-checkpoint-bytes", true, "bytes of paused sandboxes' checkpoints", "resume, stop or delete a paused sandbox",
		func(u store.GraphUsage) int64 { return u.CheckpointBytes }, func(c config.Config) int64 { return c.Quotas.CheckpointBytes }},
	{QuotaFiles, "--quota-files", false, "Files of the graph", "delete Files (DELETE /v1/files/{id})",
		func(u store.GraphUsage) int64 { return u.Files }, func(c config.Config) int64 { return c.Quotas.Files }},
	{QuotaFileBytes, "--quota-file-bytes", true, "bytes of Files of the graph", "delete Files (DELETE /v1/files/{id})",
		func(u store.GraphUsage) int64 { return u.FileBytes }, func(c config.Config) int64 { return c.Quotas.FileBytes }},
	{QuotaSnapshots, "--quota-snapshots", false, "snapshots", "delete snapshots (DELETE /v1/snapshots/{id})",
		func(u store.GraphUsage) int64 { return u.Snapshots }, func(c config.Config) int64 { return c.Quotas.Snapshots }},
	{QuotaSnapshotBytes, "--quota-snapshot-bytes", true, "bytes of snapshots", "delete snapshots (DELETE /v1/snapshots/{id})",
		func(u store.GraphUsage) int64 { return u.SnapshotBytes }, func(c config.Config) int64 { return c.Quotas.SnapshotBytes }},
}

func quotaNamed(name string) quota {
	for _, q := range quotas {
		if q.name == name {
			return q
		}
	}
	panic("control: no quota " + name)
}

// Quota is one quota of a graph: what the graph holds and the most it may.
type Quota struct {
	Usage int64 `json:"usage"`
	Limit int64 `json:"limit"`
	// Unit is "count" or "bytes".
	Unit string `json:"unit"`
}

// Quotas is the answer of GET /v1/quotas: every quota of the graph by name, and the caps of
// one call that are not quotas.
type Quotas struct {
	Graph  string           `json:"graph"`
	Quotas map[string]Quota `json:"quotas"`
	// MaxFileBytes is the largest File; MaxResultBytes the largest result a run's record
	// keeps (a larger one is kept as a File of the graph).
	MaxFileBytes   int64 `json:"max_file_bytes"`
	MaxResultBytes int64 `json:"max_result_bytes"`
}

// Quotas answers the graph's quotas: usage and limits (GET /v1/quotas).
func (s *Service) Quotas(ctx context.Context, graph string) (Quotas, error) {
	u, err := s.st.GraphUsage(ctx, graph)
	if err != nil {
		return Quotas{}, err
	}
	out := Quotas{Graph: graph, Quotas: map[string]Quota{}, MaxFileBytes: s.cfg.MaxFileBytes, MaxResultBytes: s.cfg.MaxResultBytes}
	for _, q := range quotas {
		unit := "count"
		if q.bytes {
			unit = "bytes"
		}
		out.Quotas[q.name] = Quota{Usage: q.usage(u), Limit: q.limit(s.cfg), Unit: unit}
	}
	return out, nil
}

// unknownSize is the add of a check made before what a call adds is measured: it passes
// while the graph is below the limit.
const unknownSize = -1

// checkQuota refuses a call that would add add (a count or bytes) to the graph's quota
// name, whose usage is u.
func (s *Service) checkQuota(graph string, u store.GraphUsage, name string, add int64) error {
	q := quotaNamed(name)
	usage, limit := q.usage(u), q.limit(s.cfg)
	if add == unknownSize && usage < limit || add != unknownSize && usage+add <= limit {
		return nil
	}
	class, code, unit := errdefs.ClassLimitExceeded, errdefs.CodeQuotaExceeded, ""
	if q.bytes {
		class, code, unit = errdefs.ClassPayloadTooLarge, errdefs.CodeQuotaBytesExceeded, " bytes"
	}
	adds := fmt.Sprintf("this call adds %d%s", add, unit)
	if add == unknownSize {
		adds = "it is at its limit"
	}
	return errdefs.New(class, code, "graph %s: quota %s (%s) exceeded: usage %d%s, limit %d%s (%s); %s. To make room: %s",
		graph, q.name, q.what, usage, unit, limit, unit, q.flag, adds, q.free)
}

// adds is what a call adds to one quota.
type adds struct {
	quota string
	n     int64
}

// checkQuotas checks each quota a call adds to.
func (s *Service) checkQuotas(graph string, u store.GraphUsage, as ...adds) error {
	for _, a := range as {
		if err := s.checkQuota(graph, u, a.quota, a.n); err != nil {
			return err
		}
	}
	return nil
}

// checkCap refuses a sandbox that would start past the graph's caps: the running one
// (too_many_sandboxes, transient: a retry may pass once a run ends) and, for a new sandbox,
// the sandboxes holding a disk (quota_exceeded: delete one). A stopped or paused sandbox
// that resumes holds its disk already, so resume checks the running cap alone: a graph at
// its cap of sandboxes, all stopped, resumes any of them. Both caps count long-lived
// sandboxes: one-call runs wait for the host's run slots instead (admission), and a
// one-call run checks only that the graph holds no more sandboxes than it may.
func (s *Service) checkCap(ctx context.Context, q store.Queries, graph string, fresh, oneCall bool) error {
	running, held, err := q.CountLongLived(ctx, graph)
	if err != nil {
		return err
	}
	if !oneCall && running >= s.cfg.MaxRunningPerGraph {
		return errdefs.New(errdefs.ClassLimitExceeded, errdefs.CodeTooManySandboxes,
			"graph %s has %d running sandboxes, the most it may have (--max-running-per-graph); stop or delete one, or retry later", graph, running)
	}
	if fresh {
		return s.checkQuota(graph, store.GraphUsage{Sandboxes: int64(held)}, QuotaSandboxes, 1)
	}
	return nil
}

// graphLock serializes, per graph, the calls whose quota check cannot share a transaction
// with their record because the host acts between (stop). Callers holding a sandbox's ops
// take it after them.
func (s *Service) graphLock(graph string) *sync.Mutex {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.graphLocks == nil {
		s.graphLocks = map[string]*sync.Mutex{}
	}
	m := s.graphLocks[graph]
	if m == nil {
		m = &sync.Mutex{}
		s.graphLocks[graph] = m
	}
	return m
}
