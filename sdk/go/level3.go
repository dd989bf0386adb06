package lbb

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Level 3: long-lived sandboxes, their commands and files, and Files of the graph.
//
//	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{ExpiresInSeconds: 600})
//	defer c.Sandboxes.Delete(ctx, sb.ID)
//	c.Files.Write(ctx, sb.ID, "data.csv", strings.NewReader("1,2\n3,4\n"))
//	cmd, err := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"wc", "-l", "data.csv"}})
//	// cmd.Stdout.Tail is "2 data.csv\n"

// CallOption changes one call.
type CallOption func(*callOptions)

type callOptions struct {
	idemKey string
}

// WithIdempotencyKey sends the call with this Idempotency-Key instead of a fresh one, so that
// a retry of the same logical call (also from another process) has the effect once.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idemKey = key }
}

func applyOptions(opts []CallOption) callOptions {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	if o.idemKey == "" {
		o.idemKey = NewIdempotencyKey()
	}
	return o
}

// CreateParams describe a long-lived sandbox.
type CreateParams struct {
	// Template names a saved template ("name", "name@3"), whose base, limits and files the
	// sandbox starts with; or Base names a base (lbb/python, the default, lbb/node, lbb/shell).
	Template string  `json:"template,omitempty"`
	Base     string  `json:"base,omitempty"`
	Limits   *Limits `json:"limits,omitempty"`
	// Isolation names the isolation to run on ("ns", "gvisor"); empty takes the template's,
	// else the server's default.
	Isolation string `json:"isolation,omitempty"`
	// Egress is the sandbox's route out (nil: the template's, else none); API lets code inside
	// call the API with a grant the host attaches; Git is cloned into /workspace first.
	Egress *Egress          `json:"egress,omitempty"`
	API    *APIGrantRequest `json:"api,omitempty"`
	Git    *GitClone        `json:"git,omitempty"`
	// ExpiresInSeconds ends the sandbox that long after its creation (0: the server's
	// default; the server caps it).
	ExpiresInSeconds int64 `json:"expires_in_seconds,omitempty"`
	// Env is given to every command of the sandbox; its values are masked in all output.
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Origin   *Origin           `json:"origin,omitempty"`
	// Session names the sandbox: the first Create with it makes the sandbox, later ones
	// answer it running, resumed when it was stopped or paused (its workspace restored,
	// also on another host). A deleted sandbox frees its name.
	Session string `json:"session,omitempty"`
	// Size is a named preset of limits: "standard-1" … "standard-5" (or "small",
	// "standard", "large"); Limits given too override it field by field.
	Size string `json:"size,omitempty"`
	// IdempotencyKey makes a retried create make one sandbox; a fresh one is made when empty.
	IdempotencyKey string `json:"-"`
}

func (s *SandboxesService) path(id string, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

// Create starts a long-lived sandbox and returns its record (status running); with
// p.Session, the session's sandbox, created the first time and resumed after.
func (s *SandboxesService) Create(ctx context.Context, p CreateParams) (*Sandbox, error) {
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	return call[Sandbox](ctx, s.c, request{method: http.MethodPost, path: "/v1/sandboxes", body: p,
		idemKey: p.IdempotencyKey, retry: true})
}

func (s *SandboxesService) lifecycle(ctx context.Context, method, path string) (*Sandbox, error) {
	return call[Sandbox](ctx, s.c, request{method: method, path: path, idemKey: NewIdempotencyKey(), retry: true})
}

// Stop ends every process of a sandbox; its disk stays, for Resume.
func (s *SandboxesService) Stop(ctx context.Context, id string) (*Sandbox, error) {
	return s.lifecycle(ctx, http.MethodPost, s.path(id, "/stop"))
}

// Resume starts a stopped sandbox again, with the same workspace.
func (s *SandboxesService) Resume(ctx context.Context, id string) (*Sandbox, error) {
	return s.lifecycle(ctx, http.MethodPost, s.path(id, "/resume"))
}

// Delete destroys a sandbox; its record is kept (status destroyed).
func (s *SandboxesService) Delete(ctx context.Context, id string) (*Sandbox, error) {
	return s.lifecycle(ctx, http.MethodDelete, s.path(id, ""))
}

// Scoped creates a sandbox, hands it to fn and deletes it when fn returns, also after an
// error or a panic.
func (s *SandboxesService) Scoped(ctx context.Context, p CreateParams, fn func(sb *Sandbox) error) (err error) {
	sb, err := s.Create(ctx, p)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, derr := s.Delete(dctx, sb.ID); derr != nil && err == nil {
			err = derr
		}
	}()
	return fn(sb)
}

// RunIn calls run(input, config) in an existing sandbox, next to its files: code (or a
// template's code) runs with the sandbox's workspace as its working directory. Limits,
// Metadata, Origin and Isolation of p are the sandbox's and are ignored here.
func (s *SandboxesService) RunIn(ctx context.Context, id string, p RunParams) (*Run, error) {
	r, err := p.prepare()
	if err != nil {
		return nil, err
	}
	return s.run(ctx, s.path(id, "/run"), p.IdempotencyKey, runInBody{Code: r.Code, Template: r.Template,
		Input: r.Input, Config: r.Config, Base: r.Base, Language: r.Language, Env: r.Env,
		TimeoutMs: p.TimeoutMs, WaitMs: p.WaitMs})
}

// ExecParams start one process in a sandbox.
type ExecParams struct {
	// Argv[0] is looked up in PATH unless it has a slash.
	Argv []string `json:"argv"`
	// Cmd is a shell line instead of Argv ("ls -l | wc -l"): it runs as bash -lc Cmd.
	Cmd string `json:"-"`
	// Env is laid over the sandbox's; its values are masked in the output.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is relative to /workspace or absolute inside it; default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Stdin (text) or StdinBase64 (bytes) is what the process reads on stdin; then it
	// reads end of file, unless StdinOpen keeps stdin open for Commands.WriteStdin.
	Stdin       string `json:"stdin,omitempty"`
	StdinBase64 string `json:"stdin_base64,omitempty"`
	StdinOpen   bool   `json:"stdin_open,omitempty"`
	// WaitMs is how long the answer waits for the process to end: 0 waits as long as the
	// server lets a call wait (its --max-wait, 5 min by default), negative answers at once
	// with the command running (the API's default when wait_ms is absent).
	WaitMs int64 `json:"-"`
	// TimeoutMs kills the process when it passes (0: the server's default).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// IdempotencyKey makes a retried call start one process; a fresh one is made when empty.
	IdempotencyKey string `json:"-"`
}

type execBody struct {
	ExecParams
	WaitMs *int64 `json:"wait_ms,omitempty"`
}

// StdinBytes sets StdinBase64 from bytes.
func StdinBytes(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// prepare fills in Argv from Cmd and the idempotency key.
func (p *ExecParams) prepare() error {
	switch {
	case p.Cmd != "" && len(p.Argv) > 0:
		return errors.New("lbb: give Cmd (a shell line) or Argv, not both")
	case p.Cmd != "":
		p.Argv = []string{"bash", "-lc", p.Cmd}
	}
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	return nil
}

// Exec starts a process in a sandbox and returns its record: finished (with its exit code,
// and the head and tail of its output), or still running after p.WaitMs.
func (s *SandboxesService) Exec(ctx context.Context, id string, p ExecParams) (*Command, error) {
	if err := p.prepare(); err != nil {
		return nil, err
	}
	w := max(p.WaitMs, 0)
	if p.WaitMs == 0 {
		w = 3_600_000 // the server caps it at its longest wait
	}
	body := execBody{ExecParams: p, WaitMs: &w}
	return call[Command](ctx, s.c, request{method: http.MethodPost, path: s.path(id, "/commands"),
		body: body, idemKey: p.IdempotencyKey, retry: true})
}

// ExecStream starts a process and streams its output from its first byte: the record
// (Command), every chunk of stdout and stderr in the order the process wrote them, then its
// end (Exit). The server holds what this stream has not read yet and makes the process wait
// rather than drop any of it; if the stream stops reading for minutes (or goes away), the
// server lets go and Lost says how many bytes did not come. p.WaitMs is not used. A broken
// connection is resumed with the same Idempotency-Key: the same command goes on streaming.
func (s *SandboxesService) ExecStream(ctx context.Context, id string, p ExecParams) (*OutputStream, error) {
	if err := p.prepare(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(struct {
		ExecParams
		Stream bool `json:"stream"`
	}{p, true})
	if err != nil {
		return nil, fmt.Errorf("lbb: %w", err)
	}
	st := &OutputStream{c: s.c, ctx: ctx, path: s.path(id, "/commands"), start: body, idemKey: p.IdempotencyKey,
		next: map[string]int64{"stdout": 0, "stderr": 0}}
	if err := st.connect(); err != nil {
		return nil, err
	}
	// The record comes first, at once: the caller has the command's id before any output.
	if ev, data, _, err := st.readEvent(); err != nil || ev != "command" {
		st.Close()
		return nil, fmt.Errorf("lbb: the stream did not begin with the command (event %q): %v", ev, err)
	} else if err := json.Unmarshal([]byte(data), &st.command); err != nil {
		st.Close()
		return nil, fmt.Errorf("lbb: a bad command event: %w", err)
	}
	return st, nil
}

// CommandParams run one command to its end and hand its output over as it comes.
type CommandParams struct {
	ExecParams
	// OnStdout and OnStderr get every chunk of output as it comes, in the order the process
	// wrote them; a chunk never ends inside a UTF-8 sequence that the next one finishes.
	OnStdout, OnStderr func(chunk []byte)
	// OutputLimit keeps up to this many bytes of each stream in the result's Stdout and
	// Stderr (0 keeps none: the record has the head and tail).
	OutputLimit int
}

// CommandResult is a command that ran to its end.
type CommandResult struct {
	// Command is its record: status, exit code, and the head and tail of each stream
	// (Command.Stdout, Command.Stderr).
	*Command
	// Stdout and Stderr are the streams as they came, up to OutputLimit bytes each; Truncated
	// says OutputLimit cut one of them.
	Stdout, Stderr []byte
	Truncated      bool
}

// OutputLostError says bytes of a command's output did not reach the caller: the server let
// go of them because the caller stopped reading for minutes. What came is in Result.
type OutputLostError struct {
	Result *CommandResult
	// Bytes is how many bytes did not come.
	Bytes int64
}

func (e *OutputLostError) Error() string {
	return fmt.Sprintf("lbb: %d bytes of the output of %s did not come: what came is incomplete", e.Bytes, e.Result.ID)
}

// Run runs a command in a sandbox to its end, like E2B's and Daytona's commands.run: a
// shell line (p.Cmd, run as bash -lc) or p.Argv. Its output streams from the first byte
// (ExecStream) to p.OnStdout and p.OnStderr, none of it lost, and up to p.OutputLimit bytes
// of each stream come back in the result. A command that fails (exit code ≠ 0, a timeout)
// is a result, not an error: its Status and ExitCode say it. Lost output is an
// *OutputLostError with the result.
//
//	res, err := c.Commands.Run(ctx, sb.ID, lbb.CommandParams{ExecParams: lbb.ExecParams{Cmd: "ls -l | wc -l"},
//		OnStdout: func(b []byte) { os.Stdout.Write(b) }, OutputLimit: 1 << 20})
func (s *CommandsService) Run(ctx context.Context, sandboxID string, p CommandParams) (*CommandResult, error) {
	st, err := s.c.Sandboxes.ExecStream(ctx, sandboxID, p.ExecParams)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res := &CommandResult{}
	keep := func(dst *[]byte, b []byte) {
		if room := p.OutputLimit - len(*dst); room < len(b) {
			b, res.Truncated = b[:max(room, 0)], true
		}
		*dst = append(*dst, b...)
	}
	for st.Next() {
		ch := st.Chunk()
		if ch.Stream == "stderr" {
			if p.OnStderr != nil {
				p.OnStderr(ch.Data)
			}
			keep(&res.Stderr, ch.Data)
		} else {
			if p.OnStdout != nil {
				p.OnStdout(ch.Data)
			}
			keep(&res.Stdout, ch.Data)
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if res.Command = st.Exit(); res.Command == nil {
		return nil, errors.New("lbb: the output stream ended before the command")
	}
	if p.OutputLimit == 0 {
		res.Truncated = false
	}
	if n := st.Lost(); n > 0 {
		return res, &OutputLostError{Result: res, Bytes: n}
	}
	return res, nil
}

// Kill signals a running command's process group ("SIGTERM", "KILL", "15"; "" is SIGKILL)
// and returns its record, once it has ended or after a few seconds.
func (s *CommandsService) Kill(ctx context.Context, id, signal string) (*Command, error) {
	return call[Command](ctx, s.c, request{method: http.MethodPost,
		path: "/v1/commands/" + url.PathEscape(id) + "/kill", body: map[string]string{"signal": signal},
		idemKey: NewIdempotencyKey(), retry: true})
}

// WriteStdin writes data to the stdin of a command started with StdinOpen; close ends its
// stdin after data (the process reads end of file).
func (s *CommandsService) WriteStdin(ctx context.Context, id string, data []byte, close bool) error {
	q := url.Values{}
	if close {
		q.Set("close", "true")
	}
	_, err := s.c.rawJSON(ctx, rawRequest{method: http.MethodPost, path: "/v1/commands/" + url.PathEscape(id) + "/stdin",
		query: q, body: bytes.NewReader(data), contentType: "application/octet-stream"}, nil)
	return err
}

// Output streams a command's output: stream is "stdout", "stderr" or "both" ("" is both).
// With follow it goes on with live output until the command ends, and then Exit has its
// record; without, it gives what is there now. A reader that joins late gets what the
// server kept (the head and tail of long output), then live output.
func (s *CommandsService) Output(ctx context.Context, id, stream string, follow bool) (*OutputStream, error) {
	if stream == "" {
		stream = "both"
	}
	st := &OutputStream{c: s.c, ctx: ctx, path: "/v1/commands/" + url.PathEscape(id) + "/output",
		query: url.Values{"stream": {stream}, "follow": {strconv.FormatBool(follow)}}, next: map[string]int64{}}
	for _, name := range []string{"stdout", "stderr"} {
		if stream == "both" || stream == name {
			st.next[name] = 0
		}
	}
	if err := st.connect(); err != nil {
		return nil, err
	}
	return st, nil
}

// FilesService is the files of sandboxes' workspaces: /v1/sandboxes/{id}/files.
type FilesService struct{ c *Client }

func (s *FilesService) path(id, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + "/files" + rest
}

// Write streams r into a file of the workspace (relative to /workspace, or absolute inside
// it), replacing it whole; parent directories are made. A body that is an io.Seeker
// (bytes.Reader, strings.Reader, os.File) is sent again on a retry; any other once.
func (s *FilesService) Write(ctx context.Context, sandboxID, path string, r io.Reader, opts ...CallOption) (*FileEntry, error) {
	o := applyOptions(opts)
	var e FileEntry
	_, err := s.c.rawJSON(ctx, rawRequest{method: http.MethodPut, path: s.path(sandboxID, "/content"),
		query: url.Values{"path": {path}}, body: r, contentType: "application/octet-stream", idemKey: o.idemKey, retry: true}, &e)
	return &e, err
}

// Read streams a file of the workspace. The caller closes the reader.
func (s *FilesService) Read(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	resp, err := s.c.raw(ctx, rawRequest{method: http.MethodGet, path: s.path(sandboxID, "/content"),
		query: url.Values{"path": {path}}, retry: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// List lists a directory of the workspace ("" or "." is /workspace); recursive lists
// everything beneath it. Symlinks are listed, never followed.
func (s *FilesService) List(ctx context.Context, sandboxID, path string, recursive bool) ([]FileEntry, error) {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	var l List[FileEntry]
	_, err := s.c.do(ctx, request{method: http.MethodGet, path: s.path(sandboxID, ""), query: q, retry: true}, &l)
	return l.Data, err
}

// Delete removes a file, a symlink or a directory with everything in it.
func (s *FilesService) Delete(ctx context.Context, sandboxID, path string) error {
	_, err := s.c.do(ctx, request{method: http.MethodDelete, path: s.path(sandboxID, ""),
		query: url.Values{"path": {path}, "recursive": {"true"}}, idemKey: NewIdempotencyKey(), retry: true}, nil)
	return err
}

// Mkdir makes a directory and its parents; one that exists is fine.
func (s *FilesService) Mkdir(ctx context.Context, sandboxID, path string) (*FileEntry, error) {
	return call[FileEntry](ctx, s.c, request{method: http.MethodPost, path: s.path(sandboxID, "/mkdir"),
		query: url.Values{"path": {path}}, idemKey: NewIdempotencyKey(), retry: true})
}

// GraphFilesService is Files of the graph: /v1/files.
type GraphFilesService struct{ c *Client }

// Keep keeps a workspace file as a File of the graph, naming the sandbox and path as its
// origin.
func (s *GraphFilesService) Keep(ctx context.Context, sandboxID, path string, opts ...CallOption) (*File, error) {
	o := applyOptions(opts)
	var f File
	resp, err := s.c.do(ctx, request{method: http.MethodPost, path: "/v1/files",
		query: url.Values{"source_sandbox": {sandboxID}, "source_path": {path}}, idemKey: o.idemKey, retry: true}, &f)
	f.Replayed = replayed(resp)
	return &f, err
}

// Upload stores r as a File of the graph named name.
func (s *GraphFilesService) Upload(ctx context.Context, name string, r io.Reader, opts ...CallOption) (*File, error) {
	o := applyOptions(opts)
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var f File
	resp, err := s.c.rawJSON(ctx, rawRequest{method: http.MethodPost, path: "/v1/files", query: q, body: r,
		contentType: "application/octet-stream", idemKey: o.idemKey, retry: true}, &f)
	f.Replayed = replayed(resp)
	return &f, err
}

// List lists the graph's Files, newest first.
func (s *GraphFilesService) List(ctx context.Context, p ListParams) (*List[File], error) {
	return get[List[File]](ctx, s.c, "/v1/files", p.query())
}

// Get returns a File's record.
func (s *GraphFilesService) Get(ctx context.Context, id string) (*File, error) {
	return get[File](ctx, s.c, "/v1/files/"+url.PathEscape(id), nil)
}

// Content streams a File's bytes. The caller closes the reader.
func (s *GraphFilesService) Content(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := s.c.raw(ctx, rawRequest{method: http.MethodGet, path: "/v1/files/" + url.PathEscape(id) + "/content", retry: true})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Delete deletes a File of the graph and returns its record. Its bytes go with the last
// File, of any graph, that names them; workspaces that imported it keep their copies. A File
// a template version names stays (409, CodeOf: file_in_use).
func (s *GraphFilesService) Delete(ctx context.Context, id string) (*File, error) {
	return call[File](ctx, s.c, request{method: http.MethodDelete, path: "/v1/files/" + url.PathEscape(id), retry: true})
}

// Import copies the File of the graph with this sha256 into a sandbox's workspace at path.
func (s *GraphFilesService) Import(ctx context.Context, sandboxID, path, sha256 string, opts ...CallOption) (*FileEntry, error) {
	o := applyOptions(opts)
	return call[FileEntry](ctx, s.c, request{method: http.MethodPut, path: "/v1/sandboxes/files/content",
		query: url.Values{"sandbox": {sandboxID}, "path": {path}, "source_sha256": {sha256}}, idemKey: o.idemKey, retry: true})
}
