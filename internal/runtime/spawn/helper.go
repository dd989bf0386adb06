//go:build linux

package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// HelperArg is argv[1] of a helper process (MaybeHelper).
const HelperArg = "__lbb_spawn_helper__"

// maxMessage bounds a request; maxFiles the descriptors it passes.
const (
	maxMessage = 64 << 10
	maxFiles   = 16
)

// Helper starts children in user namespaces of their own from a small process of its own.
//
// Why: Go forks a child that makes a user namespace (CLONE_NEWUSER) without CLONE_VM — the
// child must wait for its parent to write its id maps, which a vfork'd parent could not do —
// so the fork copies the page tables of the whole forking process and write-protects every
// page it has; the forking process then faults on its next write to each. For a server with
// a few hundred MiB of heap that is tens of milliseconds of CPU per sandbox, on the one spawn
// thread. The helper's heap is a few MiB.
//
// The helper forks with CLONE_PARENT: the child is this process's child, not the helper's,
// exactly as if this process had forked it: os.Process.Wait reaps it, and its Pdeathsig
// fires when the thread that started the helper exits (spawn's thread, which lives as long
// as the process). The helper is started at the first Start, and again after it died.
type Helper struct {
	mu   sync.Mutex // one request at a time
	conn *net.UnixConn
	proc *os.Process
}

// request is one child to start, as exec.Cmd and syscall.SysProcAttr say it.
type request struct {
	Path  string   `json:"path"`
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Files []int    `json:"files"` // the child's fds 0, 1, …: an index into the passed fds, or -1 (none)
	// CgroupFD is an index into the passed fds, or -1.
	CgroupFD                   int                    `json:"cgroup_fd"`
	Cloneflags                 uintptr                `json:"cloneflags"`
	UidMappings                []syscall.SysProcIDMap `json:"uid_mappings,omitempty"`
	GidMappings                []syscall.SysProcIDMap `json:"gid_mappings,omitempty"`
	GidMappingsEnableSetgroups bool                   `json:"setgroups,omitempty"`
	Credential                 *syscall.Credential    `json:"credential,omitempty"`
	Setsid                     bool                   `json:"setsid,omitempty"`
	Pdeathsig                  syscall.Signal         `json:"pdeathsig,omitempty"`
	EUID                       uint32                 `json:"euid,omitempty"`
}

type reply struct {
	Pid int    `json:"pid"`
	Err string `json:"err,omitempty"`
}

// Start starts cmd as As(cmd, euid) would, through the helper, and answers its process. path
// is the helper's binary, one whose main calls MaybeHelper first (lbb-agent); a helper
// already running is used whatever its binary.
// cmd's Stdin, Stdout, Stderr and ExtraFiles must be *os.File or nil; cmd itself is not
// started (cmd.Process stays nil): wait for the answer.
//
// A child whose exec fails although its binary is an executable file is left a zombie (the
// helper's Go does not tell its pid).
func (h *Helper) Start(ctx context.Context, path string, cmd *exec.Cmd, euid uint32) (*os.Process, error) {
	req, fds, err := newRequest(cmd, euid)
	if err != nil {
		return nil, err
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(msg) > maxMessage {
		return nil, fmt.Errorf("spawn: request of %d bytes (at most %d)", len(msg), maxMessage)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	pid, err := h.roundTrip(ctx, path, msg, unix.UnixRights(fds...))
	goruntime.KeepAlive(cmd) // its files' fds were sent
	if err != nil {
		return nil, err
	}
	// pid is this process's child: it cannot be reaped, and its pid not reused, before Wait.
	return os.FindProcess(pid)
}

// roundTrip sends one request and reads its reply, starting the helper if none runs. A
// request that could not be sent (the helper had died) is sent once more to a new one.
func (h *Helper) roundTrip(ctx context.Context, path string, msg, oob []byte) (int, error) {
	for attempt := 0; ; attempt++ {
		if h.conn == nil {
			if err := h.start(path); err != nil {
				return 0, err
			}
		}
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Minute)
		}
		_ = h.conn.SetDeadline(deadline)
		if _, _, err := h.conn.WriteMsgUnix(msg, oob, nil); err != nil {
			h.stop()
			if attempt == 0 && ctx.Err() == nil {
				continue
			}
			return 0, fmt.Errorf("spawn helper: %w", err)
		}
		buf := make([]byte, 4096)
		n, _, _, _, err := h.conn.ReadMsgUnix(buf, nil)
		if err == nil && n == 0 {
			err = errors.New("the helper ended")
		}
		if err != nil {
			// The child may or may not have been started; it is not started again.
			h.stop()
			return 0, fmt.Errorf("spawn helper: %w", err)
		}
		var r reply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			h.stop()
			return 0, fmt.Errorf("spawn helper: reply: %w", err)
		}
		if r.Err != "" {
			return 0, errors.New(r.Err)
		}
		return r.Pid, nil
	}
}

// start starts the helper from spawn's thread.
func (h *Helper) start(path string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spawn helper: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawn"), os.NewFile(uintptr(fds[1]), "spawn")
	defer theirs.Close()
	cmd := &exec.Cmd{
		Path:       path,
		Args:       []string{"lbb-spawn-helper", HelperArg},
		Env:        []string{},
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{theirs}, // fd 3
		// It dies with the process that started it; its children's Pdeathsig is tied to the
		// same thread.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if err := Start(cmd); err != nil {
		ours.Close()
		return fmt.Errorf("spawn helper: %w", err)
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		return fmt.Errorf("spawn helper: %w", err)
	}
	h.conn, h.proc = c.(*net.UnixConn), cmd.Process
	return nil
}

// stop ends the helper (it ends at EOF; a kill makes sure) and reaps it.
func (h *Helper) stop() {
	if h.conn == nil {
		return
	}
	h.conn.Close()
	_ = h.proc.Kill()
	_, _ = h.proc.Wait()
	h.conn, h.proc = nil, nil
}

// Close ends the helper; a later Start starts a new one.
func (h *Helper) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stop()
	return nil
}

// Pid is the running helper's pid, or 0 (tests).
func (h *Helper) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return 0
	}
	return h.proc.Pid
}

// newRequest describes cmd, and answers the descriptors to pass with it: its files' and its
// cgroup's (which stays the caller's: no *os.File is made of it, whose finalizer would close
// it).
func newRequest(cmd *exec.Cmd, euid uint32) (request, []int, error) {
	req := request{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, CgroupFD: -1, EUID: euid}
	if cmd.Env == nil {
		return req, nil, errors.New("spawn: cmd.Env must be set (nil would pass the helper's)")
	}
	var fds []int
	add := func(fd int) int {
		fds = append(fds, fd)
		return len(fds) - 1
	}
	child := []any{cmd.Stdin, cmd.Stdout, cmd.Stderr}
	for _, f := range cmd.ExtraFiles {
		child = append(child, f)
	}
	for i, s := range child {
		switch f := s.(type) {
		case nil:
			req.Files = append(req.Files, -1)
		case *os.File:
			if f == nil {
				req.Files = append(req.Files, -1)
				continue
			}
			req.Files = append(req.Files, add(int(f.Fd())))
		default:
			return req, nil, fmt.Errorf("spawn: the child's fd %d is a %T, not an *os.File", i, s)
		}
	}
	if a := cmd.SysProcAttr; a != nil {
		req.Cloneflags = a.Cloneflags
		req.UidMappings, req.GidMappings = a.UidMappings, a.GidMappings
		req.GidMappingsEnableSetgroups = a.GidMappingsEnableSetgroups
		req.Credential, req.Setsid, req.Pdeathsig = a.Credential, a.Setsid, a.Pdeathsig
		if a.UseCgroupFD {
			req.CgroupFD = add(a.CgroupFD)
		}
		if a.Setpgid || a.Setctty || a.Noctty || a.Chroot != "" || a.Unshareflags != 0 || len(a.AmbientCaps) > 0 || a.Foreground || a.PidFD != nil {
			return req, nil, errors.New("spawn: the helper does not pass Setpgid, Setctty, Noctty, Chroot, Unshareflags, AmbientCaps, Foreground or PidFD")
		}
	}
	if len(fds) > maxFiles {
		return req, nil, fmt.Errorf("spawn: %d files (at most %d)", len(fds), maxFiles)
	}
	return req, fds, nil
}

// MaybeHelper serves as a helper when this process was started as one, and never returns
// then. Call it first thing in main.
func MaybeHelper() {
	if len(os.Args) < 2 || os.Args[1] != HelperArg {
		return
	}
	os.Exit(serve(os.NewFile(3, "spawn")))
}

// serve answers requests until the socket ends.
func serve(f *os.File) int {
	// The socket came as fd 3, open across exec. The children must never get it (one that
	// did could ask for anything the helper can do): it moves above the fds a child is given,
	// close-on-exec.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3+maxFiles)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawn helper:", err)
		return 1
	}
	f.Close()
	buf := make([]byte, maxMessage+1)
	oob := make([]byte, unix.CmsgSpace(maxFiles*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "spawn helper:", err)
			return 1
		}
		if n == 0 && oobn == 0 {
			return 0 // the host closed its end
		}
		files, err := received(oob[:oobn])
		var r reply
		if err == nil {
			r.Pid, err = handle(buf[:n], files)
		}
		for _, f := range files {
			f.Close()
		}
		if err != nil {
			r.Err = err.Error()
		}
		b, _ := json.Marshal(r)
		if _, err := unix.Write(fd, b); err != nil {
			fmt.Fprintln(os.Stderr, "spawn helper:", err)
			return 1
		}
	}
}

// received answers the descriptors a message passed.
func received(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

// handle starts one child, this helper's parent's child (CLONE_PARENT), and answers its pid.
func handle(msg []byte, files []*os.File) (int, error) {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return 0, fmt.Errorf("spawn helper: request: %w", err)
	}
	file := func(i int) (*os.File, error) {
		if i == -1 {
			return nil, nil
		}
		if i < 0 || i >= len(files) {
			return nil, fmt.Errorf("spawn helper: file %d of %d", i, len(files))
		}
		return files[i], nil
	}
	if len(req.Files) < 3 {
		return 0, errors.New("spawn helper: fewer than 3 files")
	}
	var child []*os.File
	for _, i := range req.Files {
		f, err := file(i)
		if err != nil {
			return 0, err
		}
		child = append(child, f)
	}
	// Go's child checks, after setting Pdeathsig, that its parent is still the process that
	// forked it, and kills itself if not: with CLONE_PARENT it never is. In a new pid
	// namespace the child is that namespace's init, which ignores the signal; elsewhere it
	// would die at once.
	if req.Pdeathsig != 0 && req.Cloneflags&syscall.CLONE_NEWPID == 0 {
		return 0, errors.New("spawn helper: Pdeathsig needs CLONE_NEWPID")
	}
	cmd := &exec.Cmd{
		Path: req.Path, Args: req.Args, Env: req.Env,
		Stdin: child[0], Stdout: child[1], Stderr: child[2], ExtraFiles: child[3:],
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 req.Cloneflags | syscall.CLONE_PARENT,
			UidMappings:                req.UidMappings,
			GidMappings:                req.GidMappings,
			GidMappingsEnableSetgroups: req.GidMappingsEnableSetgroups,
			Credential:                 req.Credential,
			Setsid:                     req.Setsid,
			Pdeathsig:                  req.Pdeathsig,
		},
	}
	// A child whose exec fails would be left a zombie of the helper's parent (Go reaps it
	// only as its own child, and does not say its pid): what can be known before the fork is.
	if st, err := os.Stat(req.Path); err != nil {
		return 0, fmt.Errorf("spawn helper: %w", err)
	} else if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return 0, fmt.Errorf("spawn helper: %s is not an executable file", req.Path)
	}
	if req.CgroupFD != -1 {
		f, err := file(req.CgroupFD)
		if err != nil || f == nil {
			return 0, fmt.Errorf("spawn helper: cgroup fd: %v", err)
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
	}
	if err := As(cmd, req.EUID); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}
