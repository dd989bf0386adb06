// Package store keeps lbb's records: graphs, API keys, sandboxes, commands, templates,
// idempotency reservations and the audit trail. Store is the interface; sqlstore implements
// it over database/sql, and sqlite opens the embedded default. Every implementation passes
// storetest.Run.
//
// Writes that must hold together go in one WithTx; a read outside a transaction sees
// everything committed before it.
package store

import (
	"context"
	"encoding/json"
	"time"
)

// Store is the record store.
type Store interface {
	Queries
	// WithTx runs fn in one transaction, committed when fn returns nil. fn must use q for
	// every call, never the Store.
	WithTx(ctx context.Context, fn func(q Queries) error) error
	Close() error
}

// Queries are the reads and writes, inside or outside a transaction. Not-found lookups
// return an errdefs NotFound error; a duplicate insert returns errdefs Conflict.
type Queries interface {
	CreateGraph(ctx context.Context, g Graph) error
	GetGraph(ctx context.Context, name string) (Graph, error)
	ListGraphs(ctx context.Context) ([]Graph, error)

	CreateKey(ctx context.Context, k Key) error
	GetKey(ctx context.Context, id string) (Key, error)
	GetKeyByHash(ctx context.Context, hash string) (Key, error)
	ListKeys(ctx context.Context, p Page) ([]Key, string, error)
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// CountKeyRun counts one run started with key id; it answers false, counting nothing,
	// when the key has started its MaxRuns already.
	CountKeyRun(ctx context.Context, id string) (bool, error)

	CreateSandbox(ctx context.Context, s Sandbox) error
	GetSandbox(ctx context.Context, graph, id string) (Sandbox, error)
	// GetSandboxBySession answers the graph's sandbox named session that has not ended
	// (destroyed or failed); NotFound when none.
	GetSandboxBySession(ctx context.Context, graph, session string) (Sandbox, error)
	UpdateSandbox(ctx context.Context, s Sandbox) error
	ListSandboxes(ctx context.Context, graph string, f SandboxFilter, p Page) ([]Sandbox, string, error)
	// CountSandboxes counts the graph's sandboxes that are starting or running (running),
	// and those and the paused and stopped ones, which hold a disk (held).
	CountSandboxes(ctx context.Context, graph string) (running, held int, err error)
	// CountLongLived counts as CountSandboxes does the graph's long-lived sandboxes alone:
	// one-call runs' sandboxes are bounded by the host's run slots instead.
	CountLongLived(ctx context.Context, graph string) (running, held int, err error)
	// GraphUsage answers what the graph holds, for its quotas.
	GraphUsage(ctx context.Context, graph string) (GraphUsage, error)

	CreateSnapshot(ctx context.Context, s Snapshot) error
	GetSnapshot(ctx context.Context, graph, id string) (Snapshot, error)
	// ListSnapshots lists the snapshots of one sandbox of the graph, newest first.
	ListSnapshots(ctx context.Context, graph, sandboxID string, p Page) ([]Snapshot, string, error)
	DeleteSnapshot(ctx context.Context, graph, id string) error
	// ListEndedSnapshots returns up to limit snapshots, of every graph, whose sandbox has
	// ended (destroyed or failed) or whose record is gone.
	ListEndedSnapshots(ctx context.Context, limit int) ([]Snapshot, error)

	CreatePreview(ctx context.Context, p Preview) error
	// GetPreview finds a preview by its id alone: the preview listener knows no graph.
	GetPreview(ctx context.Context, id string) (Preview, error)
	// ListPreviews lists the previews of one sandbox of the graph, newest first.
	ListPreviews(ctx context.Context, graph, sandboxID string, p Page) ([]Preview, string, error)
	DeletePreview(ctx context.Context, graph, id string) error
	// DeleteExpiredPreviews removes the previews that expired before before.
	DeleteExpiredPreviews(ctx context.Context, before time.Time) (int, error)

	// PutHost records a host of a fleet (internal/fleet) as it is now, by its id; an empty URL
	// or TokenHash keeps the recorded one.
	PutHost(ctx context.Context, h Host) error
	ListHosts(ctx context.Context) ([]Host, error)
	// DeleteHost forgets a host (its token no longer joins); an unknown id is no error.
	DeleteHost(ctx context.Context, id string) error
	// PutPlacement records that host holds id (a sandbox's state or a snapshot's files);
	// placing an id again moves it.
	PutPlacement(ctx context.Context, p Placement) error
	// GetPlacement answers where id is held.
	GetPlacement(ctx context.Context, id string) (Placement, error)
	// DeletePlacement forgets where id was held; an unknown id is no error.
	DeletePlacement(ctx context.Context, id string) error
	// ListPlacements answers what host holds ("" : every host).
	ListPlacements(ctx context.Context, host string) ([]Placement, error)

	CreateCommand(ctx context.Context, c Command) error
	GetCommand(ctx context.Context, graph, id string) (Command, error)
	UpdateCommand(ctx context.Context, c Command) error
	ListCommands(ctx context.Context, graph string, f CommandFilter, p Page) ([]Command, string, error)

	// CreateTemplateVersion saves t as the next version of its (graph, name), keeping the
	// template's id across versions, and returns what it saved.
	CreateTemplateVersion(ctx context.Context, t Template) (Template, error)
	// GetTemplate returns one version of a template by name, or its newest for version 0.
	GetTemplate(ctx context.Context, graph, name string, version int) (Template, error)
	// ListTemplates returns the newest version of each of the graph's templates, by name.
	ListTemplates(ctx context.Context, graph string, p Page) ([]Template, string, error)
	ListTemplateVersions(ctx context.Context, graph, name string) ([]Template, error)

	CreateIdempotency(ctx context.Context, r Idempotency) error
	GetIdempotency(ctx context.Context, graph, key string) (Idempotency, error)
	GetIdempotencyByCommand(ctx context.Context, commandID string) (Idempotency, error)
	UpdateIdempotency(ctx context.Context, r Idempotency) error
	// DeleteIdempotency forgets a reservation that ran no code (a call a crash cut off), so
	// that a retry with its key does the work.
	DeleteIdempotency(ctx context.Context, graph, key string) error
	// ListIdempotencyByState lists every graph's reservations in state.
	ListIdempotencyByState(ctx context.Context, state string) ([]Idempotency, error)

	CreateFile(ctx context.Context, f File) error
	GetFile(ctx context.Context, graph, id string) (File, error)
	// GetFileBySHA256 returns the graph's newest File with these bytes.
	GetFileBySHA256(ctx context.Context, graph, sha256 string) (File, error)
	ListFiles(ctx context.Context, graph string, p Page) ([]File, string, error)
	// DeleteFile removes a File of the graph and answers it; last says no File of any graph
	// names its bytes any more. CreateFile and DeleteFile of the same bytes exclude each other
	// until their transactions end (both write the blob's row), so that the caller can put
	// the bytes in place or take them away inside its transaction, in step with the records.
	DeleteFile(ctx context.Context, graph, id string) (f File, last bool, err error)
	// BlobNamed reports whether a File of any graph names the bytes with this sha256 (the
	// blob's row that CreateFile writes and the last DeleteFile deletes), or a sandbox that
	// has not ended holds them as its workspace archive.
	BlobNamed(ctx context.Context, sha256 string) (bool, error)
	// TemplatesNamingFile lists the template versions of the graph whose files name one of
	// refs (a File id or sha256, as the template wrote it).
	TemplatesNamingFile(ctx context.Context, graph string, refs ...string) ([]TemplateRef, error)
	// SetTemplateBuild records the state of the build of version (id, version) of a template.
	SetTemplateBuild(ctx context.Context, id string, version int, b TemplateBuild) error
	// TemplateLayers lists the layer keys any template version (of any graph) names.
	TemplateLayers(ctx context.Context) ([]string, error)

	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit lists entries newest first; graph "" lists every graph's.
	ListAudit(ctx context.Context, graph string, p Page) ([]AuditEntry, string, error)

	// Budgets. ChargeKeyRun counts one run against a grant's budget, and
	// ChargeWorkflowRun against a workflow run's: each answers false, counting nothing, when
	// the budget is spent (runs, CPU time or memory), and ChargeWorkflowRun answers true when
	// the run has no budget. Add* add a command's usage.
	ChargeKeyBudget(ctx context.Context, id string) (bool, error)
	AddKeyUsage(ctx context.Context, id string, vcpuMs, gibMs float64) error
	PutWorkflowBudget(ctx context.Context, b WorkflowBudget) error
	GetWorkflowBudget(ctx context.Context, graph, workflow, run string) (WorkflowBudget, error)
	ChargeWorkflowRun(ctx context.Context, graph, workflow, run string) (bool, error)
	AddWorkflowUsage(ctx context.Context, graph, workflow, run string, vcpuMs, gibMs float64) error
	// UncountKeyRun and UncountWorkflowRun give back a run counted for a call that then ran
	// nothing (refused, or answered by another call with its key).
	UncountKeyRun(ctx context.Context, id string) error
	UncountWorkflowRun(ctx context.Context, graph, workflow, run string) error
	// AddUsage writes an ended command's line of the usage ledger (once per command).
	AddUsage(ctx context.Context, e UsageEntry) error
	SumUsage(ctx context.Context, q UsageQuery) ([]UsageSum, error)
	// KeyUsage sums the usage ledger of the runs made with key id (and with the grants it
	// minted) since since, in every graph.
	KeyUsage(ctx context.Context, id string, since time.Time) (UsageSum, error)

	// Recovery and retention, across every graph.
	ListSandboxesByStatus(ctx context.Context, statuses ...string) ([]Sandbox, error)
	ListCommandsByStatus(ctx context.Context, statuses ...string) ([]Command, error)

	// Holders: control planes sharing the store (docs/deploy.md). A store opened for a
	// control plane (sqlstore's SetHolder) stamps the sandboxes, commands and idempotency
	// reservations it inserts with that control plane's id; its start, or the peer that
	// adopts it once it is dead, recovers them. The List*Held list one holder's.
	ListSandboxesHeld(ctx context.Context, holder string, statuses ...string) ([]Sandbox, error)
	ListCommandsHeld(ctx context.Context, holder string, statuses ...string) ([]Command, error)
	ListIdempotencyHeld(ctx context.Context, holder, state string) ([]Idempotency, error)
	// RegisterControlPlane starts a life of control plane id: its row, heartbeat at, not
	// adopted. Heartbeat refreshes it; it answers false, writing nothing, when a peer has
	// adopted id (it was taken for dead).
	RegisterControlPlane(ctx context.Context, id string, at time.Time) error
	Heartbeat(ctx context.Context, id string, at time.Time) (bool, error)
	GetControlPlane(ctx context.Context, id string) (ControlPlane, error)
	ListControlPlanes(ctx context.Context) ([]ControlPlane, error)
	// AdoptControlPlane makes by the adopter of control plane id when nobody adopted it yet
	// and its heartbeat is older than deadBefore, and answers whether it did (of two
	// adopters, one wins). The adopter also takes over the adoptions id had not finished.
	AdoptControlPlane(ctx context.Context, id, by string, deadBefore, at time.Time) (bool, error)
	// FinishAdoption moves every record id holds to its adopter and marks the adoption
	// done (recovered_at).
	FinishAdoption(ctx context.Context, id string, at time.Time) error
	// DeleteEndedSandboxes removes up to limit sandboxes that ended before t, with their
	// commands, and returns how many sandboxes it removed.
	DeleteEndedSandboxes(ctx context.Context, before time.Time, limit int) (int, error)
	// ExpireRunOutput clears the kept output of up to limit one-call run commands that
	// finished before t and returns their ids.
	ExpireRunOutput(ctx context.Context, before time.Time, limit int) ([]string, error)
}

// Page asks for one page of a list, newest first. Cursor is the NextCursor of the page before.
type Page struct {
	Limit  int
	Cursor string
}

// Graph is a tenant. Nothing crosses graphs.
type Graph struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// AllGraphs in a key's Graphs gives it every graph.
const AllGraphs = "*"

// Scopes of API keys.
const (
	ScopeSandboxesRead   = "sandboxes:read"
	ScopeSandboxesWrite  = "sandboxes:write"
	ScopeSandboxesDelete = "sandboxes:delete"
	ScopeTemplatesWrite  = "templates:write"
	ScopeFilesRead       = "files:read"
	ScopeFilesWrite      = "files:write"
	ScopeAdmin           = "admin"
)

// AllScopes lists every scope.
var AllScopes = []string{ScopeSandboxesRead, ScopeSandboxesWrite, ScopeSandboxesDelete,
	ScopeTemplatesWrite, ScopeFilesRead, ScopeFilesWrite, ScopeAdmin}

// Key is an API key. Only the SHA-256 of its secret is kept.
type Key struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Hash is the hex SHA-256 of the whole secret.
	Hash string `json:"-"`
	// Prefix is the secret's first characters, to tell keys apart in lists.
	Prefix    string     `json:"prefix"`
	Graphs    []string   `json:"graphs"`
	Scopes    []string   `json:"scopes"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// A derived key (a sandbox's API grant) names its parent, the key that made it, and
	// lives no longer than the parent does nor past ExpiresAt; Sandbox is the sandbox whose
	// calls it carries (the actor of its audit entries). MaxRuns caps the runs it starts
	// (0: no cap); Runs counts them.
	Parent    string     `json:"parent,omitempty"`
	Sandbox   string     `json:"sandbox,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	MaxRuns   int64      `json:"max_runs,omitempty"`
	Runs      int64      `json:"runs,omitempty"`
	// Kind is KindGrant for a grant (POST /v1/grants): a short-lived derived key for one
	// workflow step's attempt, with its Origin stamped on every record made with it, and a
	// budget (MaxRuns, BudgetVCPUMs, BudgetGiBMs: 0 is no limit) with what was used under it.
	Kind         string  `json:"kind,omitempty"`
	Origin       *Origin `json:"origin,omitempty"`
	BudgetVCPUMs float64 `json:"budget_vcpu_ms,omitempty"`
	BudgetGiBMs  float64 `json:"budget_gib_ms,omitempty"`
	UsedVCPUMs   float64 `json:"used_vcpu_ms,omitempty"`
	UsedGiBMs    float64 `json:"used_gib_ms,omitempty"`
	// SpendCap caps what the key's runs (and those of grants it minted) use over a period.
	SpendCap *SpendCap `json:"spend_cap,omitempty"`
}

// Spend cap periods.
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
	PeriodTotal = "total"
)

// SpendCap is a cap on what a key's runs use in a period (a UTC day, a UTC month, or its
// whole life): CPU time, memory over time, or cost at the server's prices; 0 is no cap.
type SpendCap struct {
	VCPUMs float64 `json:"vcpu_ms,omitempty"`
	GiBMs  float64 `json:"gib_ms,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
	Period string  `json:"period,omitempty"`
}

// KindGrant marks a key that is a grant.
const KindGrant = "grant"

// HasGraph reports whether k may use graph.
func (k Key) HasGraph(graph string) bool {
	for _, g := range k.Graphs {
		if g == graph || g == AllGraphs {
			return true
		}
	}
	return false
}

// HasScope reports whether k has scope; admin has them all.
func (k Key) HasScope(scope string) bool {
	for _, s := range k.Scopes {
		if s == scope || s == ScopeAdmin {
			return true
		}
	}
	return false
}

// Limits are the resources of one sandbox.
type Limits struct {
	MemoryMiB int64   `json:"memory_mib,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	Pids      int64   `json:"pids,omitempty"`
	DiskMiB   int64   `json:"disk_mib,omitempty"`
}

// Origin says who and what started a sandbox or command.
type Origin struct {
	Key      string `json:"key,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	Run      string `json:"run,omitempty"`
	Step     string `json:"step,omitempty"`
	Attempt  string `json:"attempt,omitempty"`
	// Grant is the grant the call was made with; Key is then the key that minted it.
	Grant string `json:"grant,omitempty"`
}

// Usage is what a sandbox consumed: CPU time, and memory reserved over its life.
type Usage struct {
	VCPUMs float64 `json:"vcpu_ms"`
	GiBMs  float64 `json:"gib_ms"`
	// Cost is what it cost at the server's prices; absent when it sets none.
	Cost float64 `json:"cost,omitempty"`
	// Egress is what the sandbox's egress carried; nil when it had none.
	Egress *EgressUsage `json:"egress,omitempty"`
}

// Egress modes.
const (
	// EgressNone: no route out at all (the default).
	EgressNone = "none"
	// EgressAllowlist: only the listed host names and ports.
	EgressAllowlist = "allowlist"
	// EgressPublic: any public address.
	EgressPublic = "public"
)

// Egress is a sandbox's route out: its mode, the allowlist (host names, exact or
// "*.example.org", each with ":port", ":*" or no port for 80 and 443) and the quota of bytes
// both ways together.
type Egress struct {
	Mode       string   `json:"mode"`
	Allow      []string `json:"allow,omitempty"`
	QuotaBytes int64    `json:"quota_bytes,omitempty"`
}

// On reports whether e lets anything out.
func (e *Egress) On() bool { return e != nil && e.Mode != "" && e.Mode != EgressNone }

// EgressUsage is what a sandbox's (or a command's) egress carried: bytes each way,
// connections made and refused, and the same per destination (host name and port).
type EgressUsage struct {
	BytesOut    int64 `json:"bytes_out"`
	BytesIn     int64 `json:"bytes_in"`
	Connections int64 `json:"connections"`
	Refused     int64 `json:"refused"`
	// QuotaExceeded says the quota was reached: the connections were cut then.
	QuotaExceeded bool                `json:"quota_exceeded,omitempty"`
	Destinations  []EgressDestination `json:"destinations,omitempty"`
}

// EgressDestination counts the connections to one host name and port.
type EgressDestination struct {
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Connections int64  `json:"connections"`
	Refused     int64  `json:"refused"`
}

// Add folds o into u (a later life, a later interval).
func (u *EgressUsage) Add(o *EgressUsage) {
	if o == nil {
		return
	}
	u.BytesOut += o.BytesOut
	u.BytesIn += o.BytesIn
	u.Connections += o.Connections
	u.Refused += o.Refused
	u.QuotaExceeded = u.QuotaExceeded || o.QuotaExceeded
	for _, d := range o.Destinations {
		found := false
		for i := range u.Destinations {
			if u.Destinations[i].Host == d.Host && u.Destinations[i].Port == d.Port {
				u.Destinations[i].Connections += d.Connections
				u.Destinations[i].Refused += d.Refused
				found = true
				break
			}
		}
		if !found {
			u.Destinations = append(u.Destinations, d)
		}
	}
}

// Since answers what u carried beyond an earlier reading of the same counters.
func (u EgressUsage) Since(before EgressUsage) EgressUsage {
	d := EgressUsage{BytesOut: u.BytesOut - before.BytesOut, BytesIn: u.BytesIn - before.BytesIn,
		Connections: u.Connections - before.Connections, Refused: u.Refused - before.Refused,
		QuotaExceeded: u.QuotaExceeded && !before.QuotaExceeded}
	for _, x := range u.Destinations {
		for _, b := range before.Destinations {
			if b.Host == x.Host && b.Port == x.Port {
				x.Connections -= b.Connections
				x.Refused -= b.Refused
				break
			}
		}
		if x.Connections != 0 || x.Refused != 0 {
			d.Destinations = append(d.Destinations, x)
		}
	}
	return d
}

// APIGrant is what code inside a sandbox may call of the API, at http://127.0.0.1:7700 in
// the sandbox: the scopes (within the creating key's), at most MaxRuns runs started (0: no
// cap), within the sandbox's graph, until the sandbox ends. Key names the derived key its
// calls carry; the key's secret never enters the sandbox.
type APIGrant struct {
	Scopes  []string `json:"scopes"`
	MaxRuns int64    `json:"max_runs,omitempty"`
	Key     string   `json:"key,omitempty"`
}

// GitClone is a public repository cloned into /workspace when a sandbox is created.
type GitClone struct {
	URL    string `json:"url"`
	Branch string `json:"branch,omitempty"`
	Depth  int    `json:"depth,omitempty"`
}

// TemplateRef names the exact template version a sandbox or command came from.
type TemplateRef struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Sandbox statuses.
const (
	SandboxStarting  = "starting"
	SandboxRunning   = "running"
	SandboxPaused    = "paused"
	SandboxStopped   = "stopped"
	SandboxDestroyed = "destroyed"
	SandboxFailed    = "failed"
)

// Why a sandbox ended.
const (
	EndRunFinished    = "run_finished"
	EndDeleted        = "deleted"
	EndExpired        = "expired"
	EndStopped        = "stopped"
	EndServerShutdown = "server_shutdown"
	EndLost           = "lost"
	// EndHostLost: the host the sandbox ran on stopped answering (internal/fleet); what
	// ran there is lost, never run again.
	EndHostLost = "host_lost"
	EndFailed   = "failed"
	// EndServerRestart: the server stopped (or crashed) while a long-lived sandbox ran; it
	// was stopped with its disk kept, and resume starts it again.
	EndServerRestart = "server_restart"
	// EndEgressQuota: a one-call run failed after its sandbox's egress reached its quota
	// (its connections were cut then).
	EndEgressQuota = "egress_quota_exceeded"
	// EndBudgetExceeded: a one-call run was stopped when a budget it ran under ran out.
	EndBudgetExceeded = "budget_exceeded"
)

// Sandbox is a sandbox record.
type Sandbox struct {
	ID     string `json:"id"`
	Graph  string `json:"graph"`
	Status string `json:"status"`
	// OneCall marks a Level 1 sandbox that lives for one run.
	OneCall  bool         `json:"one_call"`
	Base     string       `json:"base"`
	Image    string       `json:"image,omitempty"`
	Template *TemplateRef `json:"template,omitempty"`
	// Layer is the template layer (its key) the sandbox runs on over Image, if any.
	Layer string `json:"layer,omitempty"`
	// Host is the host of a fleet the sandbox was placed on (internal/fleet); "" with one
	// host agent.
	Host      string            `json:"host,omitempty"`
	Limits    Limits            `json:"limits"`
	Isolation string            `json:"isolation,omitempty"` // the driver it runs on ("ns", "gvisor"), resolved; "" only on old records
	EnvNames  []string          `json:"env_names,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Origin    Origin            `json:"origin"`
	CreatedAt time.Time         `json:"created_at"`
	StartedAt *time.Time        `json:"started_at,omitempty"`
	EndedAt   *time.Time        `json:"ended_at,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	EndReason string            `json:"end_reason,omitempty"`
	Error     string            `json:"error,omitempty"`
	Usage     Usage             `json:"usage"`
	// PausedAt is when the sandbox was paused; set only while it is.
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// PauseMode is how it was paused (PauseCheckpoint, PauseFreeze), so that resume, also
	// after a restart, knows how to wake it; set only while it is.
	PauseMode string `json:"pause_mode,omitempty"`
	// CheckpointBytes is the size of its checkpoint while it is paused with one.
	CheckpointBytes int64 `json:"checkpoint_bytes,omitempty"`
	// ForkedFrom names the sandbox and snapshot a fork started from.
	ForkedFrom *ForkedFrom `json:"forked_from,omitempty"`
	// Egress is its route out (nil: none); API what code inside may call of the API; Git the
	// repository cloned into its workspace at create.
	Egress *Egress   `json:"egress,omitempty"`
	API    *APIGrant `json:"api,omitempty"`
	Git    *GitClone `json:"git,omitempty"`
	// Session is the caller's name for it, unique in its graph among the sandboxes that
	// have not ended; Size the named size its limits came from.
	Session string `json:"session,omitempty"`
	Size    string `json:"size,omitempty"`
	// Workspace is its disk archived in the blob store at its last stop; set only while it
	// is stopped (a start makes it stale).
	Workspace *WorkspaceArchive `json:"workspace,omitempty"`
	// Checkpoint is the archive of its checkpoint (PauseCheckpoint) in the blob store, set
	// while it is paused so: a resume on a host without the checkpoint restores it.
	Checkpoint *WorkspaceArchive `json:"checkpoint,omitempty"`
}

// WorkspaceArchive is a stopped sandbox's disk in the blob store (internal/diskarchive), or a
// checkpoint's or snapshot's directory (a directory archive).
type WorkspaceArchive struct {
	// SHA256 and Bytes are the archive blob's; DiskBytes the size of the disk (or the bytes
	// the directory takes on disk) it holds.
	SHA256     string    `json:"sha256"`
	Bytes      int64     `json:"bytes"`
	DiskBytes  int64     `json:"disk_bytes"`
	ArchivedAt time.Time `json:"archived_at"`
}

// How a sandbox was paused.
const (
	// PauseCheckpoint: saved whole (memory, processes, disk) to the data directory and
	// stopped; its RAM is free and it survives a server restart.
	PauseCheckpoint = "checkpoint"
	// PauseFreeze: its processes are parked by the freezer and stay in RAM; a server restart
	// stops it.
	PauseFreeze = "freeze"
)

// ForkedFrom names where a fork came from.
type ForkedFrom struct {
	Sandbox  string `json:"sandbox"`
	Snapshot string `json:"snapshot"`
}

// ControlPlane is a control plane (lbb serve) of the store, and who adopted it once it was
// dead. The ID "" stands for the records from before holders.
type ControlPlane struct {
	ID          string
	StartedAt   time.Time
	HeartbeatAt time.Time
	AdoptedBy   string // "" while nobody adopted it
	AdoptedAt   *time.Time
	RecoveredAt *time.Time // when its adopter recovered its records and took them
}

// Host is a host agent of a fleet: the machine a control plane places sandboxes on.
type Host struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// State is HostUp or HostLost.
	State string `json:"state"`
	// Capacity is what the host said it has and runs, as JSON (hostagent.Capacity).
	Capacity      json.RawMessage `json:"capacity,omitempty"`
	LastHeartbeat time.Time       `json:"last_heartbeat"`
	RegisteredAt  time.Time       `json:"registered_at"`
	// TokenHash is the SHA-256 (hex) of the token of a host that joins (lbb host --control);
	// "" for a host listed by --host-agent. PutHost keeps the recorded one when it is "".
	TokenHash string `json:"-"`
}

// Host states.
const (
	HostUp   = "up"
	HostLost = "lost"
	// HostAdded is a host given a token (POST /v1/hosts) that has not joined yet.
	HostAdded = "added"
)

// Placement says which host holds a sandbox's state (Kind PlacedSandbox) or a snapshot's
// files (PlacedSnapshot).
type Placement struct {
	ID       string    `json:"id"`
	Host     string    `json:"host"`
	Kind     string    `json:"kind"`
	PlacedAt time.Time `json:"placed_at"`
}

// Placement kinds.
const (
	PlacedSandbox  = "sandbox"
	PlacedSnapshot = "snapshot"
)

// Preview is a signed URL given out for a port of a sandbox; deleting it revokes the URL.
type Preview struct {
	ID        string    `json:"id"`
	Graph     string    `json:"graph"`
	SandboxID string    `json:"sandbox"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
	CreatedAt time.Time `json:"created_at"`
	Origin    Origin    `json:"origin"`
}

// Snapshot is a saved state of a running sandbox, memory included, that forks start from.
// Its bytes are a directory of the host's data directory.
type Snapshot struct {
	ID        string `json:"id"`
	Graph     string `json:"graph"`
	SandboxID string `json:"sandbox"`
	Isolation string `json:"isolation"`
	// Memory says the snapshot holds the processes and memory, not only the disk.
	Memory     bool              `json:"memory"`
	SizeBytes  int64             `json:"size_bytes"`
	CreatedAt  time.Time         `json:"created_at"`
	DurationMs float64           `json:"duration_ms"`
	Metadata   map[string]string `json:"metadata"`
	// Archive is its directory archived in the blob store (nil when the host has none to
	// archive to): a fork on a host without the snapshot's files restores it.
	Archive *WorkspaceArchive `json:"archive,omitempty"`
}

// Command statuses. The breaches of a limit have their own.
const (
	CommandQueued    = "queued"
	CommandRunning   = "running"
	CommandSucceeded = "succeeded"
	CommandFailed    = "failed"
	CommandTimedOut  = "timed_out"
	CommandKilled    = "killed"
	CommandLost      = "lost"
	CommandOOM       = "oom"
	CommandDiskFull  = "disk_full"
	// CommandBudgetExceeded: the command was stopped when a budget it ran under ran out.
	CommandBudgetExceeded = "budget_exceeded"
)

// CommandDone reports whether status is final.
func CommandDone(status string) bool {
	return status != CommandQueued && status != CommandRunning
}

// Command kinds.
const (
	KindRun     = "run"
	KindProcess = "process"
	// KindTerminal is a process on a terminal (GET /v1/sandboxes/{id}/pty): its output is
	// stdout alone; what is typed is its stdin, counted and never kept.
	KindTerminal = "terminal"
	// KindCode is a cell run in a code context (POST /v1/sandboxes/{id}/code).
	KindCode = "code"
	// KindScript is a plain program run once in a one-call run's sandbox (run.script).
	KindScript = "script"
)

// Output is what a record keeps of one stream: its first bytes (Head) and its last (Tail),
// which never repeat a byte (a stream that fits the tail is all in the tail), and its size.
type Output struct {
	Head  string `json:"head"`
	Tail  string `json:"tail"`
	Bytes int64  `json:"bytes"`
	// Expired says the retention of this output passed and head and tail were dropped.
	Expired bool `json:"expired,omitempty"`
}

// Dropped is how many bytes of the stream head and tail do not hold.
func (o Output) Dropped() int64 {
	return max(0, o.Bytes-int64(len(o.Head)+len(o.Tail)))
}

// MarshalJSON writes the output with "truncated" and "dropped_bytes", which say how much of
// the stream head and tail do not hold. They are not stored: Head, Tail and Bytes say it.
func (o Output) MarshalJSON() ([]byte, error) {
	type plain Output
	d := o.Dropped()
	return json.Marshal(struct {
		plain
		Truncated    bool  `json:"truncated,omitempty"`
		DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	}{plain(o), d > 0, d})
}

// Command is a command record.
type Command struct {
	ID        string `json:"id"`
	Graph     string `json:"graph"`
	SandboxID string `json:"sandbox"`
	Kind      string `json:"kind"`

	// Processes.
	Argv       []string `json:"argv,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	StdinBytes int64    `json:"stdin_bytes,omitempty"`
	// Runs.
	Language string          `json:"language,omitempty"`
	Code     string          `json:"code,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	Config   json.RawMessage `json:"config,omitempty"`
	Template *TemplateRef    `json:"template,omitempty"`

	EnvNames  []string `json:"env_names,omitempty"`
	TimeoutMs int64    `json:"timeout_ms"`

	Status string          `json:"status"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	// ResultTruncated says the result was larger than the server keeps in a record: Result
	// is empty, ResultBytes its size and ResultFile the File of the graph that holds it
	// (empty when the graph's Files quota had no room for it; Error then says so).
	ResultTruncated bool   `json:"result_truncated,omitempty"`
	ResultBytes     int64  `json:"result_bytes,omitempty"`
	ResultFile      string `json:"result_file,omitempty"`
	Error           string `json:"error,omitempty"`
	ExitCode        *int   `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	Stdout          Output `json:"stdout"`
	Stderr          Output `json:"stderr"`
	// Egress is what the sandbox's egress carried while the command ran (all of the
	// sandbox's: commands running at once each count what they share).
	Egress *EgressUsage `json:"egress,omitempty"`
	// ForkedFrom is, for a fork's copy of a command that ran in its source, the source
	// command's id: its output is the copy's from the fork on.
	ForkedFrom string `json:"forked_from,omitempty"`

	// Usage is what the command used (a run: its sandbox's life; a command in a sandbox:
	// the sandbox's CPU time and reserved memory while it ran), set when it ends; Budget is
	// what its budgets had left after it. The record is the receipt of a workflow step.
	Usage  *Usage      `json:"usage,omitempty"`
	Budget *BudgetLeft `json:"budget,omitempty"`

	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	Origin         Origin     `json:"origin"`
	CreatedAt      time.Time  `json:"created_at"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	DurationMs     int64      `json:"duration_ms"`
}

// TemplateFile is a File of the graph a template copies into the workspace.
type TemplateFile struct {
	File string `json:"file"`
	Path string `json:"path"`
}

// Template is one immutable version of a template.
type Template struct {
	ID          string          `json:"id"`
	Graph       string          `json:"graph"`
	Name        string          `json:"name"`
	Version     int             `json:"version"`
	Base        string          `json:"base"`
	Code        string          `json:"code,omitempty"`
	Limits      Limits          `json:"limits"`
	Isolation   string          `json:"isolation,omitempty"` // the driver its runs default to; "" is the server's
	Egress      *Egress         `json:"egress,omitempty"`    // its runs' and sandboxes' route out unless a call names one
	TimeoutMs   int64           `json:"timeout_ms,omitempty"`
	Config      json.RawMessage `json:"config,omitempty"`
	Files       []TemplateFile  `json:"files,omitempty"`
	Description string          `json:"description,omitempty"`
	// Image is what the version installs over its base; its sandboxes run on the base with
	// Layer, the read-only layer the recipe builds, over it once Build is ready.
	Image     *ImageRecipe   `json:"image,omitempty"`
	Layer     string         `json:"layer,omitempty"`
	Build     *TemplateBuild `json:"build,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	CreatedBy string         `json:"created_by,omitempty"`
}

// ImageRecipe is a template version's packages: Debian packages, Python packages, global
// npm packages, Files of the graph copied to absolute paths, then shell steps run as root.
type ImageRecipe struct {
	Apt   []string       `json:"apt,omitempty"`
	Pip   []string       `json:"pip,omitempty"`
	Npm   []string       `json:"npm,omitempty"`
	Run   []string       `json:"run,omitempty"`
	Files []TemplateFile `json:"files,omitempty"`
}

// Build states of a template version with a recipe.
const (
	BuildBuilding = "building"
	BuildReady    = "ready"
	BuildFailed   = "failed"
)

// TemplateBuild is the build of a template version's layer.
type TemplateBuild struct {
	Status string `json:"status"`
	// Step is the step that failed ("apt", "pip", "npm", "files[0]", "run[2]"), Error why.
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	// Resolved is what the recipe's packages resolved to ("pip polars" → "1.2.3").
	Resolved   map[string]string `json:"resolved,omitempty"`
	LayerBytes int64             `json:"layer_bytes,omitempty"`
	// Cached says the layer was already built (by an identical recipe): no build ran.
	Cached     bool       `json:"cached,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	DurationMs int64      `json:"duration_ms,omitempty"`
}

// Idempotency states.
const (
	IdempotencyRunning = "running"
	IdempotencyDone    = "done"
)

// Idempotency is the durable reservation of one (graph, key): made before any code runs,
// finished with the response the first call gave.
type Idempotency struct {
	Graph          string     `json:"graph"`
	Key            string     `json:"key"`
	Route          string     `json:"route"`
	RequestHash    string     `json:"request_hash"`
	State          string     `json:"state"`
	CommandID      string     `json:"command_id,omitempty"`
	SandboxID      string     `json:"sandbox_id,omitempty"`
	ResponseStatus int        `json:"response_status,omitempty"`
	ResponseBody   []byte     `json:"-"`
	CreatedAt      time.Time  `json:"created_at"`
	CompletedAt    *time.Time `json:"completed_at,omitempty"`
}

// AuditEntry is one state-changing call.
type AuditEntry struct {
	ID     string `json:"id"`
	Graph  string `json:"graph"`
	KeyID  string `json:"key"`
	Method string `json:"method"`
	Route  string `json:"route"`
	Path   string `json:"path"`
	Target string `json:"target,omitempty"`
	// Actor is the sandbox that made the call (with its API grant, or its egress), when one did.
	Actor     string    `json:"actor,omitempty"`
	Status    int       `json:"status"`
	RequestID string    `json:"request_id"`
	At        time.Time `json:"at"`
}

// SandboxFilter narrows a sandbox list.
type SandboxFilter struct {
	Status string
	// Session keeps the sandboxes of one session (a deleted one's and its successor's).
	Session string
	// Labels keeps the sandboxes whose metadata has every one of these pairs.
	Labels map[string]string
}

// Matches reports whether s passes the filter.
func (f SandboxFilter) Matches(s Sandbox) bool {
	if f.Status != "" && s.Status != f.Status || f.Session != "" && s.Session != f.Session {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := s.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// File is a File of the graph: its bytes are the blob with its SHA256.
type File struct {
	ID        string     `json:"id"`
	Graph     string     `json:"graph"`
	SHA256    string     `json:"sha256"`
	Size      int64      `json:"size"`
	Name      string     `json:"name,omitempty"`
	Origin    FileOrigin `json:"origin"`
	CreatedAt time.Time  `json:"created_at"`
}

// File origins.
const (
	FileFromSandbox = "sandbox"
	FileFromUpload  = "upload"
	// FileFromResult: the result of a run, larger than the server keeps in its record.
	FileFromResult = "result"
)

// FileOrigin says where a File came from: a workspace file (sandbox and path), an upload or
// a run's result (command), and the key that kept it.
type FileOrigin struct {
	Kind    string `json:"kind"`
	Sandbox string `json:"sandbox,omitempty"`
	Path    string `json:"path,omitempty"`
	Command string `json:"command,omitempty"`
	Key     string `json:"key,omitempty"`
	// The workflow step and grant of a File kept by a call made with a grant.
	Workflow string `json:"workflow,omitempty"`
	Run      string `json:"run,omitempty"`
	Step     string `json:"step,omitempty"`
	Attempt  string `json:"attempt,omitempty"`
	Grant    string `json:"grant,omitempty"`
}

// GraphUsage is what a graph holds: the sandboxes it runs and keeps, its Files (each at its
// size, even where graphs share bytes), snapshots and checkpoints.
type GraphUsage struct {
	// Running: starting or running sandboxes. Sandboxes: those and the paused and stopped.
	// Both count long-lived sandboxes only, as the caps do: a one-call run's sandbox is a
	// run slot of the host's (admission), never the graph's.
	Running   int64 `json:"running"`
	Sandboxes int64 `json:"sandboxes"`
	// Stopped sandboxes, their disks each at its size limit (what it may fill once resumed).
	Stopped          int64 `json:"stopped"`
	StoppedDiskBytes int64 `json:"stopped_disk_bytes"`
	// Checkpoints: sandboxes paused with their memory on disk.
	Checkpoints     int64 `json:"checkpoints"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	Files           int64 `json:"files"`
	FileBytes       int64 `json:"file_bytes"`
	Snapshots       int64 `json:"snapshots"`
	SnapshotBytes   int64 `json:"snapshot_bytes"`
}

// CommandFilter narrows a command list.
type CommandFilter struct {
	SandboxID string
	Status    string
}

// Budget is a limit on what runs may use: runs started, CPU time and reserved memory over
// time. 0 is no limit.
type Budget struct {
	Runs   int64   `json:"runs,omitempty"`
	VCPUMs float64 `json:"vcpu_ms,omitempty"`
	GiBMs  float64 `json:"gib_ms,omitempty"`
}

// Spent is what was used under a budget.
type Spent struct {
	Runs   int64   `json:"runs"`
	VCPUMs float64 `json:"vcpu_ms"`
	GiBMs  float64 `json:"gib_ms"`
}

// Left is what a budget has left (nil fields: no limit).
func (b Budget) Left(u Spent) Remaining {
	var r Remaining
	if b.Runs > 0 {
		r.Runs = ptrTo(max(0, b.Runs-u.Runs))
	}
	if b.VCPUMs > 0 {
		r.VCPUMs = ptrTo(max(0, b.VCPUMs-u.VCPUMs))
	}
	if b.GiBMs > 0 {
		r.GiBMs = ptrTo(max(0, b.GiBMs-u.GiBMs))
	}
	return r
}

// Exhausted reports whether u has reached a limit of b.
func (b Budget) Exhausted(u Spent) bool {
	return b.Runs > 0 && u.Runs >= b.Runs || b.VCPUMs > 0 && u.VCPUMs >= b.VCPUMs || b.GiBMs > 0 && u.GiBMs >= b.GiBMs
}

func ptrTo[T any](v T) *T { return &v }

// Remaining is what is left of a budget; a nil field has no limit.
type Remaining struct {
	Runs   *int64   `json:"runs,omitempty"`
	VCPUMs *float64 `json:"vcpu_ms,omitempty"`
	GiBMs  *float64 `json:"gib_ms,omitempty"`
}

// BudgetLeft is what a command's budgets had left after it: its grant's and its workflow
// run's.
type BudgetLeft struct {
	Grant    *Remaining `json:"grant,omitempty"`
	Workflow *Remaining `json:"workflow,omitempty"`
}

// WorkflowBudget is the budget of one run of a workflow in a graph, and what its runs used.
type WorkflowBudget struct {
	Graph     string    `json:"graph"`
	Workflow  string    `json:"workflow"`
	Run       string    `json:"run"`
	Budget    Budget    `json:"budget"`
	Used      Spent     `json:"used"`
	Left      Remaining `json:"left"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// UsageEntry is one ended command's line of the usage ledger.
type UsageEntry struct {
	CommandID string
	Graph     string
	SandboxID string
	Key       string
	Grant     string
	Workflow  string
	Run       string
	Template  string
	At        time.Time
	VCPUMs    float64
	GiBMs     float64
}

// UsageQuery asks for the sum of the usage ledger of a graph over [From, To), grouped by
// GroupBy: "key", "template", "workflow", "day" or "" (one total).
type UsageQuery struct {
	Graph   string
	From    time.Time
	To      time.Time
	GroupBy string
}

// UsageSum is one group of a usage query.
type UsageSum struct {
	Group    string  `json:"group,omitempty"`
	Commands int64   `json:"commands"`
	VCPUMs   float64 `json:"vcpu_ms"`
	GiBMs    float64 `json:"gib_ms"`
	Cost     float64 `json:"cost,omitempty"`
}
