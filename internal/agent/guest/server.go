// Package guest is the guest agent's implementation: the process table and reaper, process
// streams, run() harnesses, workspace files and identity, served over the agent protocol
// (package agent) on the one channel. cmd/lbb-agent wires it; it imports nothing of the
// server.
package guest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Options configure the agent.
type Options struct {
	// Workspace is the directory every file path resolves in; default /workspace.
	Workspace string
	// EtcDir is where Identity writes hostname and machine-id; default /etc.
	EtcDir string
	// Path is the default PATH of processes; default DefaultPath.
	Path string
	// Home is the HOME of processes; default /root (the sandbox user is root; caches that
	// the image prepared there, such as matplotlib's, are found, and dotfiles do not litter
	// the workspace).
	Home string
	// RootProcesses starts every process as uid 0 (real, effective and saved): the agent runs
	// as a real uid of its own (lbb-agent --uid), which its processes must not share.
	RootProcesses bool
	// SyncWorkspace syncs the workspace's file system when a process ends and after each
	// file call, before the answer: a microvm's page cache is lost when its machine is.
	SyncWorkspace bool
	// Reconnects says the agent serves a next channel when one ends (a checkpointed and
	// restored sandbox's): detachable streams then wait for an attach there instead of
	// ending with their channel.
	Reconnects bool
	Logger     *slog.Logger
}

// Server is the agent.
type Server struct {
	opts    Options
	ws      *Workspace
	log     *slog.Logger
	devNull *os.File
	// pid1 is true inside a sandbox: the agent is its init.
	pid1 bool
	// warm are the pre-started interpreters waiting for their run.
	warm warmSet
	// conns are the listeners of the streams the guest starts, and their connections.
	conns conns
	// portStreams counts the port connects open (agent.MaxPortStreams).
	portStreams atomic.Int32
}

// New prepares the agent. Outside a sandbox (not PID 1) it makes itself a child subreaper,
// so that it reaps its processes' orphans there too.
func New(opts Options) (*Server, error) {
	if opts.Workspace == "" {
		opts.Workspace = agent.Workspace
	}
	if opts.EtcDir == "" {
		opts.EtcDir = "/etc"
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.Home == "" {
		opts.Home = "/root"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	table.asRoot = opts.RootProcesses
	ws, err := OpenWorkspace(opts.Workspace)
	if err != nil {
		return nil, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		ws.Close()
		return nil, err
	}
	s := &Server{opts: opts, ws: ws, log: opts.Logger, devNull: devNull, pid1: os.Getpid() == 1,
		warm: warmSet{procs: map[string]*warmProc{}, starting: map[string]bool{}}}
	if !s.pid1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			s.log.Warn("cannot become a child subreaper; orphans will not be reaped", "err", err)
		}
	} else if err := ensureMachineID(opts.EtcDir); err != nil {
		// The driver did not make the file the sandbox's to write (see the drivers' machine-id
		// mounts): the sandbox keeps the image's.
		s.log.Debug("cannot give the sandbox a machine id", "err", err)
	}
	return s, nil
}

// ensureMachineID gives a sandbox booting without a machine id (the image's is empty) a
// random one, so that no two sandboxes share one. One it has already (written at an earlier
// boot, on a disk that outlived a stop) stays: a resumed sandbox is the same machine.
func ensureMachineID(etcDir string) error {
	b, err := os.ReadFile(filepath.Join(etcDir, "machine-id"))
	if err == nil && validMachineID(strings.TrimSpace(string(b))) {
		return nil
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	return writeMachineID(etcDir, hex.EncodeToString(id))
}

func validMachineID(id string) bool {
	_, err := hex.DecodeString(id)
	return err == nil && len(id) == 32 && id != strings.Repeat("0", 32)
}

// writeMachineID writes id into <etcDir>/machine-id in place: the drivers let the sandbox
// write that one file, not create files in /etc (a rename over it would need that). The
// image's file is read-only (0444) to its owner, the sandbox's root, which has no
// CAP_DAC_OVERRIDE: the agent, its owner, makes it writable for the write.
func writeMachineID(etcDir, id string) error {
	path := filepath.Join(etcDir, "machine-id")
	open := func() (*os.File, error) {
		return os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0)
	}
	f, err := open()
	if errors.Is(err, os.ErrPermission) {
		if cerr := os.Chmod(path, 0o644); cerr == nil {
			defer os.Chmod(path, 0o444)
			f, err = open()
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o444)
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.ToLower(id) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Handler routes the protocol.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+agent.PathPing, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST "+agent.PathExec, s.handleExec)
	mux.HandleFunc("POST "+agent.PathRun, s.handleRun)
	mux.HandleFunc("POST "+agent.PathProcs+"{id}/signal", s.handleSignal)
	mux.HandleFunc("POST "+agent.PathProcs+"{id}/resize", s.handleResize)
	mux.HandleFunc("POST "+agent.PathTimeouts, s.handleTimeouts)
	mux.HandleFunc("POST "+agent.PathProcs+"{id}/attach", s.handleAttach)
	mux.HandleFunc("POST "+agent.PathDropDetached, s.handleDropDetached)
	mux.HandleFunc("GET "+agent.PathFiles, s.handleList)
	mux.HandleFunc("DELETE "+agent.PathFiles, s.handleDelete)
	mux.HandleFunc("POST "+agent.PathMkdir, s.handleMkdir)
	mux.HandleFunc("GET "+agent.PathFileContent, s.handleRead)
	mux.HandleFunc("PUT "+agent.PathFileContent, s.handleWrite)
	mux.HandleFunc("POST "+agent.PathIdentity, s.handleIdentity)
	mux.HandleFunc("POST "+agent.PathPrestart, s.handlePrestart)
	mux.HandleFunc("POST "+agent.PathListen, s.handleListen)
	mux.HandleFunc("POST "+agent.PathConns+"{id}/accept", s.handleConnAccept)
	mux.HandleFunc("POST "+agent.PathConns+"{id}/refuse", s.handleConnRefuse)
	mux.HandleFunc("POST "+agent.PathPorts+"{port}/connect", s.handlePortConnect)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: r.Method + " " + r.URL.Path + ": no such route"})
	})
	return mux
}

// Flow-control windows and frame size of the channel (agent.MaxStreams). Uploads (file
// writes, stdin, port connections) are buffered by the agent up to uploadPerStream each when
// what inside reads them is slow; the connection's window is every stream's, so that uploads
// left unread (a process that never reads its stdin, a port's server that never reads its
// connection) never stall the others. The agent buffers at most uploadPerConn, and only of
// what the sandbox refuses to read; of a preview's visitors (agent.MaxPortStreams) at most
// 32 MiB. 128 KiB keeps one stream's throughput (stdin, a file write) that of 4 MiB windows on
// a local socket; 64 KiB halved it.
const (
	uploadPerStream = 128 << 10
	uploadPerConn   = agent.MaxStreams * uploadPerStream
	// The host's HTTP/2 client holds a buffer of the agent's frame size (up to 512 KiB) for
	// each stream whose body it is sending, for the stream's life: 1 MiB frames cost the host
	// 512 KiB a port connection. Frames larger than a stream's window never go out anyway.
	readFrameSize = uploadPerStream
)

// ServeConn says Hello on conn, serves the protocol on it (HTTP/2 with prior knowledge)
// until it closes, then kills every process group the agent still runs.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) {
	if _, err := io.WriteString(conn, agent.Hello); err != nil {
		s.log.Error("saying hello on the channel", "err", err)
		conn.Close()
		return
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:        s.Handler(),
		Protocols:      &protos,
		MaxHeaderBytes: 4 << 20,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:    func(net.Listener) context.Context { return context.WithValue(ctx, channelKey{}, &channel{}) },
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          agent.MaxStreams,
			MaxReadFrameSize:              readFrameSize,
			MaxReceiveBufferPerStream:     uploadPerStream,
			MaxReceiveBufferPerConnection: uploadPerConn,
		},
	}
	l := &oneConnListener{conn: &closeNotifyConn{Conn: conn, closed: make(chan struct{})}}
	srv.Serve(l)
	// Detachable streams wait for an attach on the next channel (attach.go).
	var spare func(pid int) bool
	if s.opts.Reconnects {
		spare = isAttachable
	}
	table.signalAll(syscall.SIGKILL, spare)
}

// channelKey carries the *channel a request came on in its context.
type channelKey struct{}

// channel tells one channel (ServeConn) from the next.
type channel struct{ _ byte }

func channelOf(r *http.Request) *channel {
	ch, _ := r.Context().Value(channelKey{}).(*channel)
	return ch
}

// oneConnListener hands out its one connection, then blocks until that is closed.
type oneConnListener struct {
	conn *closeNotifyConn
	used bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.used {
		l.used = true
		return l.conn, nil
	}
	<-l.conn.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type closeNotifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeNotifyConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Forward sends sig to the process group of every running process.
func (s *Server) Forward(sig syscall.Signal) { table.signalAll(sig, nil) }

// timeouts are the running processes' timeouts, held while the host pauses the sandbox.
var timeouts agent.Deadlines

func (s *Server) handleTimeouts(w http.ResponseWriter, r *http.Request) {
	// hold must be said: a body of null or {} releases nothing and holds nothing (a
	// missing field decoded as false would release timeouts the host holds while paused).
	var req struct {
		Hold *bool `json:"hold"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "timeouts request: " + err.Error()})
		return
	}
	if req.Hold == nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "timeouts request: hold (true or false) is required"})
		return
	}
	timeouts.Hold(*req.Hold)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) {
	var req agent.SignalRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "signal request: " + err.Error()})
			return
		}
	}
	sig, err := ParseSignal(req.Signal)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	p := table.lookup(id)
	if p == nil {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: fmt.Sprintf("no running process %q", id)})
		return
	}
	if err := p.signal(sig); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInternal, Message: err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) {
	var size agent.PtySize
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&size); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "resize request: " + err.Error()})
		return
	}
	id := r.PathValue("id")
	p := table.lookup(id)
	if p == nil {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: fmt.Sprintf("no running process %q", id)})
		return
	}
	if p.pty == nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("process %q has no terminal", id)})
		return
	}
	// TIOCSWINSZ on the master sends SIGWINCH to the terminal's foreground process group.
	if err := pty.Setsize(p.pty, &pty.Winsize{Cols: size.Cols, Rows: size.Rows}); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInternal, Message: "resize: " + err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ParseSignal reads "SIGTERM", "TERM", "term" or "15"; empty is SIGKILL.
func ParseSignal(name string) (syscall.Signal, error) {
	if name == "" {
		return syscall.SIGKILL, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	if sig := unix.SignalNum(up); sig != 0 {
		return sig, nil
	}
	return 0, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("unknown signal %q", name)}
}

// handleIdentity binds a hostname, a machine id and fresh entropy. sethostname needs
// CAP_SYS_ADMIN in the sandbox's uts namespace, which the agent has no more once the driver
// dropped capabilities; it is tried only as PID 1 (elsewhere it would rename the host), and
// the name is written to <EtcDir>/hostname either way. The call answers not_supported only
// for a part that could not be done at all.
func (s *Server) handleIdentity(w http.ResponseWriter, r *http.Request) {
	var id agent.Identity
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&id); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "identity: " + err.Error()})
		return
	}
	var errs []string
	if id.Hostname != "" {
		if len(id.Hostname) > 64 || strings.ContainsAny(id.Hostname, "/\x00\n") {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("hostname %q is not valid", id.Hostname)})
			return
		}
		set := false
		if s.pid1 {
			set = unix.Sethostname([]byte(id.Hostname)) == nil
		}
		if err := os.WriteFile(filepath.Join(s.opts.EtcDir, "hostname"), []byte(id.Hostname+"\n"), 0o644); err != nil && !set {
			errs = append(errs, "hostname: "+err.Error())
		}
	}
	if id.MachineID != "" {
		if _, err := hex.DecodeString(id.MachineID); err != nil || len(id.MachineID) != 32 {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "machine_id: want 32 hex digits"})
			return
		}
		if err := writeMachineID(s.opts.EtcDir, id.MachineID); err != nil {
			errs = append(errs, "machine-id: "+err.Error())
		}
	}
	if len(id.Seed) > 0 {
		// Writing to /dev/urandom mixes the bytes into the pool (without crediting entropy,
		// which needs CAP_SYS_ADMIN): reads after this differ between claimed slots.
		f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write(id.Seed)
			f.Close()
		}
		if err != nil {
			errs = append(errs, "seed: "+err.Error())
		}
	}
	if len(errs) > 0 {
		writeError(w, &agent.Error{Code: agent.CodeNotSupported, Message: strings.Join(errs, "; ")})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
