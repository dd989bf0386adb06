package guest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

const (
	// After a process exits, its output pipes are read until EOF, or until they stay quiet
	// for drainIdle, or for drainMax in all: a background child that keeps a pipe open
	// must not hold the command's end forever. What it writes later is lost (EPIPE).
	drainIdle = 200 * time.Millisecond
	drainMax  = 5 * time.Second

	// maxHeaderLine bounds the status line a harness writes before its result.
	maxHeaderLine = 1 << 20
	// maxErrorLen bounds Exit.Error, which travels in one frame.
	maxErrorLen = 16 << 10
)

// DefaultPath is the PATH of processes unless the agent or the request says otherwise.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// baseEnv is every process's environment before the request's env is merged over it.
// While a Listen call lasts, what it adds (the proxies' variables) comes in too.
func (s *Server) baseEnv() map[string]string {
	env := map[string]string{
		"PATH":                    s.opts.Path,
		"HOME":                    s.opts.Home,
		"LANG":                    "C.UTF-8",
		"MPLBACKEND":              "Agg",
		"PYTHONDONTWRITEBYTECODE": "1",
	}
	// The local driver (tests, development) runs processes on the host and gives the agent a
	// TMPDIR of the sandbox's own; in a real sandbox /tmp is the sandbox's and none is set.
	if v := os.Getenv("TMPDIR"); v != "" {
		env["TMPDIR"] = v
	}
	maps.Copy(env, s.conns.env())
	return env
}

// procSpec is what a process stream needs, for exec and run alike.
type procSpec struct {
	id      string
	argv    []string
	env     map[string]string
	cwd     string
	stdin   io.Reader // nil: /dev/null
	timeout time.Duration
	// extra are the child's fds 3, 4…; the parent's copies are closed after the start.
	extra []*os.File
	// result, if set, is read like output: a harness's status line, then the result JSON,
	// which is sent as FrameResult chunks.
	result *os.File
	// finish completes the Exit frame before it is sent (and may send FrameResult chunks).
	finish func(ex *agent.Exit, hdr *resultHeader, fw *frameWriter)
	// warm, if set, is a pre-started interpreter that runs this instead of a spawned process;
	// warmReq makes its request from the resolved working directory and the request's env.
	warm    *warmProc
	warmReq func(dir string, env map[string]string) ([]byte, error)
	// pty runs the process on a new terminal of this size (agent.ExecRequest.Pty).
	pty *agent.PtySize
	// detachable: the stream outlives its channel (attach.go).
	detachable bool
}

// resultHeader is the status line a harness writes to its result fd before the result.
type resultHeader struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	// Exit is the code the harness exits with. A harness that says it may close its result
	// fd, stdout and stderr when it is done and then exit: the run is reported when all three
	// are closed, not when the process has finished dying.
	Exit *int `json:"exit"`
	seen bool
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	raw := strings.TrimRight(r.Header.Get(agent.HeaderExec), "=")
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: agent.HeaderExec + ": not base64url: " + err.Error()})
		return
	}
	var req agent.ExecRequest
	if err := json.Unmarshal(b, &req); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: agent.HeaderExec + ": " + err.Error()})
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "argv is empty"})
		return
	}
	sp := &procSpec{id: req.ID, argv: req.Argv, env: req.Env, cwd: req.Cwd, timeout: time.Duration(req.TimeoutMs) * time.Millisecond, pty: req.Pty,
		detachable: req.Detachable && req.ID != "" && s.opts.Reconnects}
	if req.Stdin {
		sp.stdin = r.Body
	}
	s.stream(w, r, sp)
}

// frameWriter serialises frames onto the response, flushing each so that it goes out now.
// A write blocks while the host's flow-control window is closed: that is the backpressure.
// A detachable stream's writer (cond set) waits for an attach instead of failing (attach.go).
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	rc  *http.ResponseController
	err error
	ch  *channel // the channel w is on

	cond   *sync.Cond // nil unless detachable
	gen    int        // counts attaches
	gaveUp bool       // nobody attached in time
	sent   [2]int64   // stdout and stderr payload bytes written
	ring   [2][]byte  // the last of them, for a replay
	skip   [2]int64   // bytes the host had beyond sent, at its attach
}

func (fw *frameWriter) write(frame []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for {
		if fw.err == nil {
			if fw.cond != nil {
				frame = fw.skipDelivered(frame)
			}
			if _, err := fw.w.Write(frame); err != nil {
				fw.err = err
			} else if err := fw.rc.Flush(); err != nil {
				fw.err = err
			} else {
				fw.record(frame)
				return nil
			}
		}
		if fw.cond == nil || fw.gaveUp {
			return fw.err
		}
		fw.cond.Wait()
	}
}

func (fw *frameWriter) writeJSON(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	frame := make([]byte, agent.FrameHeaderLen+len(b))
	agent.PutFrameHeader(frame, kind, len(b))
	copy(frame[agent.FrameHeaderLen:], b)
	return fw.write(frame)
}

// writeChunks sends b as frames of kind, each at most MaxFrame.
func (fw *frameWriter) writeChunks(kind byte, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), agent.MaxFrame)
		frame := make([]byte, agent.FrameHeaderLen+n)
		agent.PutFrameHeader(frame, kind, n)
		copy(frame[agent.FrameHeaderLen:], b[:n])
		if err := fw.write(frame); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// procState is shared by the pumps of one process.
type procState struct {
	exited atomic.Bool
	exitAt atomic.Int64 // unix nanoseconds
}

// stream starts sp and answers with its frames until it has exited and its output is drained.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sp *procSpec) {
	for _, f := range sp.extra {
		defer f.Close()
	}
	if sp.result != nil {
		defer sp.result.Close()
	}
	defer func() {
		if sp.warm != nil { // not handed over: it would never serve
			sp.warm.kill(nil)
		}
	}()
	env, err := s.buildEnv(sp.env)
	if err != nil {
		writeError(w, err)
		return
	}
	dir, startErr, err := s.cwd(sp.cwd)
	if err != nil {
		writeError(w, err)
		return
	}
	if id := sp.id; id != "" && table.lookup(id) != nil {
		writeError(w, &agent.Error{Code: agent.CodeExists, Message: fmt.Sprintf("process %q is running", id)})
		return
	}
	fw := &frameWriter{w: w, rc: http.NewResponseController(w), ch: channelOf(r)}
	w.Header().Set("Content-Type", "application/octet-stream")

	var exe string
	if startErr == "" && sp.warm == nil {
		exe, startErr = lookPath(sp.argv[0], env["PATH"], dir)
	}
	var outR, outW, errR, errW, inR, inW, ptmx *os.File
	if sp.pty != nil {
		if _, ok := env["TERM"]; !ok {
			env["TERM"] = "xterm-256color"
		}
	}
	if startErr == "" && sp.pty != nil {
		// The terminal is the child's stdin, stdout and stderr (outW, errW and inR alike);
		// its master side is read as stdout and written as stdin.
		var tty *os.File
		if ptmx, tty, err = pty.Open(); err != nil {
			startErr = "pty: " + err.Error()
		} else {
			pty.Setsize(ptmx, &pty.Winsize{Cols: sp.pty.Cols, Rows: sp.pty.Rows})
			outR, outW = ptmx, tty
			if sp.stdin != nil {
				inW = ptmx
			}
		}
	} else if startErr == "" && sp.warm == nil {
		if outR, outW, err = os.Pipe(); err == nil {
			if errR, errW, err = os.Pipe(); err == nil && sp.stdin != nil {
				inR, inW, err = os.Pipe()
			}
		}
		if err != nil {
			startErr = "pipes: " + err.Error()
		}
	}
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	var p *proc
	var started time.Time
	if startErr == "" && sp.warm != nil {
		started = time.Now()
		p, outR, errR, err = s.handOver(sp, dir)
		if errors.Is(err, errDuplicateID) {
			writeError(w, &agent.Error{Code: agent.CodeExists, Message: fmt.Sprintf("process %q is running", sp.id)})
			return
		}
		if err != nil {
			startErr = err.Error()
		}
	} else if startErr == "" {
		stdin := s.devNull
		if inR != nil {
			stdin = inR
		}
		// Fd puts each child end into blocking mode, as a child expects.
		var files []uintptr
		if ptmx != nil {
			files = []uintptr{outW.Fd(), outW.Fd(), outW.Fd()}
		} else {
			files = []uintptr{stdin.Fd(), outW.Fd(), errW.Fd()}
		}
		for _, f := range sp.extra {
			files = append(files, f.Fd())
		}
		started = time.Now()
		p, err = table.start(startSpec{
			id: sp.id, path: exe, argv: sp.argv, env: envList(env), dir: dir,
			files: files, pdeathsig: !s.pid1, pty: ptmx,
		})
		closeAll(inR, outW, errW)
		for _, f := range sp.extra {
			f.Close()
		}
		sp.extra = nil
		if errors.Is(err, errDuplicateID) {
			closeAll(outR, errR, inW)
			writeError(w, &agent.Error{Code: agent.CodeExists, Message: fmt.Sprintf("process %q is running", sp.id)})
			return
		}
		if err != nil {
			startErr = fmt.Sprintf("exec %q: %v", sp.argv[0], err)
		}
	}
	if startErr != "" {
		closeAll(outR, errR, inW)
		w.WriteHeader(http.StatusOK)
		fw.writeJSON(agent.FrameExit, agent.Exit{ExitCode: -1, StartError: startErr})
		return
	}
	defer table.release(p)

	var att *attachable
	if sp.detachable {
		fw.cond = sync.NewCond(&fw.mu)
		att = &attachable{pid: p.pid, fw: fw, inW: inW, done: make(chan struct{}), kill: func() { table.killGroupAndEscaped(p) }}
		addAttachable(sp.id, att)
		defer func() {
			removeAttachable(sp.id, att)
			close(att.done)
		}()
	}
	w.WriteHeader(http.StatusOK)
	fw.writeJSON(agent.FrameStarted, agent.Started{Pid: p.pid})

	ps := &procState{}
	var wg sync.WaitGroup
	pumps := []*os.File{outR}
	wg.Add(1)
	go s.pump(&wg, outR, agent.FrameStdout, fw, ps, nil)
	if errR != nil {
		pumps = append(pumps, errR)
		wg.Add(1)
		go s.pump(&wg, errR, agent.FrameStderr, fw, ps, nil)
	}
	hdr := &resultHeader{}
	if sp.result != nil {
		pumps = append(pumps, sp.result)
		wg.Add(1)
		go s.pump(&wg, sp.result, agent.FrameResult, fw, ps, hdr)
		sp.result = nil // the pump closes it
	}
	if inW != nil {
		go func() {
			_, err := io.Copy(inW, sp.stdin)
			if err != nil && att != nil {
				return // the channel ended: an attach carries stdin on
			}
			if ptmx == nil { // a terminal stays open: its pump closes it
				inW.Close()
			}
		}()
	}

	var timedOut atomic.Bool
	var timer *agent.Deadline
	if sp.timeout > 0 {
		timer = timeouts.Start(sp.timeout, func() {
			timedOut.Store(true)
			table.killGroupAndEscaped(p)
		})
	}
	ended := make(chan struct{})
	defer close(ended)
	var settled atomic.Bool // the command ended by itself (or its harness said it is done)
	go func() {
		select {
		case <-r.Context().Done(): // the host cancelled: the stream was reset
			// The context also ends when the handler returns: a command that ended by
			// itself leaves its group alone (a background job of it keeps running).
			switch {
			case settled.Load():
			case att != nil:
				att.lost(0)
			default:
				table.killGroupAndEscaped(p)
			}
		case <-ended:
		}
	}()

	var st exitStatus
	early := false       // the harness said it is done; the process may still be exiting
	if len(pumps) == 3 { // a harness run: it may say it is done before it has exited
		closed := make(chan struct{})
		go func() {
			wg.Wait()
			close(closed)
		}()
		select {
		case st = <-p.done:
		case <-closed:
			if early = hdr.seen && hdr.Exit != nil && !timedOut.Load(); !early {
				st = <-p.done
			}
		}
	} else {
		st = <-p.done
	}
	settled.Store(true)
	duration := time.Since(started)
	if timer != nil {
		timeouts.Stop(timer)
	}
	if !early {
		ps.exitAt.Store(time.Now().UnixNano())
		ps.exited.Store(true)
		for _, f := range pumps {
			f.SetReadDeadline(time.Now().Add(drainIdle))
		}
		wg.Wait()
	}
	if inW != nil && ptmx == nil {
		inW.Close()
	}

	ex := agent.Exit{DurationMs: duration.Milliseconds(), TimedOut: timedOut.Load()}
	switch {
	case early:
		ex.ExitCode = *hdr.Exit
	case st.ws.Exited():
		ex.ExitCode = st.ws.ExitStatus()
	case st.ws.Signaled():
		ex.ExitCode = 128 + int(st.ws.Signal())
		ex.Signal = unix.SignalName(st.ws.Signal())
	}
	if sp.finish != nil {
		sp.finish(&ex, hdr, fw)
	}
	if len(ex.Error) > maxErrorLen {
		ex.Error = ex.Error[:maxErrorLen] + "…"
	}
	ex.DiskFull = s.diskFull()
	s.syncWorkspace()
	table.forget(p)
	fw.writeJSON(agent.FrameExit, ex)
}

// framePool holds buffers of one frame, header included.
var framePool = sync.Pool{New: func() any {
	b := make([]byte, agent.FrameHeaderLen+agent.MaxFrame)
	return &b
}}

// pump copies one pipe to frames of kind. With hdr set, the first line is the harness's
// status line, parsed into hdr, and the rest is the result.
func (s *Server) pump(wg *sync.WaitGroup, f *os.File, kind byte, fw *frameWriter, ps *procState, hdr *resultHeader) {
	defer wg.Done()
	defer f.Close()
	bp := framePool.Get().(*[]byte)
	buf := *bp
	reuse := true
	defer func() {
		// After a failed write the connection may still be sending from buf: let it be.
		if reuse {
			framePool.Put(bp)
		}
	}()
	var line []byte
	inHeader := hdr != nil
	for {
		if ps.exited.Load() {
			if time.Since(time.Unix(0, ps.exitAt.Load())) > drainMax {
				return
			}
			f.SetReadDeadline(time.Now().Add(drainIdle))
		}
		n, err := readDrain(f, buf[agent.FrameHeaderLen:])
		off := agent.FrameHeaderLen
		if n > 0 && inHeader {
			data := buf[off : off+n]
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				line = append(line, data...)
				n = 0
				if len(line) > maxHeaderLine {
					return // not a harness talking: no result
				}
			} else {
				line = append(line, data[:i]...)
				inHeader = false
				if json.Unmarshal(line, hdr) == nil {
					hdr.seen = true
				}
				line = nil
				off += i + 1
				n -= i + 1
			}
		}
		if n > 0 {
			frame := buf[off-agent.FrameHeaderLen : off+n]
			agent.PutFrameHeader(frame, kind, n)
			if fw.write(frame) != nil {
				reuse = false
				return // the host is gone; closing the pipe stops the writer
			}
		}
		if err != nil {
			return
		}
	}
}

// readDrain reads from f like f.Read. When f's drain deadline has passed, Go's poller fails
// the read before looking at the pipe, so a pump that was not scheduled in time (a loaded
// host) would lose bytes the process wrote before it ended — a run's result among them. It
// then takes what the pipe already holds without waiting, and reports the deadline only
// when nothing is there.
func readDrain(f *os.File, p []byte) (int, error) {
	n, err := f.Read(p)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	rc, rerr := f.SyscallConn()
	if rerr != nil {
		return 0, err
	}
	f.SetReadDeadline(time.Time{})
	var m int
	var serr error
	if rerr := rc.Read(func(fd uintptr) bool {
		m, serr = syscall.Read(int(fd), p)
		return true // one try: never wait here
	}); rerr != nil {
		return 0, err
	}
	switch {
	case m > 0:
		return m, nil
	case m == 0 && serr == nil:
		return 0, io.EOF
	}
	return 0, err
}

// buildEnv merges the request's env over the base environment.
func (s *Server) buildEnv(req map[string]string) (map[string]string, error) {
	env := s.baseEnv()
	for k, v := range req {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("env %q: names cannot be empty or hold '=' or NUL, values cannot hold NUL", k)}
		}
		env[k] = v
	}
	return env, nil
}

func envList(env map[string]string) []string {
	l := make([]string, 0, len(env))
	for k, v := range env {
		l = append(l, k+"="+v)
	}
	sort.Strings(l)
	return l
}

// cwd resolves a process's working directory. Relative paths (and absolute ones under
// /workspace) resolve beneath the workspace: climbing out is an error (err). Other absolute
// paths are the sandbox's own. A directory that is not there is a start error.
func (s *Server) cwd(p string) (dir, startErr string, err error) {
	if p == "" {
		return s.ws.Path, "", nil
	}
	rel, rerr := s.ws.Rel(p)
	if rerr != nil {
		if path.IsAbs(p) && !agent.IsCode(rerr, agent.CodeInvalid) {
			return path.Clean(p), "", nil
		}
		return "", "", rerr
	}
	fd, oerr := s.ws.Open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if oerr != nil {
		if agent.IsCode(oerr, agent.CodePathOutside) {
			return "", "", oerr
		}
		var ae *agent.Error
		errors.As(oerr, &ae)
		return "", "cwd " + ae.Message, nil
	}
	unix.Close(fd)
	return filepath.Join(s.ws.Path, rel), "", nil
}

// lookPath finds file in the child's PATH (relative names resolve against the child's dir).
func lookPath(file, pathEnv, dir string) (string, string) {
	check := func(p string) error {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() {
			return syscall.EISDIR
		}
		if st.Mode()&0o111 == 0 {
			return syscall.EACCES
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", fmt.Sprintf("exec %q: %v", file, err)
		}
		return file, ""
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if check(p) == nil {
			if !filepath.IsAbs(p) {
				p = "./" + p
			}
			return p, ""
		}
	}
	return "", fmt.Sprintf("exec %q: executable file not found in $PATH", file)
}

// syncWorkspace writes the workspace's dirty data to its disk, when Options.SyncWorkspace.
func (s *Server) syncWorkspace() {
	if !s.opts.SyncWorkspace {
		return
	}
	// ws.fd is an O_PATH descriptor, which syncfs refuses (EBADF).
	fd, err := unix.Open(s.ws.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		s.log.Warn("sync the workspace", "err", err)
		return
	}
	if err := unix.Syncfs(fd); err != nil {
		s.log.Warn("sync the workspace", "err", err)
	}
	unix.Close(fd)
}

// diskFull reports whether the workspace filesystem is (nearly) out of space or inodes.
func (s *Server) diskFull() bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(s.ws.fd, &st); err != nil {
		return false
	}
	if st.Files > 0 && st.Ffree == 0 {
		return true
	}
	return st.Blocks > 0 && st.Bavail*uint64(st.Bsize) < diskFullBytes(uint64(st.Bsize), st.Blocks*uint64(st.Bsize), goruntime.NumCPU())
}

// diskFullBytes is the free space below which the workspace counts as full. ext4 refuses a
// write with ENOSPC while statfs still shows free space: below its free-cluster watermark
// (4 × the per-CPU counter batch, max(32, 2 × CPUs), × CPUs, in clusters) it stops delayed
// allocation and accounts every dirty page's worst case. A 64 MiB disk on 2 CPUs refused a
// 1 MiB write with 434–691 KiB free (the layout decides which). So the line is one and a half
// watermarks, never under 1 MiB, and (on many CPUs) never over an eighth of the disk.
func diskFullBytes(bsize, size uint64, cpus int) uint64 {
	n := uint64(max(cpus, 1))
	watermark := 4 * max(32, 2*n) * n * bsize
	return max(1<<20, min(watermark+watermark/2, size/8))
}
