// Package agent is the protocol between the host and the guest agent (lbb-agent), used by
// both ends. It runs as HTTP/2 with prior knowledge over the one channel a driver gives the
// sandbox (a socketpair end); HTTP/2 multiplexes many calls and full-duplex streams on it.
//
// Routes (all under the channel; none are reachable from anywhere else):
//
//	GET    /v1/ping                          → 204
//	POST   /v1/exec      header Lbb-Exec      start a process; body = stdin; response = frames
//	POST   /v1/run       body RunRequest      run(input, config); response = frames
//	POST   /v1/procs/{id}/signal  SignalRequest
//	GET    /v1/files?path=&recursive=1       → []FileEntry
//	DELETE /v1/files?path=&recursive=1
//	POST   /v1/files/mkdir?path=
//	GET    /v1/files/content?path=           → the bytes (streamed)
//	PUT    /v1/files/content?path=&mode=     body = the bytes (streamed); parents are made
//	POST   /v1/identity  Identity            hostname, machine id, entropy for a claimed slot
//
// Errors are JSON Error bodies with a stable Code.
package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Route paths.
const (
	PathPing        = "/v1/ping"
	PathExec        = "/v1/exec"
	PathRun         = "/v1/run"
	PathProcs       = "/v1/procs/" // + id + "/signal"
	PathFiles       = "/v1/files"
	PathFileContent = "/v1/files/content"
	PathMkdir       = "/v1/files/mkdir"
	PathIdentity    = "/v1/identity"

	// HeaderExec carries the ExecRequest as base64url JSON, so that the body is free for stdin.
	HeaderExec = "Lbb-Exec"

	// Workspace is where every file path resolves.
	Workspace = "/workspace"
)

// ExecRequest starts one process.
type ExecRequest struct {
	// ID is chosen by the host (the command id); Signal addresses the process by it.
	ID   string            `json:"id"`
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	// Cwd is inside /workspace (relative or absolute); default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Stdin says the request body carries stdin; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutMs kills the whole process group when it passes; 0 means none.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// RunRequest calls run(input, config) of code with a base's harness.
type RunRequest struct {
	ID string `json:"id"`
	// Language is "python", "node" or "shell".
	Language  string            `json:"language"`
	Code      string            `json:"code"`
	Input     json.RawMessage   `json:"input,omitempty"`
	Config    json.RawMessage   `json:"config,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
}

// SignalRequest signals a running process group.
type SignalRequest struct {
	// Signal is a name such as "SIGTERM" or "KILL"; default SIGKILL.
	Signal string `json:"signal,omitempty"`
}

// Identity is bound to a sandbox before user code runs.
type Identity struct {
	Hostname  string `json:"hostname,omitempty"`
	MachineID string `json:"machine_id,omitempty"`
	// Seed is fresh entropy, mixed into the kernel pool and any pre-started interpreter.
	Seed []byte `json:"seed,omitempty"`
}

// Started is the first frame of a process stream.
type Started struct {
	Pid int `json:"pid"`
}

// Exit is the last frame of a process stream.
type Exit struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// DiskFull says the workspace disk was full when the process ended.
	DiskFull   bool  `json:"disk_full,omitempty"`
	DurationMs int64 `json:"duration_ms"`
	// StartError says the process could not start (no such file, not executable…).
	StartError string `json:"start_error,omitempty"`

	// For runs: OK is true when run returned; Result is its JSON value; Error says why not.
	OK     bool            `json:"ok,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// FileEntry is one entry of a listing.
type FileEntry struct {
	// Path is relative to /workspace.
	Path  string `json:"path"`
	Name  string `json:"name"`
	Type  string `json:"type"` // "file", "dir", "symlink", "other"
	Size  int64  `json:"size"`
	Mode  string `json:"mode"` // octal permission bits, e.g. "0644"
	MTime string `json:"mtime"`
}

// Error codes shared by both ends.
const (
	CodePathOutside  = "path_outside_workspace"
	CodeNotFound     = "not_found"
	CodeIsDir        = "is_directory"
	CodeNotDir       = "not_directory"
	CodeExists       = "already_exists"
	CodeDiskFull     = "disk_full"
	CodeInvalid      = "invalid_argument"
	CodeInternal     = "internal"
	CodeNotSupported = "not_supported"
)

// Error is the body of every failed call.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// IsCode reports whether err is an agent Error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Frame kinds of a process stream.
const (
	FrameStarted byte = 's' // JSON Started
	FrameStdout  byte = '1'
	FrameStderr  byte = '2'
	FrameExit    byte = 'x' // JSON Exit; last frame
)

// MaxFrame bounds one frame's payload, so a reader never holds more than this per frame.
const MaxFrame = 64 << 10

// WriteFrame writes one frame: kind, big-endian uint32 length, payload.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("agent: frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame into buf (grown as needed, up to MaxFrame) and returns its kind
// and payload, which aliases buf.
func ReadFrame(r io.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("agent: frame of %d bytes exceeds %d", n, MaxFrame)
	}
	switch hdr[0] {
	case FrameStarted, FrameStdout, FrameStderr, FrameExit:
	default:
		return 0, nil, fmt.Errorf("agent: unknown frame kind %q", hdr[0])
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], buf, nil
}
