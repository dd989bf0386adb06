// Package hostagent is the host agent of one machine: the one layer that owns its live
// sandboxes. It holds the drivers, the warm pool, the guest agents' clients, the registry and
// state machine of every sandbox it runs (started, frozen, checkpointed, stopped), their
// expiry timers, the commands running in them (output captures, stdin pipes, signals) and file
// transfer. The control plane (internal/control) keeps records, policy, idempotency, keys,
// templates and retention, and reaches a machine only through the Host interface below.
//
// Host is the wire boundary: Local implements it in the server's own process (the default,
// one binary), and internal/hostagent/remote serves the same interface over HTTP/2 to a
// control plane in another process or on another machine. Every method therefore takes and
// returns plain values (JSON on the wire), byte streams as io.Reader, and errors classified
// with internal/errdefs (the guest agent's codes are mapped inside the host agent).
//
// docs/architecture.md draws the layers and the path of a run through them.
package hostagent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/output"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Host is what the control plane asks of one machine. Sandbox and command ids are chosen by
// the control plane (they name records), except where a warm pool hands over a sandbox
// (Sandbox.ID then says the id it has).
type Host interface {
	// Info describes the machine: its image and the drivers it offers.
	Info(ctx context.Context) (Info, error)

	// Claim starts acquiring the sandbox of a one-call run in the background and returns at
	// once, so that the control plane can commit the run's reservation meanwhile. The run
	// (Run with the same SandboxID) takes it; Unclaim destroys it unused.
	Claim(ctx context.Context, req RunRequest) error
	Unclaim(ctx context.Context, sandboxID string) error
	// Run runs req in a sandbox of its own (the claimed one, else a new one) and answers once
	// the command has ended. The sandbox is kept until Release, so that the caller records and
	// answers the run before the sandbox's teardown competes with it.
	Run(ctx context.Context, req RunRequest) (RunResult, error)
	// Release destroys a one-call run's sandbox and says how its life ended.
	Release(ctx context.Context, sandboxID string) (Ending, error)

	// Create starts a long-lived sandbox (from the warm pool when req.Warm and one is ready:
	// the answer's ID is then the pool's). Template Files are in its workspace when it answers.
	Create(ctx context.Context, req CreateRequest) (Sandbox, error)
	// Resume starts a stopped sandbox again on its disk, thaws a frozen one, or restores a
	// checkpointed one. Resuming a running sandbox answers it.
	Resume(ctx context.Context, req ResumeRequest) (Sandbox, error)
	// Stop ends a sandbox's processes and commands (they end killed) and keeps its disk; a
	// paused one is thawed or its checkpoint dropped first. It answers the usage of the life
	// that ended. Stopping a stopped sandbox is no error.
	Stop(ctx context.Context, id string) (store.Usage, error)
	// ArchiveWorkspace streams a stopped sandbox's disk, compressed, to the blob store and
	// answers where it is, so that a resume on any host can restore it
	// (ResumeRequest.Workspace). A driver without disks, or a host without a blob store,
	// answers a not_supported error.
	ArchiveWorkspace(ctx context.Context, id string) (Workspace, error)
	// Destroy ends a sandbox in any state and removes its disk and checkpoint (its snapshots
	// go by DeleteSnapshot). An unknown id is no error.
	Destroy(ctx context.Context, id string) (store.Usage, error)
	// Pause parks a running sandbox with no command running: a checkpoint with memory where
	// its driver can (RAM freed, survives a restart), else the freezer.
	Pause(ctx context.Context, id string) (Paused, error)
	// Snapshot saves a running sandbox whole under snapshotID; the sandbox keeps running.
	// With a blob store the snapshot's files are archived there too (SnapshotInfo.Archive),
	// and a Fork on a host without them restores them (ForkRequest.Archive); likewise a
	// checkpoint of Pause (Paused.Archive, ResumeRequest.Checkpoint).
	Snapshot(ctx context.Context, id, snapshotID string) (SnapshotInfo, error)
	// DeleteSnapshot removes a snapshot's files; an unknown one is no error.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// Fork starts a new sandbox from a snapshot (or, without one, from the source as it is now).
	Fork(ctx context.Context, req ForkRequest) (Sandbox, error)
	// Usage is what a running sandbox used since it (last) started.
	Usage(ctx context.Context, id string) (store.Usage, error)
	// SetExpiry arms the sandbox's expiry timer: at at the host agent reports EventExpired,
	// and the control plane ends the sandbox (Destroy) with its records. The zero time
	// clears it.
	SetExpiry(ctx context.Context, id string, at time.Time) error
	// SetGrant gives the in-sandbox API of a sandbox started with Egress.API the credential
	// its calls carry (nil takes it away). It lives in the host agent's memory only.
	SetGrant(ctx context.Context, id string, grant *egress.Grant) error

	// Exec starts a command in a running sandbox and answers once its process runs (or could
	// not start: Wait then says why).
	Exec(ctx context.Context, req ExecRequest) error
	// Wait answers how a command ended, once it has.
	Wait(ctx context.Context, commandID string) (CommandEnd, error)
	// Signal signals a running command's process group ("" is SIGKILL); the command then ends
	// killed.
	Signal(ctx context.Context, commandID, signal string) error
	// Resize sets the terminal size of a running command started with a Pty.
	Resize(ctx context.Context, commandID string, size PtySize) error
	// WriteStdin streams r to a command started with StdinOpen, and closes its stdin when
	// close is set.
	WriteStdin(ctx context.Context, commandID string, r io.Reader, close bool) (StdinResult, error)
	// ReadOutput is a follower's cursor on a running command's output (stream "stdout" or
	// "stderr"): kept bytes from offset off on, at most max (0: any), waiting while there are
	// none yet; start > off says the bytes between were not kept. With max < 0 it does not
	// wait: it answers what is kept now (no data when there is none yet). At the end of the
	// stream it answers io.EOF; a command that is not running here is errdefs NotFound. An
	// off below 0 reads from -off bytes before the end, within what the tail keeps: the
	// recent output a terminal shows when it is re-attached.
	ReadOutput(ctx context.Context, commandID, stream string, off int64, max int) (start int64, data []byte, err error)
	// ReadHeld takes the held output of a command started with Hold (ExecRequest): stdout and
	// stderr from req's offsets on, in the order the process wrote them, waiting while there
	// is none; the host agent lets go of the bytes before those offsets. When req.Release is
	// set it lets go of the hold (its reader went away) and answers nothing. See HeldRead.
	ReadHeld(ctx context.Context, req HeldRead) (HeldOutput, error)

	// Files in a running sandbox's workspace (paths relative to /workspace or absolute in it).
	WriteFile(ctx context.Context, sandboxID, path string, r io.Reader) (FileEntry, error)
	OpenFile(ctx context.Context, sandboxID, path string) (FileEntry, io.ReadCloser, error)
	StatFile(ctx context.Context, sandboxID, path string) (FileEntry, error)
	ListFiles(ctx context.Context, sandboxID, path string, recursive bool) ([]FileEntry, error)
	RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error
	MakeDir(ctx context.Context, sandboxID, path string) (FileEntry, error)

	// DialPort connects to a port on a running sandbox's loopback (127.0.0.1, else ::1)
	// through its channel: what a preview of the port carries. Nothing listening there is
	// errdefs Unavailable. The connection lasts until its Close or the sandbox's end.
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)

	// Sandboxes lists the ids of every sandbox the machine holds state for (any state).
	Sandboxes(ctx context.Context) ([]string, error)
	// Reap destroys every sandbox the machine holds that keep does not name, and answers their
	// ids: a restarted control plane calls it so that nothing a crash left behind stays.
	// Checkpoints and snapshots whose ids keep does not name go too.
	Reap(ctx context.Context, keep []string) ([]string, error)
	// Events delivers what happened to sandboxes by themselves (their init died, their expiry
	// passed) until ctx ends. One subscriber at a time.
	Events(ctx context.Context) (<-chan Event, error)
}

// Codes of errors a Host answers.
const (
	// CodeUnreachable: the host agent (in another process) could not be reached, or the
	// connection to it broke during the call.
	CodeUnreachable = "host_unreachable"
	// CodeHostLost: the host holding the sandbox is lost (a fleet, internal/fleet); what
	// ran there is gone.
	CodeHostLost = "host_lost"
)

// Locator is an optional ability of a Host made of several machines (internal/fleet): which
// of them holds a sandbox, for its record ("" when none does).
type Locator interface {
	HostOf(sandboxID string) string
}

// Info describes a machine.
type Info struct {
	// Default is the driver a sandbox gets when it names none.
	Default string `json:"default"`
	// Offered are the drivers this machine runs; Unavailable says why the others are not.
	Offered     []string          `json:"offered"`
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// Image is the base image sandboxes run on.
	Image Image `json:"image"`
	// Boot names this life of the host agent's process: a new one after a restart, whose
	// sandboxes' live state (processes, commands, memory) is gone (internal/fleet).
	Boot string `json:"boot,omitempty"`
	// Capacity is what the machine has and runs now, for placement.
	Capacity Capacity `json:"capacity"`
	// Blobs names the blob store when other machines can reach it too (blobs.Shared): hosts
	// that name the same one can restore each other's workspace archives. "" for a local
	// directory.
	Blobs string `json:"blobs,omitempty"`
}

// Capacity is what a machine has and how much of it its sandboxes take now.
type Capacity struct {
	CPUs      int   `json:"cpus"`
	MemoryMiB int64 `json:"memory_mib"`
	// Sandboxes is how many sandboxes run here now (one-call runs' and long-lived ones).
	Sandboxes int `json:"sandboxes"`
	// DiskFreeMiB is the free space of the data directory's filesystem (sandboxes' disks,
	// checkpoints, snapshots).
	DiskFreeMiB int64 `json:"disk_free_mib"`
	// MemoryFreeMiB is the memory available for new work now (/proc/meminfo MemAvailable).
	MemoryFreeMiB int64 `json:"memory_free_mib,omitempty"`
	// Pool is the warm pool's state on a host agent of its own (lbb host): off, waiting (for
	// the control plane's first reap) or on.
	Pool string `json:"pool,omitempty"`
}

// Registration is what a host that joins a control plane says of itself (POST
// /v1/hosts/register, lbb host --control), with its token as the bearer token.
type Registration struct {
	ID string `json:"id"`
	// URL is where control planes call its host agent.
	URL string `json:"url"`
	// Boot changes when the host agent restarts.
	Boot     string   `json:"boot,omitempty"`
	Capacity Capacity `json:"capacity"`
	Offered  []string `json:"offered,omitempty"`
}

// Registered is a control plane's answer to a Registration: register again every
// HeartbeatSeconds.
type Registered struct {
	ID               string  `json:"id"`
	HeartbeatSeconds float64 `json:"heartbeat_seconds"`
}

// Registrar is a Host that hosts join (a fleet of lbb serve --hosts remote).
type Registrar interface {
	Register(ctx context.Context, token string, r Registration) (Registered, error)
}

// Image is the base image of a machine.
type Image struct {
	ID       string            `json:"id"`
	Versions map[string]string `json:"versions,omitempty"`
	Missing  []string          `json:"missing,omitempty"`
}

// File is a file put into a workspace from the graph's blob store: Path inside /workspace,
// the content's sha256 (the host agent reads it from the blob store it shares with the
// control plane).
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// RunRequest is one run(input, config) in a sandbox of its own.
type RunRequest struct {
	SandboxID string         `json:"sandbox_id"`
	CommandID string         `json:"command_id"`
	Limits    runtime.Limits `json:"limits"`
	// Runtime names the driver ("" is the machine's default).
	Runtime string `json:"runtime,omitempty"`
	// Layer is the key of the template layer the sandbox runs on over the image ("": none);
	// see LayerBuilder.
	Layer    string `json:"layer,omitempty"`
	Language string `json:"language"`
	Code     string `json:"code"`
	// Script runs Code as a plain program (agent.RunRequest.Script).
	Script bool            `json:"script,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Config json.RawMessage `json:"config,omitempty"`
	// Env values reach the code and are masked in everything answered.
	Env     map[string]string `json:"env,omitempty"`
	Timeout time.Duration     `json:"timeout"`
	// HeadBytes and TailBytes are how much of each stream to keep.
	HeadBytes int    `json:"head_bytes"`
	TailBytes int    `json:"tail_bytes"`
	Files     []File `json:"files,omitempty"`
	// Egress is the run's route out; nil: none.
	Egress *Egress `json:"egress,omitempty"`
}

// RunResult is how a one-call run ended, ready for its records.
type RunResult struct {
	CommandEnd
	// SandboxStarted is when its sandbox started (for a pooled one: before the claim).
	SandboxStarted time.Time `json:"sandbox_started"`
	// EndReason says why the sandbox ended (store.End*).
	EndReason string `json:"end_reason"`
	// Usage is the sandbox's, up to the command's end.
	Usage store.Usage `json:"usage"`
	// CommandUsage is the command's: the sandbox's CPU time and reserved memory while the
	// command ran (what its budgets count; the sandbox's start is not the command's).
	CommandUsage store.Usage `json:"command_usage"`
}

// Ending is how a sandbox's life ended.
type Ending struct {
	At    time.Time   `json:"at"`
	Usage store.Usage `json:"usage"`
	// Error says the sandbox could not be destroyed cleanly.
	Error string `json:"error,omitempty"`
}

// CreateRequest is a long-lived sandbox to start.
type CreateRequest struct {
	ID      string         `json:"id"`
	Limits  runtime.Limits `json:"limits"`
	Runtime string         `json:"runtime,omitempty"`
	// Layer is the template layer it runs on (RunRequest.Layer); Warm hands over a bare slot
	// of the layer when the pool keeps one (its demand asks for them).
	Layer string `json:"layer,omitempty"`
	// Warm lets the machine hand over a ready sandbox of its warm pool (with the pool's id).
	Warm  bool   `json:"warm,omitempty"`
	Files []File `json:"files,omitempty"`
	// Env reaches every command of the sandbox; its values are masked in output and never
	// stored. It lives as long as the host agent's process.
	Env map[string]string `json:"env,omitempty"`
	// Egress is what the sandbox may reach beyond itself; nil: nothing.
	Egress *Egress `json:"egress,omitempty"`
	// Git is cloned into the workspace before Create answers; a failed clone fails it.
	Git *store.GitClone `json:"git,omitempty"`
	// Kernel asks, with Warm, for a slot whose code context interpreter of this language
	// (codeint.Argv) already runs: Sandbox.Kernel names it, a held command with its stdin
	// open (as ExecRequest StdinOpen and Hold), when the pool had one.
	Kernel string `json:"kernel,omitempty"`
}

// ResumeRequest starts a stopped or paused sandbox again.
type ResumeRequest struct {
	ID      string         `json:"id"`
	Limits  runtime.Limits `json:"limits"`
	Runtime string         `json:"runtime,omitempty"`
	// Layer is the template layer it was created on (mounted again after a restart).
	Layer string `json:"layer,omitempty"`
	// Env replaces the sandbox's env when the host agent no longer has it (after a restart).
	Env map[string]string `json:"env,omitempty"`
	// Egress likewise replaces its egress (Used: what its earlier lives used).
	Egress *Egress `json:"egress,omitempty"`
	// Workspace is the archive of its disk made at its last stop, if any: restored when this
	// host's own copy of the disk is gone or is not that archive's (the sandbox ran elsewhere
	// since).
	Workspace *Workspace `json:"workspace,omitempty"`
	// Checkpoint is the archive of its pause's checkpoint (Paused.Archive), if any: restored
	// when this host has no checkpoint of it (it was paused on another host).
	Checkpoint *Workspace `json:"checkpoint,omitempty"`
}

// Workspace is a stopped sandbox's disk archived in the blob store (internal/diskarchive):
// the blob's SHA-256 and size, and the size of the disk it holds.
type Workspace = store.WorkspaceArchive

// ForkRequest starts sandbox ID from SnapshotID, or from Source as it is now.
type ForkRequest struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// Archive is the snapshot's archive (SnapshotInfo.Archive), if any: restored when this
	// host has no files of the snapshot (it was taken on another host).
	Archive *Workspace        `json:"archive,omitempty"`
	Limits  runtime.Limits    `json:"limits"`
	Runtime string            `json:"runtime,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Egress  *Egress           `json:"egress,omitempty"`
	// Commands are the source's commands that were running at the snapshot, to carry on in
	// the fork as commands of its own; the fork's copies of any others end.
	Commands []ForkCommand `json:"commands,omitempty"`
}

// ForkCommand is a fork's copy of its source's command Source, carried on as command ID: its
// output from the fork on.
type ForkCommand struct {
	Source    string        `json:"source"`
	ID        string        `json:"id"`
	Timeout   time.Duration `json:"timeout"`
	HeadBytes int           `json:"head_bytes"`
	TailBytes int           `json:"tail_bytes"`
	// Hold keeps the copy's output for its starter, as ExecRequest.Hold (a code context's
	// interpreter).
	Hold bool `json:"hold,omitempty"`
}

// Sandbox is a started sandbox.
type Sandbox struct {
	ID        string    `json:"id"`
	Runtime   string    `json:"runtime"`
	StartedAt time.Time `json:"started_at"`
	// Commands are, for a fork, the ids of ForkRequest.Commands it carries on (running).
	Commands []string `json:"commands,omitempty"`
	// Kernel is the command id of the interpreter CreateRequest.Kernel asked for, when it
	// came running with the sandbox; "" when the caller must start one.
	Kernel string `json:"kernel,omitempty"`
}

// Paused says how a sandbox was parked.
type Paused struct {
	// Mode is store.PauseCheckpoint or store.PauseFreeze.
	Mode  string      `json:"mode"`
	Usage store.Usage `json:"usage"`
	// Bytes is the size of the checkpoint on disk (0 for a frozen sandbox).
	Bytes int64 `json:"bytes,omitempty"`
	// Archive is the checkpoint archived in the blob store, so that the sandbox resumes on
	// any host sharing it (nil: frozen, no blob store, or the archive failed).
	Archive *Workspace `json:"archive,omitempty"`
}

// SnapshotInfo describes a saved snapshot.
type SnapshotInfo struct {
	ID    string `json:"id"`
	Bytes int64  `json:"bytes"`
	// Usage is that of the source's life the snapshot ended (it runs on restored).
	Usage store.Usage `json:"usage"`
	// Sandbox is the source as it runs on after the snapshot.
	Sandbox Sandbox `json:"sandbox"`
	// Archive is the snapshot's files archived in the blob store, so that a fork starts on
	// any host sharing it (nil: no blob store, or the archive failed).
	Archive *Workspace `json:"archive,omitempty"`
}

// ExecRequest is one command in a running sandbox: a process (Argv), or with Run a call of
// run(input, config) next to the workspace's files.
type ExecRequest struct {
	SandboxID string            `json:"sandbox_id"`
	CommandID string            `json:"command_id"`
	Argv      []string          `json:"argv,omitempty"`
	Run       *RunCall          `json:"run,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Timeout   time.Duration     `json:"timeout"`
	// Stdin is written first; then end of file unless StdinOpen keeps it open for WriteStdin.
	Stdin     []byte `json:"stdin,omitempty"`
	StdinOpen bool   `json:"stdin_open,omitempty"`
	HeadBytes int    `json:"head_bytes"`
	TailBytes int    `json:"tail_bytes"`
	// Hold keeps every byte of the output, from the first, for the one reader who started
	// the command (ReadHeld), and slows the process rather than dropping any: the host agent
	// holds at most HoldBytes unread, then stops reading the process's output, so that the
	// process waits in write(2). A hold nobody reads is let go after HoldIdle (see ReadHeld).
	Hold bool `json:"hold,omitempty"`
	// Pty runs the process on a terminal of this size (a terminal's command): its output is
	// stdout alone, its stdin what is typed (StdinOpen).
	Pty *PtySize `json:"pty,omitempty"`
}

// PtySize is a terminal's size in characters.
type PtySize = agent.PtySize

// HoldBytes is how much unread output the host agent holds for a command started with Hold.
const HoldBytes = 1 << 20

// HoldIdle is how long a held command may wait for its reader, with nobody reading, before
// the host agent lets go of the hold and the process goes on: the reader went away (a control
// plane that crashed, a connection that broke without a word). A reader that went away in a
// way the API sees is let go sooner (ReadHeld with Release).
const HoldIdle = 2 * time.Minute

// HeldRead is one read of a held command's output: from the offsets Stdout and Stderr on (the
// bytes the reader has already taken: the host agent lets go of those), at most Max bytes (0:
// any). Reading again from the same offsets answers the same bytes.
type HeldRead struct {
	CommandID string `json:"command_id"`
	Stdout    int64  `json:"stdout"`
	Stderr    int64  `json:"stderr"`
	Max       int    `json:"max,omitempty"`
	// Release lets go of the hold: its reader went away.
	Release bool `json:"release,omitempty"`
}

// HeldOutput is what ReadHeld answers: pieces of output in the order they were written, or,
// when none are left, Ended (all of it was read) or Released (from some point on the output
// was not held; ReadOutput follows the rest, as far as it is kept).
type HeldOutput = output.Held

// OutputPiece is a run of bytes of stdout or stderr, and where it starts in its stream.
type OutputPiece = output.Piece

// RunCall is run(input, config) of code in a language.
type RunCall struct {
	Language string          `json:"language"`
	Code     string          `json:"code"`
	Input    json.RawMessage `json:"input,omitempty"`
	Config   json.RawMessage `json:"config,omitempty"`
}

// CommandEnd is how a command ended.
type CommandEnd struct {
	// Status is a command status (store.Command*).
	Status   string          `json:"status"`
	OK       bool            `json:"ok"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Signal   string          `json:"signal,omitempty"`
	Stdout   store.Output    `json:"stdout"`
	Stderr   store.Output    `json:"stderr"`
	// StdinBytes is how many bytes its stdin got.
	StdinBytes int64 `json:"stdin_bytes"`
	// Egress is what the sandbox's egress carried while the command ran.
	Egress *store.EgressUsage `json:"egress,omitempty"`
	// VCPUMs is the CPU time the sandbox used while the command ran (its cgroup's, read just
	// before the start and after the end); nil when it could not be read.
	VCPUMs  *float64  `json:"vcpu_ms,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Infrastructure is a failure of the machine (the sandbox did not start, the agent broke
	// off), already folded into Status and Error, for the log.
	Infrastructure string `json:"infrastructure,omitempty"`
}

// StdinResult is what one WriteStdin did.
type StdinResult struct {
	// Bytes is how many bytes this call wrote; Total how many the command's stdin got.
	Bytes  int64 `json:"bytes"`
	Total  int64 `json:"total"`
	Closed bool  `json:"closed"`
}

// FileEntry is a file or directory in a workspace (Path relative to /workspace), as the
// guest agent lists it.
type FileEntry = agent.FileEntry

// Types of a FileEntry.
const (
	TypeFile    = agent.TypeFile
	TypeDir     = agent.TypeDir
	TypeSymlink = agent.TypeSymlink
)

// Event kinds.
const (
	// EventDied: the sandbox's init exited by itself (out of memory?); the host agent stopped
	// it, its disk kept.
	EventDied = "died"
	// EventExpired: the sandbox's expiry (SetExpiry) passed; the control plane ends it.
	EventExpired = "expired"
	// EventHostLost: the host holding the sandbox stopped answering, or restarted (a fleet
	// of hosts, internal/fleet, says so): what ran there is gone, its disk may come back.
	EventHostLost = "host_lost"
)

// Event is something that happened to a sandbox by itself.
type Event struct {
	Kind    string      `json:"kind"`
	Sandbox string      `json:"sandbox"`
	Error   string      `json:"error,omitempty"`
	Usage   store.Usage `json:"usage"`
	At      time.Time   `json:"at"`
	// Egress is the refused destination of an EventEgressRefused.
	Egress *EgressRefusal `json:"egress,omitempty"`
}
