package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The agent runs its own process table. Exits are collected ONLY by one reaper loop (a
// blocking wait4(-1)), which also reaps every orphan that the kernel reparents to the agent
// (it is PID 1 in a sandbox, and a child subreaper elsewhere). A started process registers
// its pid before the reaper may look it up: starts hold startMu for reading across fork and
// registration, and the reaper takes it for writing before dispatching a pid, so a child
// that exits at once is never mistaken for an orphan.

type exitStatus struct {
	ws syscall.WaitStatus
	ru syscall.Rusage
}

// proc is one started process, the leader of its own process group.
type proc struct {
	id   string
	pid  int
	done chan exitStatus // receives the leader's exit, once
	// seq numbers starts; othersAtStart says another process was live when this one started.
	// Together they tell whether an orphan can only have come from this process.
	seq           uint64
	othersAtStart bool
	// pty is the terminal's master side of a process started on one (nil otherwise).
	pty *os.File
	// ctl is a foreign process's parent's socket (see foreign): signals go through it.
	ctl *os.File
}

// signal signals the process group; a group that is already gone is not an error.
func (p *proc) signal(sig syscall.Signal) error {
	if p.ctl != nil {
		// Its Landlock domain is not below the agent's: the kernel refuses the agent's
		// signals to it (scoping), and its parent, outside the sandbox's pid namespace,
		// relays them. The direct kill below still serves kernels without scoping.
		p.ctl.Write([]byte{byte(sig)})
		syscall.Kill(-p.pid, sig)
		return nil
	}
	err := syscall.Kill(-p.pid, sig)
	if err == syscall.ESRCH {
		return nil
	}
	return err
}

type procTable struct {
	startMu sync.RWMutex
	mu      sync.Mutex
	byPid   map[int]*proc      // started, not yet reaped
	byID    map[string]*proc   // from start until its stream ends
	live    map[*proc]struct{} // from start until its stream ends
	seq     uint64             // counts starts
	kick    chan struct{}      // wakes the reaper when it had no child
	once    sync.Once
	// asRoot: the agent runs as a real uid of its own (Options.RootProcesses) and gives
	// the processes it starts uid 0.
	asRoot bool
}

// table is the process table: there is one reaper per process, so one table.
var table = &procTable{
	byPid: map[int]*proc{},
	byID:  map[string]*proc{},
	live:  map[*proc]struct{}{},
	kick:  make(chan struct{}, 1),
}

var errDuplicateID = errors.New("a process with this id is running")

type startSpec struct {
	id    string
	path  string // the executable, resolved
	argv  []string
	env   []string
	dir   string
	files []uintptr // the child's fds 0, 1, 2, 3…
	// pdeathsig kills the child when the agent dies; only needed when the agent is not the
	// sandbox's PID 1 (whose death ends every process of the namespace).
	pdeathsig bool
	// pty: the child leads a new session whose controlling terminal is its fd 0, and
	// master is that terminal's other side.
	pty *os.File
}

func (t *procTable) start(sp startSpec) (*proc, error) {
	t.once.Do(func() { go t.reap() })
	p := &proc{id: sp.id, done: make(chan exitStatus, 1), pty: sp.pty}
	t.mu.Lock()
	if sp.id != "" {
		if _, dup := t.byID[sp.id]; dup {
			t.mu.Unlock()
			return nil, errDuplicateID
		}
		t.byID[sp.id] = p
	}
	t.seq++
	p.seq, p.othersAtStart = t.seq, len(t.live) > 0
	t.live[p] = struct{}{}
	t.mu.Unlock()

	sys := &syscall.SysProcAttr{Setpgid: true}
	if sp.pty != nil {
		// A new session's leader leads its own process group too (pgid = pid), so signals
		// to -pid reach the same processes as for the others.
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if t.asRoot {
		// The agent's own real uid (lbb-agent --uid) is not its processes': they run as root.
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
	if sp.pdeathsig {
		sys.Pdeathsig = syscall.SIGKILL
	}
	t.startMu.RLock()
	pid, err := syscall.ForkExec(sp.path, sp.argv, &syscall.ProcAttr{
		Dir: sp.dir, Env: sp.env, Files: sp.files, Sys: sys,
	})
	if err == nil {
		t.mu.Lock()
		p.pid = pid
		t.byPid[pid] = p
		t.mu.Unlock()
	}
	t.startMu.RUnlock()
	if err != nil {
		t.release(p)
		return nil, err
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
	// The host sets the agent's own oom_score_adj to -1000 so that the OOM killer never
	// picks it; give user processes the normal score back. A child that forks within the
	// microseconds before this write leaves a grandchild at -1000 (the price of not
	// interposing a trampoline between fork and exec). Unprivileged, this may fail: fine.
	os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
	return p, nil
}

// foreign registers a process the agent did not start and whose parent is not the agent: an
// interpreter forked into the sandbox by the host's zygote (zygote.go). The reaper never sees
// its exit (only orphans of its own descendants); its parent, outside the sandbox's pid
// namespace, waits for it and writes its wait status and rusage on ctl as one JSON line, and
// relays the signal numbers written to ctl.
func (t *procTable) foreign(pid int, ctl *os.File) *proc {
	p := &proc{pid: pid, done: make(chan exitStatus, 1), ctl: ctl}
	t.mu.Lock()
	t.seq++
	p.seq, p.othersAtStart = t.seq, len(t.live) > 0
	t.live[p] = struct{}{}
	t.mu.Unlock()
	go func() { p.done <- readForeignStatus(ctl) }()
	return p
}

// readForeignStatus reads a foreign process's exit from its parent; a parent gone without
// saying it reads as a kill.
func readForeignStatus(ctl *os.File) exitStatus {
	var line struct {
		Status  int   `json:"status"`
		UtimeUS int64 `json:"utime_us"`
		StimeUS int64 `json:"stime_us"`
		MaxRSS  int64 `json:"maxrss"`
	}
	st := exitStatus{ws: syscall.WaitStatus(syscall.SIGKILL)}
	b, err := bufio.NewReaderSize(ctl, 512).ReadBytes('\n')
	if err == nil && json.Unmarshal(b, &line) == nil {
		st.ws = syscall.WaitStatus(line.Status)
		st.ru.Utime = syscall.NsecToTimeval(line.UtimeUS * 1000)
		st.ru.Stime = syscall.NsecToTimeval(line.StimeUS * 1000)
		st.ru.Maxrss = line.MaxRSS
	}
	return st
}

// adopt gives a process started without an id (a pre-started interpreter) the id of the
// command it now runs.
func (t *procTable) adopt(p *proc, id string) error {
	if id == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.byID[id]; dup {
		return errDuplicateID
	}
	p.id = id
	t.byID[id] = p
	return nil
}

// forget drops p's id once its exit is known, before the exit frame is sent: a caller that
// has read the exit and then signals the id gets not_found, not a signal to a dead group.
func (t *procTable) forget(p *proc) {
	t.mu.Lock()
	if p.id != "" && t.byID[p.id] == p {
		delete(t.byID, p.id)
	}
	t.mu.Unlock()
}

// release forgets p once its stream has ended.
func (t *procTable) release(p *proc) {
	t.mu.Lock()
	if p.id != "" && t.byID[p.id] == p {
		delete(t.byID, p.id)
	}
	delete(t.live, p)
	t.mu.Unlock()
	if p.ctl != nil {
		p.ctl.Close()
	}
}

// lookup finds the running process id; nil while it is not started yet.
func (t *procTable) lookup(id string) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.byID[id]; p != nil && p.pid > 0 {
		return p
	}
	return nil
}

// signalAll signals the process group of every process whose stream is open.
func (t *procTable) signalAll(sig syscall.Signal, spare func(pid int) bool) {
	t.mu.Lock()
	ps := make([]*proc, 0, len(t.live))
	for p := range t.live {
		if p.pid > 0 && (spare == nil || !spare(p.pid)) {
			ps = append(ps, p)
		}
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.signal(sig)
	}
}

func (t *procTable) reap() {
	for {
		var st exitStatus
		pid, err := syscall.Wait4(-1, &st.ws, 0, &st.ru)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ECHILD:
			<-t.kick
			continue
		case err != nil:
			time.Sleep(10 * time.Millisecond)
			continue
		}
		t.startMu.Lock() // wait for starts in flight to register their pid
		t.mu.Lock()
		p := t.byPid[pid]
		delete(t.byPid, pid)
		t.mu.Unlock()
		t.startMu.Unlock()
		if p != nil {
			p.done <- st
		}
	}
}
