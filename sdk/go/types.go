package lbb

import (
	"encoding/json"
	"time"
)

// Limits are the resources of one sandbox; zero fields take the server's defaults.
type Limits struct {
	MemoryMiB int64   `json:"memory_mib,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	Pids      int64   `json:"pids,omitempty"`
	DiskMiB   int64   `json:"disk_mib,omitempty"`
}

// Origin names the workflow step that made a call.
type Origin struct {
	Key      string `json:"key,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	Run      string `json:"run,omitempty"`
	Step     string `json:"step,omitempty"`
}

// Output is what a record keeps of one output stream: its head, its tail and its size.
type Output struct {
	Head  string `json:"head"`
	Tail  string `json:"tail"`
	Bytes int64  `json:"bytes"`
	// Expired says the output's retention passed.
	Expired bool `json:"expired,omitempty"`
}

// String is the output as kept: the head, and the tail when there is more.
func (o Output) String() string {
	if int64(len(o.Head)) >= o.Bytes {
		return o.Head
	}
	if int64(len(o.Head)+len(o.Tail)) >= o.Bytes {
		return o.Head + o.Tail[len(o.Head)+len(o.Tail)-int(o.Bytes):]
	}
	return o.Head + "\n…\n" + o.Tail
}

// TemplateRef names one version of a template.
type TemplateRef struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Usage is what a sandbox consumed.
type Usage struct {
	VCPUMs float64 `json:"vcpu_ms"`
	GiBMs  float64 `json:"gib_ms"`
}

// Command statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusTimedOut  = "timed_out"
	StatusKilled    = "killed"
	StatusLost      = "lost"
	StatusOOM       = "oom"
	StatusDiskFull  = "disk_full"
)

// Done reports whether a command status is final.
func Done(status string) bool { return status != StatusQueued && status != StatusRunning }

// Run is the answer to a one-call run.
type Run struct {
	OK         bool            `json:"ok"`
	Result     json.RawMessage `json:"result"`
	Error      string          `json:"error,omitempty"`
	Command    string          `json:"command"`
	Sandbox    string          `json:"sandbox"`
	Status     string          `json:"status"`
	ExitCode   *int            `json:"exit_code"`
	Signal     string          `json:"signal,omitempty"`
	DurationMs int64           `json:"duration_ms"`
	Stdout     Output          `json:"stdout"`
	Stderr     Output          `json:"stderr"`
	Base       string          `json:"base"`
	Template   *TemplateRef    `json:"template,omitempty"`
	Limits     Limits          `json:"limits"`
	Isolation  string          `json:"isolation,omitempty"`
	TimeoutMs  int64           `json:"timeout_ms"`
	Usage      Usage           `json:"usage"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`

	// Replayed says the server answered from an earlier call with the same idempotency key.
	Replayed bool `json:"-"`
	// IdempotencyKey is the key the call was sent with.
	IdempotencyKey string `json:"-"`
}

// Decode decodes the run's result into v.
func (r *Run) Decode(v any) error { return json.Unmarshal(r.Result, v) }

// Sandbox is a sandbox record.
type Sandbox struct {
	ID        string            `json:"id"`
	Graph     string            `json:"graph"`
	Status    string            `json:"status"`
	OneCall   bool              `json:"one_call"`
	Base      string            `json:"base"`
	Image     string            `json:"image,omitempty"`
	Template  *TemplateRef      `json:"template,omitempty"`
	Limits    Limits            `json:"limits"`
	Isolation string            `json:"isolation,omitempty"`
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
	// ForkedFrom names the sandbox and snapshot a fork started from.
	ForkedFrom *ForkedFrom `json:"forked_from,omitempty"`
}

// Command is a command record.
type Command struct {
	ID             string          `json:"id"`
	Graph          string          `json:"graph"`
	Sandbox        string          `json:"sandbox"`
	Kind           string          `json:"kind"`
	Argv           []string        `json:"argv,omitempty"`
	Cwd            string          `json:"cwd,omitempty"`
	StdinBytes     int64           `json:"stdin_bytes,omitempty"`
	Language       string          `json:"language,omitempty"`
	Code           string          `json:"code,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Config         json.RawMessage `json:"config,omitempty"`
	Template       *TemplateRef    `json:"template,omitempty"`
	EnvNames       []string        `json:"env_names,omitempty"`
	TimeoutMs      int64           `json:"timeout_ms"`
	Status         string          `json:"status"`
	OK             bool            `json:"ok"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	ExitCode       *int            `json:"exit_code"`
	Signal         string          `json:"signal,omitempty"`
	Stdout         Output          `json:"stdout"`
	Stderr         Output          `json:"stderr"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Origin         Origin          `json:"origin"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	DurationMs     int64           `json:"duration_ms"`
}

// TemplateFile is a File of the graph a template copies into the workspace.
type TemplateFile struct {
	File string `json:"file"`
	Path string `json:"path"`
}

// Template is one version of a template.
type Template struct {
	ID          string          `json:"id"`
	Graph       string          `json:"graph"`
	Name        string          `json:"name"`
	Version     int             `json:"version"`
	Base        string          `json:"base"`
	Code        string          `json:"code,omitempty"`
	Limits      Limits          `json:"limits"`
	Isolation   string          `json:"isolation,omitempty"`
	TimeoutMs   int64           `json:"timeout_ms,omitempty"`
	Config      json.RawMessage `json:"config,omitempty"`
	Files       []TemplateFile  `json:"files,omitempty"`
	Description string          `json:"description,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by,omitempty"`
	// Versions lists the template's history (Get only), newest first.
	Versions []TemplateVersion `json:"versions,omitempty"`
}

// TemplateVersion is one line of a template's history.
type TemplateVersion struct {
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
	Isolation string    `json:"isolation,omitempty"`
}

// BaseTemplate is a built-in base: lbb/python, lbb/node or lbb/shell.
type BaseTemplate struct {
	Name     string            `json:"name"`
	Base     bool              `json:"base"`
	Language string            `json:"language"`
	Image    string            `json:"image"`
	Versions map[string]string `json:"versions"`
	Missing  []string          `json:"missing,omitempty"`
}

// TemplateList is the graph's templates (newest version of each) and the bases.
type TemplateList struct {
	Data       []Template     `json:"data"`
	NextCursor string         `json:"next_cursor,omitempty"`
	Bases      []BaseTemplate `json:"bases"`
}

// Key is an API key (its secret only when just created).
type Key struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	Graphs    []string   `json:"graphs"`
	Scopes    []string   `json:"scopes"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Secret    string     `json:"secret,omitempty"`
}

// AuditEntry is one state-changing call.
type AuditEntry struct {
	ID        string    `json:"id"`
	Graph     string    `json:"graph"`
	Key       string    `json:"key"`
	Method    string    `json:"method"`
	Route     string    `json:"route"`
	Path      string    `json:"path"`
	Target    string    `json:"target,omitempty"`
	Status    int       `json:"status"`
	RequestID string    `json:"request_id"`
	At        time.Time `json:"at"`
}
