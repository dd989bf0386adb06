package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// An interpreter forked by the host's zygote (PrestartRequest.ZygoteSocket) was not started
// by the agent: it arrives with the sandbox's namespaces, cgroups and privileges, connects to
// the abstract unix socket the agent listens on for it, and passes its pipe ends: the request's
// write end, the result's read end, stdout's and stderr's read ends, and its parent's control
// socket (its exit status; signals). The agent answers the environment and working directory
// its own interpreters get, and from then on treats it as one it pre-started.

// adoptTimeout bounds the wait for the zygote's interpreter to connect.
const adoptTimeout = 10 * time.Second

// validSocketName reports whether name is 1-64 of [A-Za-z0-9_.-] (^[A-Za-z0-9_.-]{1,64}$): a
// hand check, as no regexp is compiled at a sandbox's start.
func validSocketName(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// zygoteFiles are the files the interpreter passes, in this order.
const zygoteFiles = 5

func (s *Server) adoptWarm(ctx context.Context, lang, socket string) (*warmProc, error) {
	if lang != agent.LangPython {
		return nil, &agent.Error{Code: agent.CodeInvalid, Message: "a zygote's interpreter is python"}
	}
	if !validSocketName(socket) {
		return nil, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("zygote socket %q: want 1-64 of [A-Za-z0-9_.-]", socket)}
	}
	fail := func(format string, a ...any) (*warmProc, error) {
		return nil, &agent.Error{Code: agent.CodeInternal, Message: "adopting the zygote's interpreter: " + fmt.Sprintf(format, a...)}
	}
	l, err := listenAbstract(socket)
	if err != nil {
		return fail("listen: %v", err)
	}
	defer l.Close()
	dl := time.Now().Add(adoptTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	l.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn, err := l.AcceptUnix()
	if err != nil {
		return fail("accept: %v", err)
	}
	defer conn.Close()
	l.Close() // one connection only
	conn.SetDeadline(dl)

	// Only uid 0 of this sandbox, in its pid namespace (a peer outside it reads as pid 0).
	var cred *unix.Ucred
	rc, err := conn.SyscallConn()
	if err != nil {
		return fail("%v", err)
	}
	rc.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return fail("peer credentials: %v", err)
	}
	if cred.Uid != 0 || cred.Pid <= 0 {
		return fail("peer uid %d pid %d: want uid 0 of this sandbox", cred.Uid, cred.Pid)
	}
	buf := make([]byte, 1024)
	oob := make([]byte, unix.CmsgSpace(4*(zygoteFiles+1)))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail("read: %v", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		unix.CloseOnExec(fd)
		unix.SetNonblock(fd, true) // pollable: read deadlines end the discarding at the claim
		files[i] = os.NewFile(uintptr(fd), "zygote")
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var hello struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(buf[:n], &hello); err != nil || len(files) != zygoteFiles || hello.PID != int(cred.Pid) {
		closeAll()
		return fail("got %d files and %q from pid %d", len(files), buf[:n], cred.Pid)
	}
	setup, _ := json.Marshal(struct {
		Env map[string]string `json:"env"`
		Cwd string            `json:"cwd"`
	}{s.baseEnv(), s.ws.Path})
	if _, err := conn.Write(setup); err != nil {
		closeAll()
		return fail("answer: %v", err)
	}
	conn.CloseWrite()
	p := table.foreign(hello.PID, files[4])
	return s.awaitReady(ctx, &warmProc{lang: lang, p: p, reqW: files[0], resR: files[1], outR: files[2], errR: files[3]})
}

// PythonHarness is the python run() harness's source: the host's zygote loads the same one
// (cmd/lbb-agent passes it to nsinit.MaybeZygote).
func PythonHarness() string { return pythonHarness }

// listenAbstract listens on the abstract unix socket name with a backlog of one: the
// interpreter is its only client. Not net.ListenUnix, whose first call in a process reads
// /proc/sys/net/core/somaxconn for the backlog: a path walk in a procfs the sandbox mounted
// a moment ago, about 0.15 ms of each slot's CPU.
func listenAbstract(name string) (*net.UnixListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "@"+name)
	defer f.Close() // FileListener holds a duplicate
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return l.(*net.UnixListener), nil
}
