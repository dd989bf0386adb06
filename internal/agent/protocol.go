// Package agent is the protocol between the host and the guest agent (lbb-agent), used by
// both ends. It runs as HTTP/2 with prior knowledge over the one channel a driver gives the
// sandbox (a socketpair end); HTTP/2 multiplexes many calls and full-duplex streams on it.
//
// Routes (all under the channel; none are reachable from anywhere else):
//
//	GET    /v1/ping                          → 204
//	POST   /v1/exec      header Lbb-Exec      start a process; body = stdin; response = frames
//	POST   /v1/run       body RunRequest      run(input, config); response = frames
//	POST   /v1/procs/{id}/signal  SignalRequest → 204
//	POST   /v1/procs/{id}/resize  PtySize    a process on a pty (ExecRequest.Pty): its new size → 204
//	GET    /v1/files?path=&recursive=1       → []FileEntry (a path that is no directory: its entry)
//	DELETE /v1/files?path=&recursive=1       → 204
//	POST   /v1/files/mkdir?path=             → 204; parents are made
//	GET    /v1/files/content?path=           → the bytes (streamed, Content-Length set)
//	PUT    /v1/files/content?path=&mode=     body = the bytes (streamed); parents are made → FileEntry
//	POST   /v1/identity  Identity            hostname, machine id, entropy for a claimed slot → 204
//	POST   /v1/prestart  PrestartRequest     start a run() interpreter that waits for its run → 204
//	POST   /v1/listen    ListenRequest       serve listeners in the sandbox → 200, header
//	                                         Lbb-Listening (Listening), then ConnRequest lines
//	POST   /v1/conns/{id}/accept             body = bytes to the connection; response = bytes from it
//	POST   /v1/conns/{id}/refuse  Refusal    → 204
//	POST   /v1/ports/{port}/connect          body = bytes to a connection to the port on the
//	                                         sandbox's loopback; response = frames from it
//	                                         (as accept); nothing listening, or MaxPortStreams
//	                                         open already: port_refused (502);
//	                                         a port of the agent's own listeners (Listen):
//	                                         permission_denied (403)
//
// Errors are JSON Error bodies with a stable Code and the status StatusOf(Code). A file path
// is relative to /workspace or absolute under it; the agent resolves it with openat2
// RESOLVE_BENEATH so that neither ".." nor any symlink leaves the workspace
// (path_outside_workspace). Absolute symlinks are refused too, even to a place inside.
//
// A process stream (exec and run) answers 200 and then frames: Started, any number of
// Stdout, Stderr and (for runs) Result chunks as they come, and Exit, always last. A process
// that cannot start sends no Started frame: its stream is one Exit frame with StartError.
// Output flows with backpressure end to end: a process whose host does not read blocks in
// write(2), and the agent holds at most one frame per stream.
//
// Streams the guest starts. HTTP/2 streams are opened by the host, the client on the channel.
// When a process inside connects to one of the listeners a Listen call serves on the
// sandbox's loopback (the egress proxies, the forwarded API), the guest needs a stream: it
// writes a ConnRequest line (NDJSON) on the Listen call's answer, and the host answers it by
// opening POST /v1/conns/{id}/accept, a full-duplex stream whose request body carries what
// the host sends the connection (its end half-closes that direction) and whose response body
// what the connection sends, as frames (FrameData, then FrameEnd at the connection's end of
// sending: an HTTP/2 response cannot end while its request body goes on), or with POST /v1/conns/{id}/refuse and a Refusal,
// which the listener turns into what its client understands (an HTTP 403 with the reason, a
// SOCKS reply). A connection not answered within ConnAnswerTimeout is refused. The listeners
// live as long as the Listen call: its end (the host's, or the channel's) closes them and
// refuses what is pending, while accepted connections run on to their ends. One Listen call
// at a time: a new one (after a reconnect) replaces the last. A stream the host starts toward
// something inside (a terminal, a port) is the mirror image and needs nothing of this.
//
// The agent speaks first on the channel: Hello, then HTTP/2 (the client sends the HTTP/2
// preface after reading Hello). So a driver can wait for the agent with WaitReady, which
// peeks without consuming, and then hand the channel to NewClient.
package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
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
	PathPrestart    = "/v1/prestart"
	PathListen      = "/v1/listen"
	PathConns       = "/v1/conns/" // + id + "/accept" or "/refuse"
	PathPorts       = "/v1/ports/" // + port + "/connect"
	PathTimeouts    = "/v1/timeouts"
	// PathDropDetached kills the detachable processes whose streams wait for an attach.
	PathDropDetached = "/v1/procs-detached/drop"

	// HeaderAttach carries the AttachRequest of POST /v1/procs/{id}/attach, as unpadded
	// base64url JSON (the body is the process's stdin from then on).
	HeaderAttach = "Lbb-Attach"

	// HeaderListening carries the Listening of a Listen call's answer, as JSON.
	HeaderListening = "Lbb-Listening"

	// HeaderExec carries the ExecRequest as unpadded base64url JSON, so that the body is free
	// for stdin.
	HeaderExec = "Lbb-Exec"

	// Workspace is where every file path resolves.
	Workspace = "/workspace"

	// Hello is what the agent writes on the channel when it is ready, before HTTP/2 starts.
	// Its version changes when the protocol changes incompatibly.
	Hello = "lbb-agent/1\n"
)

// ExecRequest starts one process.
type ExecRequest struct {
	// ID is chosen by the host (the command id); Signal addresses the process by it.
	ID string `json:"id"`
	// Argv[0] is looked up in the process's PATH unless it holds a slash.
	Argv []string `json:"argv"`
	// Env is merged over the default environment: PATH (the standard one), HOME=/root,
	// LANG=C.UTF-8, MPLBACKEND=Agg, PYTHONDONTWRITEBYTECODE=1. Nothing of the agent's own
	// environment is passed on but TMPDIR, which only the local driver (processes on the
	// host) sets, to the sandbox's own directory.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is relative to /workspace (resolved beneath it, like file paths) or absolute;
	// default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Stdin says the request body carries stdin; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutMs kills the whole process group when it passes; 0 means none.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Detachable keeps the process when the channel ends, for an attach on the next one
	// (POST /v1/procs/{id}/attach); nobody attaching within two minutes kills it.
	Detachable bool `json:"detachable,omitempty"`
	// Pty runs the process on a new pseudo-terminal of this size, as the leader of a new
	// session whose controlling terminal it is: stdin, stdout and stderr are the terminal,
	// the output comes as FrameStdout only, and the body's bytes are what is typed (the line
	// discipline turns ^C into SIGINT for the foreground job). The body's end leaves the
	// terminal open. TERM defaults to xterm-256color.
	Pty *PtySize `json:"pty,omitempty"`
}

// PtySize is the size of a terminal, in characters.
type PtySize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// RunRequest calls run(input, config) of code with a base's harness. Input defaults to null
// and Config to {}. The harnesses:
//
//   - "python": the code is executed as a fresh module named __lbb__ (so an
//     `if __name__ == "__main__":` block does not run); its run is called, and awaited with
//     asyncio.run when it is async. numpy scalars and arrays, pandas DataFrames (records),
//     Series (a dict keyed by the index, like pandas' to_json), Index (a list), Timestamps,
//     datetime64 and datetimes (ISO 8601), timedeltas (seconds) and dataclasses are
//     converted; NaN, infinities, NaT and NA become null; sets and tuples become lists;
//     anything else that is not JSON is an error naming its type and where it is in the
//     result ("a value of type object at $.a[1]"). numpy and pandas are never imported by
//     the harness: a result can only hold their values when the code imported them.
//     The code's directory (the cwd) is on sys.path; stdout is line-buffered.
//   - "node": the code is first compiled as CommonJS (a top-level function run,
//     module.exports.run or module.exports = fn); when that fails on ES module syntax
//     (import, export, top-level await) it is imported as an ES module from a temporary .mjs
//     beside the working directory (export function run, or export default). The result is
//     JSON.stringify'd: undefined becomes null, BigInt is an error.
//   - "shell": bash runs the code with the input JSON on stdin, in $LBB_INPUT (unset when
//     too large for the environment) and in the file $LBB_INPUT_FILE; the config JSON in
//     $LBB_CONFIG; the result is what the script writes to the file $LBB_RESULT: JSON when it
//     parses, else a string (one trailing newline removed), null when nothing was written.
//
// The python and node harnesses get the request on fd 3 and answer on fd 4 (a status line,
// then the result), so stdout and stderr are the user's alone. The status line names the
// code the harness exits with; once the harness has closed fd 4, stdout and stderr (after the
// run's threads, atexit or 'exit' handlers), the run's Exit is sent without waiting for the
// interpreter to finish dying, which takes milliseconds with numpy and pandas mapped. A
// child of the run that keeps stdout or stderr open makes the agent wait for the exit. A run is OK when run
// returned (or the script exited 0) and its result is JSON; otherwise Exit.Error says why
// (the exception line, "timed out after N ms", "exit code N"), and the traceback or stack
// is on stderr.
type RunRequest struct {
	ID string `json:"id"`
	// Language is LangPython, LangNode or LangShell.
	Language string `json:"language"`
	Code     string `json:"code"`
	// Script runs Code as a plain program of its language (python3 -c, node -e, bash -c)
	// rather than through the run(input, config) harness: its exit code is the outcome.
	Script    bool              `json:"script,omitempty"`
	Input     json.RawMessage   `json:"input,omitempty"`
	Config    json.RawMessage   `json:"config,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
}

// SignalRequest signals a running process group.
type SignalRequest struct {
	// Signal is a name such as "SIGTERM" or "KILL", or a number; default SIGKILL.
	Signal string `json:"signal,omitempty"`
}

// Identity is bound to a sandbox before user code runs.
type Identity struct {
	Hostname  string `json:"hostname,omitempty"`
	MachineID string `json:"machine_id,omitempty"`
	// Seed is fresh entropy, mixed into the kernel pool and any pre-started interpreter.
	Seed []byte `json:"seed,omitempty"`
}

// PrestartRequest starts the harness interpreter of a language ahead of its run, for a warm
// pool: the interpreter loads the harness, imports Imports, says it is ready (the call
// answers 204 then, not before) and blocks until a Run of the same language hands it its
// request; that Run spawns nothing. A pre-started interpreter serves one run, then exits.
//
// What the run sees differs from a spawned interpreter only in this: the imported modules
// are already in sys.modules (python) or the require cache (node); the run's Env and Cwd are
// applied by the harness (os.environ, os.chdir; process.env, process.chdir) rather than at
// exec; and the interpreter was seeded before the claim. Before user code runs, the python
// harness reseeds random and numpy's global generator from os.urandom (which the host has
// mixed fresh entropy into with SetIdentity). What cannot be reseeded: Python's str/bytes
// hash salt (PYTHONHASHSEED, fixed at start) and V8's Math.random state (no API); both were
// drawn from the kernel's CSPRNG when this interpreter started, so they differ between
// interpreters but were chosen before the claim.
//
// A Run whose Env sets a variable that an interpreter reads only at start (PYTHON*, NODE_*,
// LD_*, LC_*, LANG, TZ, OMP_*, OPENBLAS_*, MKL_*, UV_*, MALLOC_*) spawns a fresh
// interpreter instead, as does a Run of another language; either way, every waiting
// interpreter the Run does not use is killed (it would never serve). Output a pre-started
// interpreter writes before its run (import warnings) is discarded, never part of the run.
type PrestartRequest struct {
	// Language is LangPython or LangNode.
	Language string `json:"language"`
	// Imports are module names (python: importlib.import_module; node: require) loaded
	// before the interpreter waits. nil means the default: numpy and pandas for python,
	// nothing for node. A module that fails to import is skipped: the run that imports it
	// sees the error itself.
	Imports []string `json:"imports"`
	// ZygoteSocket, when set (python only), adopts an interpreter forked by the host's zygote
	// instead of starting one: the agent listens on this abstract unix socket name (in the
	// sandbox's network namespace), accepts one connection from uid 0 of the sandbox, takes
	// the interpreter's pipe ends passed over it (SCM_RIGHTS) and waits for its "ready" as
	// for one it started. See docs/architecture.md, "Zygote".
	ZygoteSocket string `json:"zygote_socket,omitempty"`
}

// ListenRequest opens the listeners a sandbox's egress and API need, on the sandbox's
// loopback (the sandbox has no other network device). Each address is host:port, "" for a
// listener not served; port 0 picks one (Listening says which).
//
//   - Proxy: an HTTP proxy: CONNECT tunnels, and requests in absolute form (http_proxy for
//     http:// URLs), each to the host and port the client names, as a ConnRequest of kind
//     ConnProxy; names are never resolved inside.
//   - SOCKS: a SOCKS5 proxy (no authentication, CONNECT), likewise.
//   - API: a plain TCP listener whose connections are ConnRequests of kind ConnAPI.
//
// While the call lasts, every process started gets, beside Env: for Proxy, HTTP_PROXY and
// HTTPS_PROXY (and lower case) http://<proxy>, NODE_USE_ENV_PROXY=1 (Node's fetch), and
// NO_PROXY=localhost,127.0.0.1,::1 (the sandbox's own services stay local); for SOCKS,
// ALL_PROXY socks5h://<socks> (h: the proxy resolves); for API, LBB_URL http://<api>.
type ListenRequest struct {
	Proxy string `json:"proxy,omitempty"`
	SOCKS string `json:"socks,omitempty"`
	API   string `json:"api,omitempty"`
	// Env is added to the environment of the processes started while the call lasts.
	Env map[string]string `json:"env,omitempty"`
}

// Listening is what a Listen call serves: the bound addresses.
type Listening struct {
	Proxy string `json:"proxy,omitempty"`
	SOCKS string `json:"socks,omitempty"`
	API   string `json:"api,omitempty"`
}

// ConnRequest is a connection a listener accepted, which the host accepts or refuses.
type ConnRequest struct {
	ID string `json:"id"`
	// Kind is ConnProxy (to Host:Port, as a proxy's client asked) or ConnAPI.
	Kind string `json:"kind"`
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
}

// Kinds of ConnRequest.
const (
	ConnProxy = "proxy"
	ConnAPI   = "api"
)

// Refusal says why the host refused a connection; Code is one of the Refuse* codes.
type Refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Refusal codes, as the proxies tell them to their clients: denied and quota as HTTP 403 and
// SOCKS "not allowed by ruleset", unreachable as 502 and "host unreachable", refused as 502
// and "connection refused", unavailable (no one answered) as 503 and "general failure".
const (
	RefuseDenied      = "egress_denied"
	RefuseQuota       = "egress_quota_exceeded"
	RefuseUnreachable = "egress_unreachable"
	RefuseRefused     = "egress_connection_refused"
	RefuseUnavailable = "egress_unavailable"
)

// MaxStreams is the most streams open at once on a channel: the agent's
// SETTINGS_MAX_CONCURRENT_STREAMS (past it the host's next call waits for a stream to end).
//
// Flow control on a channel: HTTP/2 gives a connection's credit back only as a stream's data
// is read, so a stream nobody reads keeps its whole window of the connection's. Each side's
// connection window is therefore MaxStreams times its stream window (the host's
// clientPerStream, the agent's uploadPerStream): however many streams are left unread, the
// others keep their credit. The credit is not memory: a side buffers only what arrives and is
// not yet read, at most MaxStreams times its stream window, which keeps the stream windows
// small (128 KiB: 125 MiB at most a side).
const MaxStreams = 1000

// MaxPortStreams bounds the port connects (POST /v1/ports/{port}/connect) open at once; one
// more is refused (port_refused). With the listeners' connections (at most 512) they leave
// room on the channel (MaxStreams) for the sandbox's commands and files.
const MaxPortStreams = 256

// ConnAnswerTimeout bounds how long an accepted connection waits for the host's answer.
const ConnAnswerTimeout = 30 * time.Second

// Identity answers not_supported naming what could not be bound: in a sandbox without
// CAP_SYS_ADMIN the uts hostname stays what the driver set, and the name is only written to
// /etc/hostname, which needs a writable /etc (as does /etc/machine-id).

// Started is the first frame of a process stream.
type Started struct {
	Pid int `json:"pid"`
}

// Exit is the last frame of a process stream.
type Exit struct {
	// ExitCode is the process's exit status, or 128+n when signal n ended it (as shells say),
	// or -1 when it could not start.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the process ("SIGKILL"), if one did.
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// DiskFull says the workspace disk was full when the process ended.
	DiskFull   bool  `json:"disk_full,omitempty"`
	DurationMs int64 `json:"duration_ms"`
	// StartError says the process could not start (no such file, not executable…).
	StartError string `json:"start_error,omitempty"`

	// For runs: OK is true when run returned; Result is its JSON value; Error says why not.
	// The agent sends Result as FrameResult chunks before this frame (a result may exceed
	// MaxFrame); the client joins them into Result, up to MaxResult bytes.
	OK     bool            `json:"ok,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// FileEntry is one entry of a listing.
type FileEntry struct {
	// Path is relative to /workspace.
	Path  string `json:"path"`
	Name  string `json:"name"`
	Type  string `json:"type"` // TypeFile, TypeDir, TypeSymlink or TypeOther
	Size  int64  `json:"size"`
	Mode  string `json:"mode"`  // octal permission bits, e.g. "0644"
	MTime string `json:"mtime"` // RFC 3339, UTC
}

// FileEntry types. A listing never follows symlinks: a symlink is listed as one.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

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
	CodeNotEmpty     = "directory_not_empty"
	CodePermission   = "permission_denied"
	// CodePortRefused: nothing in the sandbox listens on the port (a preview's connect).
	CodePortRefused = "port_refused"
)

// StatusOf is the HTTP status the agent answers with for an error code.
func StatusOf(code string) int {
	switch code {
	case CodePathOutside, CodeIsDir, CodeNotDir, CodeInvalid:
		return 400
	case CodePermission:
		return 403
	case CodeNotFound:
		return 404
	case CodeExists, CodeNotEmpty:
		return 409
	case CodeNotSupported:
		return 501
	case CodePortRefused:
		return 502
	case CodeDiskFull:
		return 507
	default:
		return 500
	}
}

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
	FrameResult  byte = 'r' // a chunk of a run's result JSON; the chunks join into Exit.Result
	FrameExit    byte = 'x' // JSON Exit; last frame

	// The answer of POST /v1/conns/{id}/accept: the connection's bytes as FrameData, then
	// FrameEnd (empty) once it sent all it will, while the other direction may go on. A stream
	// that ends without FrameEnd broke off.
	FrameData byte = 'd'
	FrameEnd  byte = 'e'
)

// MaxFrame bounds one frame's payload, so a reader never holds more than this per frame.
const MaxFrame = 64 << 10

// MaxResult bounds a run's result as the client assembles it; a larger result fails the run.
const MaxResult = 64 << 20

// FrameHeaderLen is the size of a frame's header: its kind and big-endian uint32 length.
const FrameHeaderLen = 5

// PutFrameHeader writes a frame header for a payload of n bytes into b[:FrameHeaderLen], for
// writers that read a payload straight into b[FrameHeaderLen:] and write the frame in one call.
func PutFrameHeader(b []byte, kind byte, n int) {
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:FrameHeaderLen], uint32(n))
}

// WriteFrame writes one frame: kind, big-endian uint32 length, payload.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("agent: frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	var hdr [FrameHeaderLen]byte
	PutFrameHeader(hdr[:], kind, len(payload))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame into buf (grown as needed, up to MaxFrame) and returns its kind
// and payload, which aliases buf.
func ReadFrame(r io.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var hdr [FrameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("agent: frame of %d bytes exceeds %d", n, MaxFrame)
	}
	switch hdr[0] {
	case FrameStarted, FrameStdout, FrameStderr, FrameResult, FrameExit, FrameData, FrameEnd:
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

// TimeoutsRequest holds (Hold) or releases the timeouts of every running process: the host
// holds them before it pauses the sandbox and releases them when it resumes it, so that a
// paused time does not count toward a command's timeout.
type TimeoutsRequest struct {
	Hold bool `json:"hold"`
}

// AttachRequest takes on the stream of a detachable process (ExecRequest.Detachable) whose
// channel ended: its output from the offsets the host has (Stdout, Stderr bytes), and with
// Stdin its stdin from the request's body.
type AttachRequest struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
	Stdin  bool  `json:"stdin,omitempty"`
	// FromNow takes the output from what comes next, whatever the offsets (a fork's copy of
	// a command, whose earlier output was its source's).
	FromNow bool `json:"from_now,omitempty"`
}
