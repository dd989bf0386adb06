// Package local is a runtime driver with NO isolation, for development and unit tests only:
// never a default, never for code you did not write. It runs the guest agent as a plain
// host subprocess, on a socketpair like every driver, with the sandbox's workspace a
// directory under a state directory. Processes run as the calling user with the host's
// whole file system, network and process table in view; limits are not enforced.
//
// It lets the service's tests run without root. What differs from a real sandbox:
//   - Inside commands, /workspace does not exist: their working directory (and the agent's
//     file calls, which accept /workspace/… paths) is <StateDir>/<id>/workspace.
//   - Limits (memory, pids, CPU, disk) and the hostname are ignored; Stats counts the CPU and
//     memory of the agent's process tree only.
//   - A process that leaves the agent's tree (a daemon that double-forks and setsid()s) may
//     outlive Stop.
//
// Layout: <StateDir>/<id>/{spec.json, workspace/, etc/, home/, tmp/}; home is the HOME of
// processes. Stop ends the processes and
// keeps the directory; Destroy removes it.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
)

// Options configure the driver.
type Options struct {
	// AgentPath is the lbb-agent binary.
	AgentPath string
	// StateDir holds one directory per sandbox.
	StateDir string
	// Path is the PATH of processes in sandboxes; default the host's PATH.
	Path   string
	Logger *slog.Logger
}

// Driver is the local driver. Its methods are safe for concurrent use.
type Driver struct {
	opts Options
	sbs  driverkit.Sandboxes[*sandbox]
}

var (
	_ runtime.Driver    = (*Driver)(nil)
	_ runtime.InitPIDer = (*sandbox)(nil)
)

// New makes a local driver.
func New(opts Options) *Driver {
	if opts.Path == "" {
		opts.Path = os.Getenv("PATH")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{opts: opts}
	d.sbs = driverkit.Sandboxes[*sandbox]{Dir: opts.StateDir, Halt: d.halt, Log: opts.Logger}
	return d
}

// Name is "local".
func (d *Driver) Name() string { return "local" }

// Requirements: the agent binary, and a state directory that can be made.
func (d *Driver) Requirements() []runtime.Requirement {
	return []runtime.Requirement{
		{Name: "the lbb-agent binary", Check: func() error {
			if d.opts.AgentPath == "" {
				return errors.New("no agent path configured")
			}
			st, err := os.Stat(d.opts.AgentPath)
			if err != nil {
				return err
			}
			if st.IsDir() || st.Mode()&0o111 == 0 {
				return fmt.Errorf("%s is not an executable file", d.opts.AgentPath)
			}
			return nil
		}},
		{Name: "the state directory", Check: func() error {
			if d.opts.StateDir == "" {
				return errors.New("no state directory configured")
			}
			return os.MkdirAll(d.opts.StateDir, 0o755)
		}},
	}
}

// Create makes the sandbox's directories; no process runs. They are the caller's alone
// (0700): the agent runs as the caller.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) error {
	if err := driverkit.CheckID(spec.ID); err != nil {
		return err
	}
	unlock := d.sbs.Lock(spec.ID)
	defer unlock()
	return d.sbs.Create(ctx, spec.ID, driverkit.Layout{
		Dirs:      []string{"workspace", "etc", "home", "tmp"},
		DirMode:   0o700,
		StateFile: "spec.json",
		State:     spec,
	})
}

// readyTimeout bounds how long Start waits for the agent to speak.
const readyTimeout = 30 * time.Second

// Start runs the agent and returns once it has spoken on the channel.
func (d *Driver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	return d.sbs.Start(ctx, id, func() (*sandbox, error) {
		if _, err := os.Stat(d.sbs.Path(id, "spec.json")); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, driverkit.NotFound(id)
			}
			return nil, err
		}
		return d.start(ctx, id)
	})
}

func (d *Driver) start(ctx context.Context, id string) (*sandbox, error) {
	dir := d.sbs.Path(id)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	hostEnd, guestEnd := os.NewFile(uintptr(fds[0]), "channel"), os.NewFile(uintptr(fds[1]), "channel")
	defer guestEnd.Close()
	cmd := exec.Command(d.opts.AgentPath,
		"--fd", "3",
		"--workspace", filepath.Join(dir, "workspace"),
		"--etc-dir", filepath.Join(dir, "etc"),
		"--home", filepath.Join(dir, "home"),
		"--path", d.opts.Path)
	cmd.Env = []string{"PATH=" + d.opts.Path, "LANG=C.UTF-8", "TMPDIR=" + filepath.Join(dir, "tmp"), "HOME=" + os.Getenv("HOME")}
	cmd.Dir = filepath.Join(dir, "workspace")
	cmd.ExtraFiles = []*os.File{guestEnd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logR, logW, err := os.Pipe()
	if err != nil {
		hostEnd.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logW, logW
	if err := cmd.Start(); err != nil {
		hostEnd.Close()
		logR.Close()
		logW.Close()
		return nil, fmt.Errorf("starting the agent: %w", err)
	}
	logW.Close()
	log := d.opts.Logger.With("sandbox", id)
	go driverkit.LogAgent(log, logR)
	sb := &sandbox{id: id, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(sb.done)
	}()
	fail := func(err error) (*sandbox, error) {
		hostEnd.Close()
		cmd.Process.Kill()
		<-sb.done
		return nil, err
	}
	conn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		return fail(fmt.Errorf("channel: %w", err))
	}
	sb.conn = conn
	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := agent.WaitReady(wctx, conn); err != nil {
		conn.Close()
		return fail(fmt.Errorf("the agent did not start: %w", err))
	}
	log.Debug("sandbox started", "pid", cmd.Process.Pid)
	return sb, nil
}

// Stop kills every process of the sandbox and the agent; the directory stays.
func (d *Driver) Stop(ctx context.Context, id string) error { return d.sbs.Stop(ctx, id) }

// Destroy stops the sandbox and removes its directory. An unknown id is not an error.
func (d *Driver) Destroy(ctx context.Context, id string) error { return d.sbs.Destroy(ctx, id) }

// List names the sandboxes with a directory.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.sbs.List() }

// halt stops sandbox id if this driver started it: nothing of a sandbox outlives the driver
// that started it (the agent dies with it: Pdeathsig).
func (d *Driver) halt(ctx context.Context, id string) error {
	if sb, ok := d.sbs.Take(id); ok {
		sb.stop(ctx)
	}
	return nil
}

type sandbox struct {
	id   string
	conn net.Conn
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *sandbox) ID() string            { return s.id }
func (s *sandbox) Conn() net.Conn        { return s.conn }
func (s *sandbox) Done() <-chan struct{} { return s.done }

// InitPID is the agent's host pid.
func (s *sandbox) InitPID() int { return s.cmd.Process.Pid }

// stop kills the agent's process tree (its descendants all are in it: the agent is their
// subreaper), then closes the channel so that the agent exits, and kills it if it does not.
func (s *sandbox) stop(ctx context.Context) {
	pid := s.cmd.Process.Pid
	for range 10 {
		if killTree(pid) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.conn.Close()
	select {
	case <-s.done:
		return
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	s.cmd.Process.Kill()
	<-s.done
}

// Stats sums the CPU time and resident memory of the agent and its descendants.
func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	var st runtime.Stats
	select {
	case <-s.done:
		return st, nil
	default:
	}
	pids := append(descendants(s.cmd.Process.Pid), s.cmd.Process.Pid)
	tick := uint64(100) // USER_HZ
	page := uint64(os.Getpagesize())
	for _, pid := range pids {
		f, err := procStat(pid)
		if err != nil {
			continue
		}
		utime, _ := strconv.ParseUint(f[13], 10, 64)
		stime, _ := strconv.ParseUint(f[14], 10, 64)
		rss, _ := strconv.ParseUint(f[23], 10, 64)
		st.CPUNanos += (utime + stime) * uint64(time.Second) / tick
		st.MemoryBytes += rss * page
		st.Pids++
	}
	return st, nil
}

// procStat returns the fields of /proc/pid/stat, the command name counted as one.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("bad stat")
	}
	f := append([]string{s[:strings.IndexByte(s, ' ')], "comm"}, strings.Fields(s[i+1:])...)
	if len(f) < 24 {
		return nil, errors.New("short stat")
	}
	return f, nil
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(p)
		if err != nil {
			continue
		}
		pp, _ := strconv.Atoi(f[3])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// killTree SIGKILLs every live (not zombie) descendant of pid and says how many there were.
func killTree(pid int) int {
	n := 0
	for _, p := range descendants(pid) {
		if f, err := procStat(p); err == nil && f[2] != "Z" {
			syscall.Kill(p, syscall.SIGKILL)
			n++
		}
	}
	return n
}
