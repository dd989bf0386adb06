// Package config is the one configuration of `lbb serve`: every setting is a flag and the
// LBB_* environment variable of the same name (--data-dir and LBB_DATA_DIR), read and
// validated once in main and passed down as a value.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Limits are the resources of one sandbox.
type Limits struct {
	MemoryMiB int64
	CPUs      float64
	Pids      int64
	DiskMiB   int64
}

// Prices are what one unit of metered usage costs, in the currency the operator bills in:
// --price-vcpu-ms (a millisecond of CPU) and --price-gib-ms (a GiB of memory for a ms).
type Prices struct {
	VCPUMs float64
	GiBMs  float64
}

// Set reports whether any price is set.
func (p Prices) Set() bool { return p.VCPUMs > 0 || p.GiBMs > 0 }

// Cost is what vcpuMs and gibMs cost.
func (p Prices) Cost(vcpuMs, gibMs float64) float64 { return vcpuMs*p.VCPUMs + gibMs*p.GiBMs }

// Quotas bound, per graph, the counts and bytes of what outlives a run. Each is a flag
// --quota-<name> (LBB_QUOTA_<NAME>).
type Quotas struct {
	Files         int64
	FileBytes     int64
	Snapshots     int64
	SnapshotBytes int64
	// Checkpoints are the sandboxes paused with their memory saved to disk.
	Checkpoints     int64
	CheckpointBytes int64
	// StoppedSandboxes and StoppedDiskBytes: a stopped sandbox's disk counts at its size
	// limit, what it may fill once resumed.
	StoppedSandboxes int64
	StoppedDiskBytes int64
}

// Config is the server's configuration.
type Config struct {
	Addr string
	// PreviewAddr is the listener of port previews ("" serves none); PreviewDomain the
	// domain whose subdomains name them (<token>.<domain>), each its own web origin.
	PreviewAddr string
	// PprofAddr, when set, serves net/http/pprof on a listener of its own (profiling only;
	// it is unauthenticated: keep it on loopback).
	PprofAddr     string
	PreviewDomain string
	DataDir       string
	// Store is where records are kept: "" for SQLite in <data-dir>/lbb.db, or a PostgreSQL
	// URL (postgres://…), which several control planes may share.
	Store string
	// Blobs is where the bytes of Files of the graph are kept: "" for <data-dir>/blobs, or
	// an S3-compatible bucket (s3://bucket[/prefix]?endpoint=URL, credentials from
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
	Blobs     string
	ImagesDir string
	// Mirror is the Debian mirror image builds use ("" for the builder's default).
	Mirror string
	// Runtime names the default isolation driver. The server also offers every other driver
	// this host can run; a call or a template may name one.
	Runtime string
	// Agent is the guest agent binary the driver puts in every sandbox.
	Agent string

	// Defaults apply when a call names no limit; Max caps what a call may ask.
	Defaults Limits
	Max      Limits

	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// DefaultLifetime and MaxLifetime bound how long a sandbox may live.
	DefaultLifetime time.Duration
	MaxLifetime     time.Duration
	// DefaultWait is how long a call that names no wait_ms waits for a command it did not
	// start (a replay, a GET); one that starts a run waits for its timeout and 30 s more.
	// MaxWait bounds every wait before a 202.
	DefaultWait time.Duration
	MaxWait     time.Duration

	MaxRunningPerGraph int
	// RunSlots is how many one-call runs the host executes at once (0: four per CPU, no more
	// than its memory holds at the default memory limit); RunQueue how many more wait for a
	// slot, served fairly per graph then per key, before a run is refused (too_many_runs).
	// One-call runs do not count toward MaxRunningPerGraph, which bounds long-lived sandboxes.
	RunSlots int
	RunQueue int
	// CgroupParent is the cgroup under which the ns driver makes each sandbox's ("" its
	// default, lbb); gvisor's and microvm's get "-gvisor" and "-microvm" after it. lbb bench
	// gives each server of its own one, to meter what its sandboxes cost.
	CgroupParent string
	// MaxSandboxesPerGraph bounds a graph's sandboxes that hold a disk: starting, running,
	// paused and stopped ones.
	MaxSandboxesPerGraph int
	// Quotas bound what each graph keeps on the host between runs.
	Quotas Quotas
	// Prices turn metered units into cost (records' and usage's "cost"); 0: no price.
	Prices Prices
	// MaxResultBytes is the largest run result a record and an answer carry; a larger one is
	// kept as a File of the graph the answer names.
	MaxResultBytes int64
	// MaxStreamsPerKey bounds the output streams (SSE) and long-polls one API key holds
	// open at once.
	MaxStreamsPerKey int
	// MetricsPublic serves /metrics without a key; by default it needs an admin key.
	MetricsPublic bool
	MaxBodyBytes  int64
	MaxFileBytes  int64
	// OutputHeadBytes and OutputTailBytes are how much of each stream a record keeps.
	OutputHeadBytes int
	OutputTailBytes int

	// SandboxRetention keeps a sandbox and its commands this long after the sandbox ends;
	// OutputRetention keeps a one-call run's output this long.
	SandboxRetention time.Duration
	OutputRetention  time.Duration
	JanitorInterval  time.Duration

	// ShutdownGrace is how long a stopping server lets running commands finish.
	ShutdownGrace time.Duration
	// TerminalGrace is how long a terminal nobody is attached to waits to be re-attached
	// before it is hung up.
	TerminalGrace time.Duration
	LogLevel      string

	// Pool keeps warm sandboxes with pre-started interpreters for one-call runs: PoolMin
	// ready per (language, default limits) at least, up to PoolMax as demand grows, built
	// PoolRefill at a time.
	Pool       bool
	PoolMin    int
	PoolMax    int
	PoolRefill int
	// PoolGvisorMin is how many warm sandboxes per language are kept on gvisor when the
	// server offers it beside another default (0: none; gvisor runs then start cold).
	PoolGvisorMin int
	// Zygote forks the pool's python-with-numpy-and-pandas interpreters on the ns driver from
	// a per-image fork server instead of starting each in its sandbox (see docs/architecture.md,
	// "Zygote"); a failure falls back to the start.
	Zygote bool

	// HostAgent is the URL of a host agent in another process (`lbb host`) that runs the
	// sandboxes instead of one in the server's own process; HostAgentToken is its token.
	HostAgent      string
	HostAgentToken string
	// HostLostAfter is how long a host of several (HostAgent names more than one: a fleet)
	// may not answer its heartbeats before it is lost (internal/fleet).
	HostLostAfter time.Duration
	// PeerDeadAfter is how long a control plane on a shared store (PostgreSQL) may miss its
	// heartbeats (every 2 s) before a peer takes it for dead and adopts its records.
	PeerDeadAfter time.Duration
	// Hosts is "remote" when hosts join the control plane (lbb host --control) instead of
	// being listed by HostAgent; HostSecret is what the control planes derive each joining
	// host's token from (default: <data-dir>/host-secret, made at first use).
	Hosts      string
	HostSecret string

	// EgressQuota is a sandbox's egress quota (bytes, both ways) when a call names none;
	// EgressMaxQuota the most a call may name.
	EgressQuota    int64
	EgressMaxQuota int64
	// EgressPermit are networks the egress guard lets sandboxes reach although they are not
	// public (CIDRs): loopback test servers, an internal mirror.
	EgressPermit []string
	// EgressResolver is the DNS server (host:port) the guard resolves names with; "" is
	// the host's resolver.
	EgressResolver string

	// Template builds (internal/layers): the package sources a build uses (pip's index and
	// find-links, npm's registry, apt's "deb …" lines), and BuildAllow, what a build
	// sandbox's egress may reach besides the hosts of those sources (with none of them set:
	// the sources the host itself is configured with, see hostBuildSources in cmd/lbb).
	BuildPipIndex     string
	BuildPipFindLinks string
	BuildNpmRegistry  string
	BuildAptSources   []string
	BuildAllow        []string
	// APIURL is where host agents send the API calls sandboxes make with their grants
	// (default: http:// and the address the server listens on).
	APIURL string
}

// Default returns the configuration with every default filled in.
func Default() Config {
	return Config{
		Addr:                 "127.0.0.1:7700",
		PreviewAddr:          "127.0.0.1:7701",
		PreviewDomain:        "preview.localhost",
		DataDir:              "/var/lib/lbb",
		Runtime:              "ns",
		Defaults:             Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024},
		Max:                  Limits{MemoryMiB: 8192, CPUs: 4, Pids: 4096, DiskMiB: 10240},
		DefaultTimeout:       60 * time.Second,
		MaxTimeout:           time.Hour,
		DefaultLifetime:      600 * time.Second,
		MaxLifetime:          time.Hour,
		DefaultWait:          60 * time.Second,
		MaxWait:              5 * time.Minute,
		MaxRunningPerGraph:   10,
		MaxSandboxesPerGraph: 100,
		RunQueue:             1000,
		Quotas: Quotas{
			Files: 10000, FileBytes: 10 << 30,
			Snapshots: 100, SnapshotBytes: 100 << 30,
			Checkpoints: 100, CheckpointBytes: 100 << 30,
			StoppedSandboxes: 100, StoppedDiskBytes: 256 << 30,
		},
		MaxResultBytes:   1 << 20,
		MaxStreamsPerKey: 64,
		MaxBodyBytes:     10 << 20,
		MaxFileBytes:     100 << 20,
		OutputHeadBytes:  16 << 10,
		OutputTailBytes:  16 << 10,
		SandboxRetention: 30 * 24 * time.Hour,
		OutputRetention:  7 * 24 * time.Hour,
		JanitorInterval:  time.Minute,
		ShutdownGrace:    30 * time.Second,
		HostLostAfter:    10 * time.Second,
		PeerDeadAfter:    15 * time.Second,
		TerminalGrace:    2 * time.Minute,
		LogLevel:         "info",
		Pool:             true,
		PoolMin:          2,
		PoolMax:          8,
		PoolRefill:       1,
		PoolGvisorMin:    1,
		Zygote:           true,
		EgressQuota:      1 << 30,
		EgressMaxQuota:   10 << 30,
	}
}

// Flags registers every setting on fs, with c's values as defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "address to listen on")
	fs.StringVar(&c.PreviewAddr, "preview-addr", c.PreviewAddr, "address of the port previews' listener (empty: none)")
	fs.StringVar(&c.PprofAddr, "pprof-addr", c.PprofAddr, "serve Go's net/http/pprof profiles on this address (empty: none; unauthenticated, keep it on loopback)")
	fs.StringVar(&c.PreviewDomain, "preview-domain", c.PreviewDomain, "previews are served as <token>.<this domain>; *.localhost resolves locally in browsers and curl")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the store, workspaces and blobs")
	fs.StringVar(&c.Store, "store", c.Store, "record store: empty for SQLite in <data-dir>/lbb.db, or a PostgreSQL URL (postgres://user@host/db?sslmode=…) that several control planes may share")
	fs.StringVar(&c.Blobs, "blobs", c.Blobs, "blob store of Files: empty for <data-dir>/blobs, or an S3-compatible bucket s3://bucket[/prefix]?endpoint=https://host[&region=…] (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	fs.StringVar(&c.ImagesDir, "images-dir", c.ImagesDir, "directory of the base images (default <data-dir>/images)")
	fs.StringVar(&c.Mirror, "debian-mirror", c.Mirror, "Debian mirror for image builds (default: the host's apt sources)")
	fs.StringVar(&c.Runtime, "runtime", c.Runtime, "default isolation driver (ns, gvisor); the others this host can run are offered too")
	fs.StringVar(&c.Agent, "agent", c.Agent, "guest agent binary (default lbb-agent next to lbb)")

	fs.Int64Var(&c.Defaults.MemoryMiB, "default-memory-mib", c.Defaults.MemoryMiB, "memory of a sandbox when a call names none")
	fs.Int64Var(&c.Max.MemoryMiB, "max-memory-mib", c.Max.MemoryMiB, "most memory a call may ask for")
	fs.Float64Var(&c.Defaults.CPUs, "default-cpus", c.Defaults.CPUs, "vCPUs of a sandbox when a call names none")
	fs.Float64Var(&c.Max.CPUs, "max-cpus", c.Max.CPUs, "most vCPUs a call may ask for")
	fs.Int64Var(&c.Defaults.Pids, "default-pids", c.Defaults.Pids, "processes of a sandbox when a call names none")
	fs.Int64Var(&c.Max.Pids, "max-pids", c.Max.Pids, "most processes a call may ask for")
	fs.Int64Var(&c.Defaults.DiskMiB, "default-disk-mib", c.Defaults.DiskMiB, "workspace disk when a call names none")
	fs.Int64Var(&c.Max.DiskMiB, "max-disk-mib", c.Max.DiskMiB, "most workspace disk a call may ask for")
	fs.DurationVar(&c.DefaultTimeout, "default-timeout", c.DefaultTimeout, "command timeout when a call names none")
	fs.DurationVar(&c.MaxTimeout, "max-timeout", c.MaxTimeout, "longest command timeout a call may ask for")
	fs.DurationVar(&c.DefaultLifetime, "default-lifetime", c.DefaultLifetime, "sandbox lifetime when a call names none")
	fs.DurationVar(&c.MaxLifetime, "max-lifetime", c.MaxLifetime, "longest sandbox lifetime a call may ask for")
	fs.DurationVar(&c.DefaultWait, "default-wait", c.DefaultWait, "how long a call waits for its command when it names no wait_ms")
	fs.DurationVar(&c.MaxWait, "max-wait", c.MaxWait, "longest wait_ms a call may ask for")
	fs.IntVar(&c.MaxRunningPerGraph, "max-running-per-graph", c.MaxRunningPerGraph, "running long-lived sandboxes per graph (one-call runs wait for --run-slots instead)")
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "the cgroup under which sandboxes get theirs (default: lbb; gvisor's and microvm's get -gvisor and -microvm after it)")
	fs.IntVar(&c.RunSlots, "run-slots", c.RunSlots, "one-call runs executed at once on this host (0: four per CPU, bounded by memory at the default memory limit; with --host-agent naming several, that of each host that is up, summed)")
	fs.IntVar(&c.RunQueue, "run-queue", c.RunQueue, "one-call runs that may wait for a run slot (fair per graph, then per key) before one is refused with 429 too_many_runs")
	fs.IntVar(&c.MaxSandboxesPerGraph, "max-sandboxes-per-graph", c.MaxSandboxesPerGraph, "sandboxes per graph that hold a disk: running, paused and stopped (at least --max-running-per-graph)")
	fs.Float64Var(&c.Prices.VCPUMs, "price-vcpu-ms", c.Prices.VCPUMs, "the cost of a millisecond of CPU (0: none); sets cost on records, usage and spend caps")
	fs.Float64Var(&c.Prices.GiBMs, "price-gib-ms", c.Prices.GiBMs, "the cost of a GiB of memory reserved for a millisecond (0: none)")
	fs.Int64Var(&c.Quotas.Files, "quota-files", c.Quotas.Files, "Files of the graph per graph")
	fs.Int64Var(&c.Quotas.FileBytes, "quota-file-bytes", c.Quotas.FileBytes, "bytes of Files of the graph per graph")
	fs.Int64Var(&c.Quotas.Snapshots, "quota-snapshots", c.Quotas.Snapshots, "snapshots per graph")
	fs.Int64Var(&c.Quotas.SnapshotBytes, "quota-snapshot-bytes", c.Quotas.SnapshotBytes, "bytes of snapshots per graph")
	fs.Int64Var(&c.Quotas.Checkpoints, "quota-checkpoints", c.Quotas.Checkpoints, "sandboxes paused with their memory on disk, per graph")
	fs.Int64Var(&c.Quotas.CheckpointBytes, "quota-checkpoint-bytes", c.Quotas.CheckpointBytes, "bytes of the checkpoints of paused sandboxes per graph")
	fs.Int64Var(&c.Quotas.StoppedSandboxes, "quota-stopped-sandboxes", c.Quotas.StoppedSandboxes, "stopped sandboxes per graph")
	fs.Int64Var(&c.Quotas.StoppedDiskBytes, "quota-stopped-disk-bytes", c.Quotas.StoppedDiskBytes, "bytes of stopped sandboxes' disks per graph (each at its size limit)")
	fs.Int64Var(&c.MaxResultBytes, "max-result-bytes", c.MaxResultBytes, "largest run result kept in its record and answer; a larger one is kept as a File of the graph")
	fs.IntVar(&c.MaxStreamsPerKey, "max-streams-per-key", c.MaxStreamsPerKey, "output streams and long-polls one API key may hold open at once")
	fs.BoolVar(&c.MetricsPublic, "metrics-public", c.MetricsPublic, "serve /metrics without an API key (by default it needs an admin key)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest request body")
	fs.Int64Var(&c.MaxFileBytes, "max-file-bytes", c.MaxFileBytes, "largest file upload")
	fs.IntVar(&c.OutputHeadBytes, "output-head-bytes", c.OutputHeadBytes, "bytes of the head of each output stream a record keeps")
	fs.IntVar(&c.OutputTailBytes, "output-tail-bytes", c.OutputTailBytes, "bytes of the tail of each output stream a record keeps")
	fs.DurationVar(&c.SandboxRetention, "retention", c.SandboxRetention, "how long a sandbox and its commands are kept after the sandbox ends")
	fs.DurationVar(&c.OutputRetention, "output-retention", c.OutputRetention, "how long the output of a one-call run is kept")
	fs.DurationVar(&c.JanitorInterval, "janitor-interval", c.JanitorInterval, "how often expired records are removed")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long a stopping server lets running commands finish")
	fs.DurationVar(&c.TerminalGrace, "terminal-grace", c.TerminalGrace, "how long a terminal nobody is attached to waits to be re-attached before it is hung up")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.BoolVar(&c.Pool, "pool", c.Pool, "keep warm sandboxes for one-call runs (--pool=false: every run starts cold)")
	fs.IntVar(&c.PoolMin, "pool-min", c.PoolMin, "warm sandboxes kept ready per language at least")
	fs.IntVar(&c.PoolMax, "pool-max", c.PoolMax, "warm sandboxes kept ready per language at most, as demand grows")
	fs.IntVar(&c.PoolRefill, "pool-refill", c.PoolRefill, "warm sandboxes built at a time")
	fs.BoolVar(&c.Zygote, "zygote", c.Zygote, "fork python interpreters (the warm pool's and cold runs') from a fork server per image and imports on the ns driver (numpy and pandas imported for full slots, the harness alone for lean ones), instead of starting python and importing in each sandbox (--zygote=false: start in each)")
	fs.IntVar(&c.PoolGvisorMin, "pool-gvisor-min", c.PoolGvisorMin, "warm gvisor sandboxes kept ready per language when gvisor is offered but not the default (0: none)")
	fs.StringVar(&c.HostAgent, "host-agent", c.HostAgent, "URL of a host agent (lbb host) to run sandboxes on instead of this process (http:// for HTTP/2 in clear text, https://); several, comma-separated, each optionally named (name=URL), make a fleet that places sandboxes across them")
	fs.StringVar(&c.HostAgentToken, "host-agent-token", c.HostAgentToken, "the --token of the host agent of --host-agent: one for all, or one per host, comma-separated in the same order")
	fs.StringVar(&c.Hosts, "hosts", c.Hosts, "remote: hosts join this control plane (lbb hosts add NAME gives a host its token; lbb host --control URL --token TOKEN runs it) instead of being listed by --host-agent")
	fs.StringVar(&c.HostSecret, "host-secret", c.HostSecret, "with --hosts remote: the secret every control plane on the database derives the hosts' tokens from (default: <data-dir>/host-secret, made at first use)")
	fs.DurationVar(&c.HostLostAfter, "host-lost-after", c.HostLostAfter, "with several --host-agent: how long a host may miss its heartbeats (one a second) before it is lost and its running sandboxes end host_lost")
	fs.DurationVar(&c.PeerDeadAfter, "peer-dead-after", c.PeerDeadAfter, "with --store postgres://: how long another control plane may miss its heartbeats (every 2s) before one that lives adopts it: its commands end lost, its sandboxes are stopped and held here")
	fs.Int64Var(&c.EgressQuota, "egress-quota", c.EgressQuota, "egress quota of a sandbox (bytes both ways) when a call names none")
	fs.Int64Var(&c.EgressMaxQuota, "egress-max-quota", c.EgressMaxQuota, "largest egress quota a call may name")
	fs.Func("egress-permit", "a network (CIDR) sandboxes' egress may reach although it is not public; repeat or separate with commas (LBB_EGRESS_PERMIT)", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.EgressPermit = append(c.EgressPermit, p)
			}
		}
		return nil
	})
	fs.StringVar(&c.BuildPipIndex, "build-pip-index", c.BuildPipIndex, "pip index URL template builds install Python packages from (default: the host's PIP_INDEX_URL or /etc/pip.conf)")
	fs.StringVar(&c.BuildPipFindLinks, "build-pip-find-links", c.BuildPipFindLinks, "a URL of package files template builds' pip also looks in")
	fs.StringVar(&c.BuildNpmRegistry, "build-npm-registry", c.BuildNpmRegistry, "npm registry URL template builds install npm packages from (default: the host's npm_config_registry or /etc/npmrc)")
	fs.Func("build-apt-source", "a \"deb URL suite components\" line template builds' apt uses instead of the base's sources; repeat (LBB_BUILD_APT_SOURCE)", func(v string) error {
		c.BuildAptSources = append(c.BuildAptSources, v)
		return nil
	})
	fs.Func("build-egress-allow", "a host[:port] template builds may reach besides their package sources' hosts; repeat or separate with commas (LBB_BUILD_EGRESS_ALLOW)", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.BuildAllow = append(c.BuildAllow, p)
			}
		}
		return nil
	})
	fs.StringVar(&c.EgressResolver, "egress-resolver", c.EgressResolver, "DNS server (host:port) the egress guard resolves names with (default: the host's resolver)")
	fs.StringVar(&c.APIURL, "api-url", c.APIURL, "URL host agents forward sandboxes' API calls to (default: http:// and --addr)")
}

// EnvName is the environment variable of a flag: --data-dir is LBB_DATA_DIR.
func EnvName(flagName string) string {
	return "LBB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load reads the configuration: defaults, then LBB_* variables from getenv, then args.
// It validates the result.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c := Default()
	c.Flags(fs)
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return c, c.Validate()
}

// Validate checks c and fills in the settings derived from others.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Prices.VCPUMs < 0 || c.Prices.GiBMs < 0 {
		bad("--price-vcpu-ms and --price-gib-ms must not be negative")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("--addr %q: %v", c.Addr, err)
	}
	if c.DataDir == "" {
		bad("--data-dir is empty")
	} else if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if c.Store != "" && !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
		bad("--store %q: want empty (SQLite in --data-dir) or a postgres:// URL", c.Store)
	}
	if c.Blobs != "" && !strings.HasPrefix(c.Blobs, "s3://") {
		bad("--blobs %q: want empty (<data-dir>/blobs) or an s3:// URL", c.Blobs)
	}
	if c.ImagesDir == "" {
		c.ImagesDir = filepath.Join(c.DataDir, "images")
	} else if abs, err := filepath.Abs(c.ImagesDir); err == nil {
		c.ImagesDir = abs
	}
	if c.Agent == "" {
		if exe, err := os.Executable(); err == nil {
			c.Agent = filepath.Join(filepath.Dir(exe), "lbb-agent")
		}
	}
	if c.Runtime == "" {
		bad("--runtime is empty")
	}
	if c.Pool && (c.PoolMin < 0 || c.PoolMax < max(c.PoolMin, 1) || c.PoolRefill < 1) {
		bad("--pool-min %d, --pool-max %d, --pool-refill %d: want 0 ≤ min ≤ max, max ≥ 1, refill ≥ 1", c.PoolMin, c.PoolMax, c.PoolRefill)
	}
	switch c.Hosts {
	case "":
	case "remote":
		if c.HostAgent != "" {
			bad("--hosts remote and --host-agent: hosts join, or are listed, not both")
		}
		if c.HostLostAfter < 2*time.Second {
			bad("--host-lost-after %s: want at least 2s (a heartbeat is one a second)", c.HostLostAfter)
		}
	default:
		bad("--hosts %q: want remote (or leave it out)", c.Hosts)
	}
	if c.HostAgent != "" {
		hosts, err := c.HostAgents()
		if err != nil {
			bad("%v", err)
		}
		if len(hosts) > 1 && c.HostLostAfter < 2*time.Second {
			bad("--host-lost-after %s: want at least 2s (a heartbeat is one a second)", c.HostLostAfter)
		}
	}
	if c.PeerDeadAfter < time.Second {
		bad("--peer-dead-after %s: want at least 1s", c.PeerDeadAfter)
	}
	if c.EgressQuota < 0 || c.EgressMaxQuota < c.EgressQuota {
		bad("--egress-quota %d, --egress-max-quota %d: want 0 ≤ quota ≤ max", c.EgressQuota, c.EgressMaxQuota)
	}
	for _, p := range c.EgressPermit {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, aerr := netip.ParseAddr(p); aerr != nil {
				bad("--egress-permit %q: want a CIDR such as 10.0.0.0/8", p)
			}
		}
	}
	if c.EgressResolver != "" {
		if _, _, err := net.SplitHostPort(c.EgressResolver); err != nil {
			bad("--egress-resolver %q: want host:port", c.EgressResolver)
		}
	}
	if c.APIURL != "" {
		if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--api-url %q: want http://host:port", c.APIURL)
		}
	}
	if c.PoolGvisorMin < 0 {
		bad("--pool-gvisor-min %d must not be negative", c.PoolGvisorMin)
	}
	for _, l := range []struct {
		name     string
		def, max float64
	}{
		{"memory-mib", float64(c.Defaults.MemoryMiB), float64(c.Max.MemoryMiB)},
		{"cpus", c.Defaults.CPUs, c.Max.CPUs},
		{"pids", float64(c.Defaults.Pids), float64(c.Max.Pids)},
		{"disk-mib", float64(c.Defaults.DiskMiB), float64(c.Max.DiskMiB)},
		{"timeout", float64(c.DefaultTimeout), float64(c.MaxTimeout)},
		{"lifetime", float64(c.DefaultLifetime), float64(c.MaxLifetime)},
		{"wait", float64(c.DefaultWait), float64(c.MaxWait)},
	} {
		if l.def <= 0 || l.max <= 0 {
			bad("--default-%s and --max-%s must be positive", l.name, l.name)
		} else if l.def > l.max {
			bad("--default-%s is above --max-%s", l.name, l.name)
		}
	}
	if c.Defaults.MemoryMiB < 16 {
		bad("--default-memory-mib must be at least 16")
	}
	if c.MaxRunningPerGraph < 1 {
		bad("--max-running-per-graph must be at least 1")
	}
	if strings.Contains(c.CgroupParent, "..") || strings.HasPrefix(c.CgroupParent, "/") {
		bad("--cgroup-parent must be a relative cgroup path")
	}
	if c.RunSlots < 0 || c.RunQueue < 0 {
		bad("--run-slots and --run-queue must not be negative")
	}
	// Every running sandbox holds a disk: the cap of those is at least the running one.
	c.MaxSandboxesPerGraph = max(c.MaxSandboxesPerGraph, c.MaxRunningPerGraph)
	q := c.Quotas
	for _, v := range []int64{q.Files, q.FileBytes, q.Snapshots, q.SnapshotBytes, q.Checkpoints, q.CheckpointBytes, q.StoppedSandboxes, q.StoppedDiskBytes} {
		if v < 0 {
			bad("--quota-* must not be negative (0 allows none)")
			break
		}
	}
	if c.MaxResultBytes < 1<<10 {
		bad("--max-result-bytes must be at least 1024")
	}
	if c.MaxStreamsPerKey < 1 {
		bad("--max-streams-per-key must be at least 1")
	}
	if c.MaxBodyBytes < 1<<10 || c.MaxFileBytes < 1<<10 {
		bad("--max-body-bytes and --max-file-bytes must be at least 1024")
	}
	if c.OutputHeadBytes < 0 || c.OutputTailBytes < 0 {
		bad("--output-head-bytes and --output-tail-bytes must not be negative")
	}
	if c.SandboxRetention <= 0 || c.OutputRetention <= 0 || c.JanitorInterval <= 0 {
		bad("--retention, --output-retention and --janitor-interval must be positive")
	}
	if c.ShutdownGrace < 0 {
		bad("--shutdown-grace must not be negative")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}

// HostAgentSpec is one host agent of --host-agent: its name (its address unless named), URL
// and token.
type HostAgentSpec struct {
	Name, URL, Token string
}

// HostAgents parses --host-agent and --host-agent-token: URLs, each optionally named
// (name=URL), comma-separated, and one token for all or one each.
func (c Config) HostAgents() ([]HostAgentSpec, error) {
	var out []HostAgentSpec
	tokens := strings.Split(c.HostAgentToken, ",")
	seen := map[string]bool{}
	for _, item := range strings.Split(c.HostAgent, ",") {
		item = strings.TrimSpace(item)
		name, raw, named := strings.Cut(item, "=")
		if !named || strings.Contains(name, "/") {
			name, raw = "", item
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--host-agent %q: want http://host:port or https://host:port (or name=URL)", item)
		}
		if name == "" {
			name = u.Host
		}
		if seen[name] {
			return nil, fmt.Errorf("--host-agent: host %s named twice", name)
		}
		seen[name] = true
		out = append(out, HostAgentSpec{Name: name, URL: raw})
	}
	switch {
	case c.HostAgentToken == "":
		return nil, errors.New("--host-agent needs --host-agent-token")
	case len(tokens) == 1:
		for i := range out {
			out[i].Token = tokens[0]
		}
	case len(tokens) == len(out):
		for i := range out {
			out[i].Token = strings.TrimSpace(tokens[i])
		}
	default:
		return nil, fmt.Errorf("--host-agent-token: %d tokens for %d hosts; want one, or one per host", len(tokens), len(out))
	}
	return out, nil
}
