//go:build linux

// Package zygote is the ns driver's fork server for python: one interpreter per image (Z)
// that imported the run() harness, numpy and pandas once, from which each sandbox's
// pre-started interpreter is forked copy-on-write into the sandbox's namespaces, cgroups and
// privileges. Z runs the agent binary's zygote init (nsinit.MaybeZygote), then the image's python3; it is
// reachable only through the socketpair this package holds. See docs/architecture.md,
// "Zygote", for the design and why nothing of one sandbox reaches another.
package zygote

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/ns/nsinit"
)

// Config says which zygote to run.
type Config struct {
	// Agent is the lbb-agent binary (its zygote init mode).
	Agent string
	// Image is the image's root file system on the host.
	Image string
	// Imports are what Z imports; the interpreters it forks have them loaded.
	Imports []string
	Logger  *slog.Logger
}

// readyTimeout bounds Z's start: python importing numpy and pandas.
const readyTimeout = time.Minute

// Zygote is one image's fork server, started at its first Spawn and again after it died.
type Zygote struct {
	cfg Config

	mu   sync.Mutex // one spawn at a time: a request and its answer
	proc *zproc
	// Starts counts Z's starts (tests check a restart).
	starts int
	// failed is the last start's failure and when: no new start is tried for retryAfter, so
	// that a broken image does not hold up every slot's build (each falls back at once).
	failed   error
	failedAt time.Time
}

// retryAfter is how long a failed start is not tried again.
const retryAfter = 30 * time.Second

type zproc struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	done chan struct{}
}

// New answers a zygote for cfg; nothing starts yet.
func New(cfg Config) *Zygote {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Zygote{cfg: cfg}
}

// Spawn is what a spawn needs to know of the sandbox.
type Spawn struct {
	// InitPID is the host pid of the sandbox's PID 1 (the agent): its namespaces are joined.
	InitPID int
	// CgroupDirs are the sandbox's cgroup directories (one per v1 hierarchy).
	CgroupDirs []string
	// Socket is the abstract unix socket name the agent listens on for the interpreter.
	Socket    string
	Hardening nsinit.ForkHardening
}

// namespaces in the order the zygote's child joins them (user first: it grants the rest).
var namespaces = []string{"user", "mnt", "net", "ipc", "uts", "cgroup", "pid"}

type request struct {
	ID     uint64               `json:"id"`
	FDs    []string             `json:"fds"`
	Socket string               `json:"socket"`
	Harden nsinit.ForkHardening `json:"harden"`
}

type answer struct {
	PID   int    `json:"pid"`
	Error string `json:"error"`
}

// Spawn forks an interpreter into the sandbox: it answers once Z has forked the process that
// joins the sandbox (the interpreter reports to the sandbox's agent, not here). It answers
// the host pid of that process.
func (z *Zygote) Spawn(ctx context.Context, sp Spawn) (int, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	req := request{Socket: sp.Socket, Harden: sp.Hardening}
	for _, n := range namespaces {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", sp.InitPID, n))
		if err != nil {
			return 0, fmt.Errorf("zygote: sandbox namespace: %w", err)
		}
		files = append(files, f)
		req.FDs = append(req.FDs, n)
	}
	for _, d := range sp.CgroupDirs {
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			return 0, fmt.Errorf("zygote: sandbox cgroup: %w", err)
		}
		files = append(files, f)
		req.FDs = append(req.FDs, "cgroup.procs")
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	zp, err := z.running(ctx)
	if err != nil {
		return 0, err
	}
	req.ID = uint64(time.Now().UnixNano())
	msg, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		zp.conn.SetDeadline(dl)
	} else {
		zp.conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	defer zp.conn.SetDeadline(time.Time{})
	if _, _, err := zp.conn.WriteMsgUnix(msg, unix.UnixRights(fds...), nil); err != nil {
		z.stopLocked()
		return 0, fmt.Errorf("zygote: send: %w", err)
	}
	buf := make([]byte, 64<<10)
	n, err := zp.conn.Read(buf)
	if err != nil {
		z.stopLocked()
		return 0, fmt.Errorf("zygote: answer: %w", err)
	}
	var a answer
	if err := json.Unmarshal(buf[:n], &a); err != nil {
		z.stopLocked()
		return 0, fmt.Errorf("zygote: answer %q: %w", buf[:n], err)
	}
	if a.Error != "" {
		return 0, fmt.Errorf("zygote: %s", a.Error)
	}
	return a.PID, nil
}

// PID answers Z's host pid, 0 when it is not running (tests).
func (z *Zygote) PID() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.proc == nil {
		return 0
	}
	select {
	case <-z.proc.done:
		return 0
	default:
	}
	return z.proc.cmd.Process.Pid
}

// Starts answers how many times Z was started.
func (z *Zygote) Starts() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.starts
}

// running answers a live Z, starting one when there is none or it died. z.mu is held.
func (z *Zygote) running(ctx context.Context) (*zproc, error) {
	if z.proc != nil {
		select {
		case <-z.proc.done:
			z.cfg.Logger.Warn("zygote: it exited; starting it again", "image", z.cfg.Image)
			z.stopLocked()
		default:
			return z.proc, nil
		}
	}
	if z.failed != nil && time.Since(z.failedAt) < retryAfter {
		return nil, z.failed
	}
	zp, err := z.start(ctx)
	if err != nil {
		if ctx.Err() == nil {
			z.failed, z.failedAt = err, time.Now()
		}
		return nil, err
	}
	z.failed = nil
	z.proc = zp
	z.starts++
	return zp, nil
}

func (z *Zygote) start(ctx context.Context) (_ *zproc, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("zygote: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "zygote"), os.NewFile(uintptr(pair[1]), "zygote-child")
	defer theirs.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer cfgR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		ours.Close()
		cfgW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       z.cfg.Agent,
		Args:       []string{"lbb-zygote", nsinit.ZygoteArg},
		Env:        []string{},
		Stdout:     outW,
		Stderr:     outW,
		ExtraFiles: []*os.File{theirs, cfgR}, // fds 3, 4
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	outW.Close()
	if err != nil {
		ours.Close()
		cfgW.Close()
		outR.Close()
		return nil, fmt.Errorf("zygote: start: %w", err)
	}
	zp := &zproc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(zp.done)
	}()
	defer func() {
		if err != nil {
			cmd.Process.Kill()
			<-zp.done
			ours.Close()
		}
	}()
	cfg := nsinit.ZygoteConfig{
		Image:   z.cfg.Image,
		Imports: z.cfg.Imports,
		Env:     []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"},
	}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		cfgW.Close()
		outR.Close()
		return nil, fmt.Errorf("zygote: config: %w", err)
	}
	cfgW.Close()
	// Z says "ready" on stdout once its imports are done; the rest of its output is logged.
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		said := false
		var last string
		for sc.Scan() {
			if !said && sc.Text() == "ready" {
				said = true
				ready <- nil
				continue
			}
			last = sc.Text()
			z.cfg.Logger.Warn("zygote", "image", z.cfg.Image, "msg", last)
		}
		outR.Close()
		if !said {
			ready <- fmt.Errorf("zygote exited before it was ready: %s", last)
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	select {
	case err = <-ready:
	case <-tctx.Done():
		err = fmt.Errorf("zygote: not ready: %w", tctx.Err())
	}
	if err != nil {
		return nil, err
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	zp.conn = c.(*net.UnixConn)
	z.cfg.Logger.Debug("zygote: started", "image", z.cfg.Image, "pid", cmd.Process.Pid)
	return zp, nil
}

// stopLocked kills Z and waits for it. Its children (interpreters' parents) live on with their
// sandboxes: they are in the sandboxes' cgroups and end with them.
func (z *Zygote) stopLocked() {
	zp := z.proc
	if zp == nil {
		return
	}
	z.proc = nil
	zp.cmd.Process.Kill()
	<-zp.done
	if zp.conn != nil {
		zp.conn.Close()
	}
}

// Close stops Z.
func (z *Zygote) Close() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.stopLocked()
	return nil
}

// Children answers the host pids of Z's live children (tests: none once the sandboxes are gone).
func (z *Zygote) Children() []int {
	pid := z.PID()
	if pid == 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
