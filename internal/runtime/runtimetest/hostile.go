package runtimetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func (e *env) hostile(t *testing.T) {
	hashes := map[string]string{}
	var files []string
	for _, pat := range e.opts.HostFiles {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	if exe, err := os.Executable(); err == nil {
		files = append(files, exe)
	}
	for _, f := range files {
		hashes[f] = fileHash(t, f)
	}
	t.Cleanup(func() {
		for f, h := range hashes {
			if got := fileHash(t, f); got != h {
				t.Errorf("host file %s changed", f)
			}
		}
	})

	t.Run("fork bomb", e.known("fork bomb", e.forkBomb))
	t.Run("memory bomb", e.known("memory bomb", e.memoryBomb))
	t.Run("disk fill", e.known("disk fill", e.diskFill))
	t.Run("timeout kills the group", e.known("timeout kills the group", e.timeoutGroup))
	t.Run("timeout kills what left the group", e.known("timeout kills what left the group", e.timeoutSetsid))
	t.Run("cpu quota", e.known("cpu quota", e.cpuQuota))
	t.Run("stdout flood", e.known("stdout flood", e.stdoutFlood))
	t.Run("network", e.known("network", e.network))
	t.Run("host invisible", e.known("host invisible", e.hostInvisible))
	t.Run("privileges", e.known("privileges", e.privileges))
	t.Run("forbidden syscalls", e.known("forbidden syscalls", e.syscalls))
	t.Run("proc self exe", e.known("proc self exe", e.procSelfExe))
	t.Run("descriptors and cwd", e.known("descriptors and cwd", e.descriptors))
	t.Run("path escapes", e.known("path escapes", e.pathEscapes))
	t.Run("agent out of reach", e.known("agent out of reach", e.agentOutOfReach))
	t.Run("no zygote listener", e.known("no zygote listener", e.noZygoteListener))
	t.Run("socket families", e.known("socket families", e.socketFamilies))
	t.Run("signals to init", e.known("signals to init", e.signalsToInit))
	t.Run("devices", e.known("devices", e.devices))
	t.Run("agent's threads", e.known("agent's threads", e.agentThreads))
	t.Run("per-user counters", e.known("per-user counters", e.perUserCounters))
	t.Run("host identity", e.known("host identity", e.hostIdentity))
	t.Run("egress off", e.known("egress off", e.egressOff))
	t.Run("egress carries its own sandbox's traffic", e.known("egress carries its own sandbox's traffic", e.egressOwnTraffic))
	t.Run("egress leaves no host listener", e.known("egress leaves no host listener", e.egressNoHostListener))
	t.Run("egress abuse", e.known("egress abuse", e.egressAbuse))
	t.Run("kernel surface", e.known("kernel surface", e.kernelSurface))
	// The streams the host opens toward something inside (streams.go).
	t.Run("port connect stays inside", e.known("port connect stays inside", e.portConnectInside))
	t.Run("port connect never reaches the agent", e.known("port connect never reaches the agent", e.portConnectNotAgent))
	t.Run("port streams unread", e.known("port streams unread", e.portBackpressure))
	t.Run("port streams many", e.known("port streams many", e.portStreamsMany))
	t.Run("streams unread", e.known("streams unread", e.streamsUnread))
	t.Run("terminal output", e.known("terminal output", e.terminalOutput))
	t.Run("terminal sizes", e.known("terminal sizes", e.terminalSizes))
	t.Run("terminal jobs end with it", e.known("terminal jobs end with it", e.terminalJobs))
	t.Run("terminal timeout held", e.known("terminal timeout held", e.terminalPaused))
	t.Run("detached streams", e.known("detached streams", e.detachedStreams))

}

// known wraps a hostile test, which a driver (or a way of running it, such as a warm pool's
// pre-started interpreter) may declare a known failure (Options.Known).
func (e *env) known(name string, f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		if why, ok := e.opts.Known[name]; ok {
			t.Skipf("known failure of this driver: %s", why)
		}
		if needs, ok := e.opts.Slow[name]; ok {
			t.Skipf("too slow on this host; needs %s", needs)
		}
		f(t)
	}
}

func fileHash(t *testing.T, path string) string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("hash %s: %v", path, err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

func (e *env) forkBomb(t *testing.T) {
	const limit = 64
	b := e.boot(t, runtime.Limits{Pids: limit})
	// Count how far forking gets: it must stop at the limit with EAGAIN.
	fc := ForkCount(limit)
	r := b.py(fc.Code)
	if err := fc.Check(r.stdout); err != nil {
		t.Fatalf("%v: %v", err, r)
	}
	var n int
	fmt.Sscan(r.stdout, &n)
	t.Logf("forks stopped after %d with EAGAIN", n)
	// A real bomb, stopped by the timeout: the sandbox and the host stay usable.
	r = b.exec(agent.ExecRequest{Argv: []string{"bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 100"}, TimeoutMs: 3000}, nil)
	if !r.exit.TimedOut {
		t.Errorf("bomb: %v", r)
	}
	if st, err := b.sb.Stats(b.ctx); err != nil || st.Pids > limit {
		t.Errorf("pids %d > %d (%v)", st.Pids, limit, err)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork: %v", err)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent after the bomb: %v", err)
	}
	b.usableAgain()
	t.Run("on a terminal", func(t *testing.T) { terminalForkBomb(t, b.in(t), limit) })
}

// usableAgain waits (a little) until the sandbox runs a command again, after a bomb whose
// group is gone within moments.
func (b *box) usableAgain() {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.sh("true")
		if r.exit.ExitCode == 0 && r.exit.StartError == "" {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("sandbox unusable after the bomb: %v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) memoryBomb(t *testing.T) {
	b := e.boot(t, runtime.Limits{MemoryMiB: 128})
	r := b.py("x = b'x' * (600 << 20)\nprint('survived', len(x))")
	if r.exit.Signal != "SIGKILL" || strings.Contains(r.stdout, "survived") {
		t.Errorf("memory bomb: %v", r)
	}
	st, err := b.sb.Stats(b.ctx)
	if err != nil || st.OOMKills == 0 {
		t.Errorf("stats after the bomb: %+v %v (want OOMKills > 0)", st, err)
	}
	if st.MemoryMaxBytes > 140<<20 {
		t.Errorf("memory peaked at %d bytes, above the 128 MiB limit", st.MemoryMaxBytes)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent after the bomb: %v", err)
	}
	b.ok("true")
}

func (e *env) diskFill(t *testing.T) {
	b := e.boot(t, runtime.Limits{DiskMiB: 64, TmpMiB: 16})
	var before unix.Statfs_t
	unix.Statfs(os.TempDir(), &before)
	r := b.sh("head -c 1073741824 /dev/zero > /workspace/fill; echo rc=$?; stat -c %s /workspace/fill")
	if !strings.Contains(r.stderr, "No space left on device") || !r.exit.DiskFull {
		t.Errorf("disk fill: %v (want ENOSPC and disk_full)", r)
	}
	var size int64
	fmt.Sscanf(r.stdout[strings.Index(r.stdout, "\n")+1:], "%d", &size)
	if size <= 0 || size > 64<<20 {
		t.Errorf("the filler wrote %d bytes, quota 64 MiB", size)
	}
	var after unix.Statfs_t
	unix.Statfs(os.TempDir(), &after)
	if used := (int64(before.Bavail) - int64(after.Bavail)) * after.Bsize; used > 512<<20 {
		t.Errorf("the host lost %d MiB of disk", used>>20)
	}
	// The agent's own writes report disk_full too, and freeing space helps.
	if err := b.c.WriteFile(b.ctx, "more", 0, strings.NewReader(strings.Repeat("x", 8<<20))); !isCode(err, agent.CodeDiskFull) {
		t.Errorf("write on a full disk: %v", err)
	}
	b.ok("rm /workspace/fill && echo ok > /workspace/after")
	// /tmp has its own, smaller bound.
	r = b.sh("head -c 100000000 /dev/zero > /tmp/fill")
	if !strings.Contains(r.stderr, "No space left on device") {
		t.Errorf("/tmp fill: %v", r)
	}
}

func (e *env) timeoutGroup(t *testing.T) {
	b := e.shared(t)
	start := time.Now()
	r := b.exec(agent.ExecRequest{Argv: []string{"sh", "-c",
		`(while :; do :; done) & sh -c 'sleep 1000; echo never' & (sh -c 'while :; do :; done' &) ; while :; do :; done`},
		TimeoutMs: 1000}, nil)
	if !r.exit.TimedOut {
		t.Errorf("busy loop: %v", r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	// Nothing of it is left: only the agent and ps itself.
	b.onlyAgentLeft()
}

// onlyAgentLeft waits (a little) until no process but the agent runs in the sandbox.
func (b *box) onlyAgentLeft() {
	b.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := b.exec(agent.ExecRequest{Argv: []string{"ps", "-eo", "pid=,sid=,comm="}}, nil)
		var left []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] != "1" && f[2] != "ps" {
				left = append(left, line)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.t.Errorf("left running after the timeout: %q", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// timeoutSetsid: a process may leave its process group (setsid), and a group kill then misses
// it. It still lives in the sandbox, bounded by its limits, but it outlives the command that
// timed out.
func (e *env) timeoutSetsid(t *testing.T) {
	b := e.shared(t)
	r := b.exec(agent.ExecRequest{Argv: []string{"sh", "-c", "setsid sh -c 'while :; do :; done' & sleep 1000"}, TimeoutMs: 500}, nil)
	if !r.exit.TimedOut {
		t.Errorf("command: %v", r)
	}
	b.onlyAgentLeft()
}

func (e *env) cpuQuota(t *testing.T) {
	b := e.boot(t, runtime.Limits{CPUs: 0.5})
	st0, err := b.sb.Stats(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b.exec(agent.ExecRequest{Argv: []string{"sh", "-c", "(while :; do :; done) & (while :; do :; done) & wait"}, TimeoutMs: 2000}, nil)
	wall := time.Since(start)
	st1, _ := b.sb.Stats(b.ctx)
	used := time.Duration(st1.CPUNanos - st0.CPUNanos)
	t.Logf("two busy loops for %v used %v of CPU at a 0.5 CPU quota", wall, used)
	if used > wall*3/4+200*time.Millisecond {
		t.Errorf("used %v of CPU in %v at a 0.5 CPU quota", used, wall)
	}
}

func (e *env) stdoutFlood(t *testing.T) {
	b := e.shared(t)
	const total = 1 << 30
	heap := heapWatch()
	var cw countingWriter
	start := time.Now()
	p, err := b.c.Exec(b.ctx, agent.ExecRequest{ID: "flood", Argv: []string{"head", "-c", fmt.Sprint(total), "/dev/zero"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait(&cw, nil)
	grew := heap()
	if err != nil || ex.ExitCode != 0 {
		t.Fatalf("flood: %+v %v", ex, err)
	}
	if cw.n.Load() != total {
		t.Errorf("received %d bytes, want %d", cw.n.Load(), total)
	}
	t.Logf("1 GiB of stdout in %v; host heap grew by at most %d MiB", time.Since(start), grew>>20)
	if grew > 128<<20 {
		t.Errorf("the host heap grew by %d MiB for a 1 GiB stream", grew>>20)
	}
}

// HostSecret starts a TCP server on the host's loopback, which a sandbox must not reach: it
// answers every connection with "host secret". It answers the server's port; the server
// ends with the test.
func HostSecret(t testing.TB) int {
	t.Helper()
	return testkit.Greeter(t, "host secret\n")
}

// AttemptPy is Python that defines attempt(host, port), which connects with a 3 s timeout
// and answers "connected: " and what the server said, or the error's errno name
// (ECONNREFUSED, ENETUNREACH…). A sandbox's test prints what attempt answers.
const AttemptPy = `import errno, socket
def attempt(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "connected: " + s.recv(100).decode()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
`

func (e *env) network(t *testing.T) {
	// A server on the host's loopback, and one on an abstract unix socket, which only a
	// network namespace separates: the sandbox must reach neither.
	port := HostSecret(t)
	abstract := "lbb-hostile-" + randHex(6)
	uln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	b := e.shared(t)
	if out := b.ok("ls /sys/class/net"); strings.Fields(out)[0] != "lo" || len(strings.Fields(out)) != 1 {
		t.Errorf("interfaces: %q, want only lo", out)
	}
	if out := b.ok("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); strings.TrimSpace(out) != "lo" {
		t.Errorf("/proc/net/dev: %q", out)
	}
	if out := b.ok("tail -n +2 /proc/net/route; tail -n +2 /proc/net/ipv6_route 2>/dev/null | grep -v ' lo$' || true"); strings.TrimSpace(out) != "" {
		t.Errorf("routes: %q", out)
	}
	p := Network(port, abstract)
	if r := b.py(p.Code); p.Check(r.stdout) != nil {
		t.Errorf("%v: %v", p.Check(r.stdout), r)
	}
}

func (e *env) hostInvisible(t *testing.T) {
	marker := "lbb-hostile-" + randHex(8)
	var planted []string
	for _, dir := range []string{os.TempDir(), "/root", "/"} {
		p := filepath.Join(dir, marker)
		if os.WriteFile(p, []byte("host"), 0o644) == nil {
			planted = append(planted, p)
			defer os.Remove(p)
		}
	}
	if len(planted) == 0 {
		t.Fatal("could not plant a marker file on the host")
	}
	envMarker := "LBB_HOSTILE_" + strings.ToUpper(randHex(6))
	t.Setenv(envMarker, "host-secret")
	b := e.shared(t)
	for _, p := range planted {
		if r := b.sh("test -e " + p); r.exit.ExitCode == 0 {
			t.Errorf("the host's %s is visible inside", p)
		}
	}
	if out := b.ok("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'"); strings.Contains(out, envMarker) || strings.Contains(out, "host-secret") {
		t.Errorf("the host environment leaked in: %q", out)
	}
	out := b.ok("ps -eo pid=,args=")
	self, _ := os.Executable()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 3 {
		t.Errorf("processes: %q", out)
	}
	if strings.Contains(out, filepath.Base(self)) {
		t.Errorf("the host's test process is visible: %q", out)
	}
	if r := b.sh(fmt.Sprintf("test -e /proc/%d/cmdline && cat /proc/%d/cmdline", os.Getpid(), os.Getpid())); strings.Contains(r.stdout, filepath.Base(self)) {
		t.Errorf("host pid %d visible: %v", os.Getpid(), r)
	}
	if out := b.ok("hostname"); strings.TrimSpace(out) != "sandbox" {
		h, _ := os.Hostname()
		if strings.TrimSpace(out) == h {
			t.Errorf("the host's hostname %q is visible", h)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *env) privileges(t *testing.T) {
	b := e.shared(t)
	out := b.ok("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch {
		case strings.HasPrefix(k, "Cap") && strings.Trim(v, "0") != "":
			t.Errorf("%s = %s, want no capabilities", k, v)
		case k == "NoNewPrivs" && v != "1":
			t.Errorf("NoNewPrivs = %s", v)
		case k == "Seccomp" && v != "2":
			t.Errorf("Seccomp = %s, want 2 (filter)", v)
		}
	}
	// Writes outside the writable places fail, also for the sandbox's root (Landlock).
	if r := b.sh("echo x > /etc/lbb-test"); r.exit.ExitCode == 0 {
		t.Errorf("wrote to /etc: %v", r)
	}
}

// syscalls tries what a sandbox must never do, with raw system calls from Python (the image
// has no compiler). Numbers are the host architecture's, which is the sandbox's.
func (e *env) syscalls(t *testing.T) {
	b := e.shared(t)
	p := Syscalls()
	r := b.py(p.Code)
	if err := p.Check(r.stdout); err != nil {
		t.Error(err)
	}
	if r.exit.ExitCode != 0 {
		t.Errorf("probe script: %v", r)
	}
	if out := b.ok("command -v unshare >/dev/null && { unshare -U true 2>&1; echo rc=$?; } || echo absent"); !strings.Contains(out, "absent") && strings.Contains(out, "rc=0") {
		t.Errorf("unshare -U: %q", out)
	}
	if goruntime.GOARCH == "amd64" {
		// The i386 ABI (int 0x80) is a second system call table a deny list keyed on native
		// numbers would miss. Contained means it never runs: ns's filter kills the process;
		// a kernel with no i386 table at all (gVisor's) answers ENOSYS (-38).
		r := b.py(Int80Py)
		killed := !strings.Contains(r.stdout, "int80 returned") && r.exit.Signal == "SIGSYS"
		if !killed && !strings.Contains(r.stdout, "int80 returned -38\n") {
			t.Errorf("an i386 system call: %v (want the process killed by SIGSYS, or ENOSYS)", r)
		}
	}
}

func (e *env) procSelfExe(t *testing.T) {
	b := e.shared(t)
	p := ProcSelfExe()
	if r := b.py(p.Code); p.Check(r.stdout) != nil {
		t.Errorf("%v: %v", p.Check(r.stdout), r)
	}
}

func (e *env) descriptors(t *testing.T) {
	b := e.shared(t)
	r := b.py(`
import os, json
def links(pid):
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError as e:
            out[fd] = "?" + str(e.errno)
    return out
res = {"self": links("self"), "cwd": os.getcwd(), "cwdlink": os.readlink("/proc/self/cwd")}
try:
    res["agent"] = links(1)
    res["agent_cwd"] = os.readlink("/proc/1/cwd")
    res["agent_root"] = os.readlink("/proc/1/root")
except OSError as e:
    res["agent_hidden"] = e.errno
res["exists"] = {t: os.path.exists(t) for t in list(res["self"].values()) + list(res.get("agent", {}).values()) if t.startswith("/")}
res["isdir"] = {t: os.path.isdir(t) for t in res["exists"]}
print(json.dumps(res))
`)
	var res struct {
		Self, Agent   map[string]string
		Cwd, Cwdlink  string
		AgentCwd      string `json:"agent_cwd"`
		AgentRoot     string `json:"agent_root"`
		AgentHidden   int    `json:"agent_hidden"`
		Exists, Isdir map[string]bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %v", err, r)
	}
	for fd, target := range res.Self {
		switch {
		case fd == "0" || fd == "1" || fd == "2":
		case strings.HasPrefix(target, "/proc/") && strings.HasSuffix(target, "/fd"),
			target == fmt.Sprintf("?%d", int(syscall.ENOENT)):
			// the directory being listed (closed by the time it is read)
		default:
			t.Errorf("a process inherited fd %s -> %s", fd, target)
		}
	}
	if res.Cwd != "/workspace" || res.Cwdlink != "/workspace" {
		t.Errorf("cwd %q (%q)", res.Cwd, res.Cwdlink)
	}
	if res.AgentHidden == 0 {
		if res.AgentCwd != "/" || res.AgentRoot != "/" {
			t.Errorf("agent cwd %q root %q", res.AgentCwd, res.AgentRoot)
		}
		for fd, target := range res.Agent {
			// A descriptor of a host path shows a path that does not exist inside (or a
			// directory outside the workspace: the CVE-2024-21626 shape).
			if strings.HasPrefix(target, "/") && (!res.Exists[target] ||
				(res.Isdir[target] && target != "/workspace" && !strings.HasPrefix(target, "/workspace/") && !strings.HasPrefix(target, "/proc/"))) {
				t.Errorf("the agent holds fd %s -> %s", fd, target)
			}
		}
	} else {
		t.Logf("the agent's descriptors are hidden from user code (errno %d)", res.AgentHidden)
	}
	if b.pid > 0 {
		// From the host: no directory the agent holds is outside the sandbox's root file
		// system (the /workspace descriptor is on it; a host directory is not).
		var root unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/root/", b.pid), &root); err != nil {
			t.Fatal(err)
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", b.pid))
		for _, fd := range fds {
			p := fmt.Sprintf("/proc/%d/fd/%s", b.pid, fd.Name())
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev != root.Dev {
				link, _ := os.Readlink(p)
				t.Errorf("the agent holds a directory outside the sandbox: fd %s -> %s", fd.Name(), link)
			}
		}
		if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", b.pid)); cwd != "/" {
			t.Errorf("the agent's cwd is %q", cwd)
		}
	}
}

// agentOutOfReach: user code runs as the same id as the agent, yet must not reach into it.
func (e *env) agentOutOfReach(t *testing.T) {
	b := e.shared(t)
	p := AgentOutOfReach()
	r := b.py(p.Code)
	if p.Check(r.stdout) != nil || r.exit.ExitCode != 0 {
		t.Errorf("the agent is within reach: %v", r)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent: %v", err)
	}
}

// noZygoteListener: the abstract socket on which a sandbox's agent adopts an interpreter
// forked from the host's zygote (ns driver, pool slots) listens only during the handover,
// before any user code: user code must find none, nor any socket of the zygote itself.
func (e *env) noZygoteListener(t *testing.T) {
	b := e.shared(t)
	if out := b.ok("grep -c '@lbb-zygote' /proc/net/unix || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("user code sees %s zygote socket(s) in /proc/net/unix", strings.TrimSpace(out))
	}
	r := b.py(`import socket
found = []
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if len(f) > 7 and f[7].startswith("@lbb-zygote"):
        found.append(f[7])
for name in found:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name[1:])
        print("connected", name)
    except OSError:
        pass
print("found", len(found))
`)
	if r.exit.ExitCode != 0 || strings.TrimSpace(r.stdout) != "found 0" {
		t.Errorf("zygote sockets within reach: %v", r)
	}
}

func (e *env) pathEscapes(t *testing.T) {
	b := e.shared(t)
	b.ok("ln -s /etc /workspace/etc_abs; ln -s ../../../../etc/passwd /workspace/rel; ln -s /proc/self/root /workspace/procroot; mkdir -p /workspace/d && ln -s ../.. /workspace/d/up")
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "a/../../etc/passwd", "etc_abs/passwd", "rel",
		"procroot/etc/passwd", "d/up/etc/passwd", "/workspace/../etc/passwd"} {
		data, err := b.readFile(p)
		if err == nil {
			t.Errorf("read %q: got %d bytes", p, len(data))
		} else if !isCode(err, agent.CodePathOutside) {
			t.Logf("read %q: %v (refused, though not as %s)", p, err, agent.CodePathOutside)
		}
	}
	for _, p := range []string{"../evil", "etc_abs/evil", "d/up/tmp/evil", "/tmp/evil"} {
		if err := b.c.WriteFile(b.ctx, p, 0, strings.NewReader("x")); err == nil {
			t.Errorf("write %q succeeded", p)
		}
	}
	for _, p := range []string{"..", "etc_abs/", "d/up", "/etc"} {
		if ents, err := b.c.List(b.ctx, p, false); err == nil {
			for _, en := range ents {
				if en.Name == "passwd" || en.Name == "bin" {
					t.Errorf("listing %q reached outside: %v", p, ents)
					break
				}
			}
		}
	}
	for _, p := range []string{"../etc", "etc_abs/passwd", "d/up/etc/passwd"} {
		if err := b.c.Remove(b.ctx, p, true); err == nil {
			t.Errorf("remove %q succeeded", p)
		}
	}
	if err := b.c.Mkdir(b.ctx, "etc_abs/newdir"); err == nil {
		t.Error("mkdir through a symlink succeeded")
	}
	// Nothing changed outside.
	if out := b.ok("test -e /etc/passwd && ! test -e /etc/evil && ! test -e /tmp/evil && ! test -e /etc/newdir && echo intact"); out != "intact\n" {
		t.Errorf("outside the workspace: %q", out)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if ents, err := b.c.List(ctx, "", false); err != nil || len(ents) == 0 {
		t.Errorf("the workspace itself still lists: %v %v", ents, err)
	}
}

// socketFamilies: only the families a sandbox needs open a socket (unix, IPv4, IPv6, and
// netlink for route queries). The others reach past the network namespace (AF_VSOCK to the
// host or hypervisor) or into little-used kernel code (AF_ALG, AF_XDP, AF_PACKET…).
func (e *env) socketFamilies(t *testing.T) {
	b := e.shared(t)
	p := SocketFamilies()
	if r := b.py(p.Code); p.Check(r.stdout) != nil {
		t.Errorf("%v\n%v", p.Check(r.stdout), r)
	}
}

// signalsToInit: a process that signals PID 1 (the agent) — kill -HUP 1 from a script, the
// agent's threads by their ids, a pidfd of /proc/1 — ends neither the agent nor the sandbox.
func (e *env) signalsToInit(t *testing.T) {
	b := e.shared(t)
	b.ok("for s in HUP QUIT USR1 USR2 TERM INT ALRM PIPE TRAP ABRT; do kill -s $s 1 2>/dev/null; done; sleep 0.5; echo done")
	b.py(SignalsToInit().Code)
	select {
	case <-b.sb.Done():
		t.Fatal("the sandbox ended after signals to its PID 1")
	case <-time.After(200 * time.Millisecond):
	}
	if err := b.ping(); err != nil {
		t.Fatalf("the agent does not answer after signals to its PID 1: %v", err)
	}
	if out := b.ok("echo alive"); out != "alive\n" {
		t.Errorf("after signals to PID 1: %q", out)
	}
}

// devices: nothing a sandbox never needs is in its /dev — no FUSE (a file system served from
// inside), no TUN/TAP (a network device of its own) — and /proc/sysrq-trigger, which commands
// the kernel, cannot be written.
func (e *env) devices(t *testing.T) {
	b := e.shared(t)
	out := b.ok(`for f in /dev/fuse /dev/net/tun /dev/kvm /dev/vsock /dev/vhost-vsock /dev/vhost-net /dev/mem /dev/kmsg /dev/loop-control; do
  if [ -e "$f" ] || [ -L "$f" ]; then echo "present $f"; fi
done
if [ -w /proc/sysrq-trigger ]; then echo "writable /proc/sysrq-trigger"; fi
if (printf 'h' > /proc/sysrq-trigger) 2>/dev/null; then echo "written /proc/sysrq-trigger"; fi
ls /dev`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "present ") || strings.HasSuffix(l, "/proc/sysrq-trigger") {
			t.Errorf("%s (/dev: %s)", l, strings.Join(lines, " "))
		}
	}
}

// agentThreads: the agent's threads have ids of their own, and on Linux a signal sent to
// one goes to the whole agent. SIGSTOP or SIGKILL to any of them ends neither the agent nor
// the sandbox (Linux drops both for a pid namespace's init from inside; gVisor's init has
// no such shield).
func (e *env) agentThreads(t *testing.T) {
	b := e.boot(t, runtime.Limits{})
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: "threads", Argv: []string{"python3", "-c", `
import os, signal, time
tids = set()
try: tids |= {int(t) for t in os.listdir("/proc/1/task")}
except OSError: pass
for n in range(2, 500):  # thread ids are not listed in /proc, but they are there
    try:
        with open(f"/proc/{n}/status") as f:
            if any(l.split() == ["Tgid:", "1"] for l in f): tids.add(n)
    except OSError: pass
tids.discard(1)
print("agent threads", sorted(tids), flush=True)
for sig in (signal.SIGSTOP, signal.SIGKILL):
    for t in sorted(tids):
        try: os.kill(t, sig)
        except OSError as e: print("kill", t, sig.name, "errno", e.errno)
time.sleep(0.5)
print("sent", flush=True)
`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	ex, err := p.Wait(&out, nil)
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatalf("the program's stream ended: %v (exit %+v)", err, ex)
	}
	if !strings.Contains(out.String(), "agent threads [") {
		t.Fatalf("found no agent thread: %q %+v", out.String(), ex)
	}
	select {
	case <-b.sb.Done():
		t.Fatal("the sandbox ended after signals to its agent's threads")
	case <-time.After(200 * time.Millisecond):
	}
	if err := b.ping(); err != nil {
		t.Fatalf("the agent does not answer after signals to its threads: %v", err)
	}
	if out := b.ok("echo alive"); out != "alive\n" {
		t.Errorf("after signals to the agent's threads: %q", out)
	}
}

// grabCountersPy takes all it can of the kernel's per-user counters — inotify instances,
// queued signals, POSIX message queue bytes —, prints how many of each it got, and holds them
// until its stdin closes.
const grabCountersPy = `
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
got = {}
fds = []
while len(fds) < 5000:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0: break
    fds.append(fd)
got["inotify"] = len(fds)
sig = signal.SIGRTMIN + 2
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
n, pid = 0, os.getpid()
while n < 300000 and libc.sigqueue(pid, sig, ctypes.c_void_p(0)) == 0:
    n += 1
got["sigpending"] = n
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("cur", ctypes.c_long), ("pad", ctypes.c_long * 4)]
qs = 0
for i in range(200):
    a = Attr(0, 10, 8192, 0)
    if libc.mq_open(b"/lbb-grab-%d-%d" % (os.getpid(), i), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(a)) < 0:
        got["mqueue_errno"] = ctypes.get_errno()
        break
    qs += 1
got["mqueue"] = qs
print(" ".join(f"{k}={v}" for k, v in got.items()), flush=True)
sys.stdin.read()
`

// perUserCounters: the kernel counts inotify instances, queued signals and message queue
// bytes per user, and charges what a process in a user namespace takes to the owner of that
// namespace too. A sandbox that takes all it can of each leaves host root its own (root's
// inotify_init1 still works), and a second sandbox its own.
func (e *env) perUserCounters(t *testing.T) {
	a := e.boot(t, runtime.Limits{})
	held := a.grab()
	defer held.release()
	t.Logf("the first sandbox holds %v", held.got)
	if held.got["inotify"] == 0 {
		t.Fatalf("the sandbox got no inotify instance at all: %v", held.got)
	}
	if err := hostCounters(); err != nil {
		t.Errorf("host root, while a sandbox holds all it can: %v", err)
	}
	b := e.boot(t, runtime.Limits{})
	other := b.grab()
	defer other.release()
	t.Logf("the second sandbox holds %v", other.got)
	// Each holds a share of its own: the second gets as much as the first did.
	for _, k := range []string{"inotify", "sigpending", "mqueue"} {
		if n := held.got[k]; other.got[k] < n/2 {
			t.Errorf("%s: the second sandbox got %d while the first holds %d", k, other.got[k], n)
		}
	}
}

// held is what grab took in a sandbox, and releases it.
type held struct {
	got     map[string]int
	release func()
}

// grab runs grabCountersPy in the sandbox and answers what it holds.
func (b *box) grab() held {
	b.t.Helper()
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := b.c.Exec(b.ctx, agent.ExecRequest{ID: fmt.Sprintf("grab_%d", cmdSeq.Add(1)), Argv: []string{"python3", "-c", grabCountersPy}}, stdinR)
	if err != nil {
		b.t.Fatal(err)
	}
	done := make(chan struct{})
	var errb strings.Builder
	go func() {
		defer close(done)
		ex, err := p.Wait(outW, &errb)
		outW.CloseWithError(fmt.Errorf("grab ended: %+v %v: %s", ex, err, errb.String()))
	}()
	release := func() {
		stdinW.Close()
		go io.Copy(io.Discard, outR)
		<-done
	}
	line, err := readLine(outR)
	if err != nil {
		release()
		b.t.Fatalf("grab: %v", err)
	}
	got := map[string]int{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		var n int
		fmt.Sscan(v, &n)
		got[k] = n
	}
	return held{got: got, release: release}
}

func readLine(r io.Reader) (string, error) {
	var line []byte
	buf := make([]byte, 1)
	for {
		if _, err := r.Read(buf); err != nil {
			return string(line), err
		}
		if buf[0] == '\n' {
			return string(line), nil
		}
		line = append(line, buf[0])
	}
}

// hostCounters takes one of each counter grabCountersPy takes, as this (root) process, and
// gives it back.
func hostCounters() error {
	var errs []error
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		errs = append(errs, fmt.Errorf("inotify_init1: %w", err))
	} else {
		unix.Close(fd)
	}
	// A queued signal to a child of the host's root (one the child blocks), as sigqueue sends it.
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		errs = append(errs, err)
	} else {
		defer child.Wait()
		defer child.Process.Kill()
		var info [128]byte // siginfo_t: si_signo, si_errno, si_code, then si_pid and si_uid
		const sig = 36     // SIGRTMIN+2 as libc (and Python) count: the kernel's 32 and 33 are libc's
		binary.NativeEndian.PutUint32(info[0:], sig)
		binary.NativeEndian.PutUint32(info[8:], uint32(0xffffffff)) // SI_QUEUE (-1)
		binary.NativeEndian.PutUint32(info[16:], uint32(os.Getpid()))
		// The default action of a real-time signal ends sleep, which is as good as queued.
		if _, _, errno := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(child.Process.Pid), uintptr(sig),
			uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
			errs = append(errs, fmt.Errorf("rt_sigqueueinfo: %w", errno))
		}
	}
	name := fmt.Sprintf("lbb-hostile-%d", os.Getpid())
	attr := [8]int64{0, 1, 16, 0}
	p, _ := unix.BytePtrFromString(name)
	q, _, errno := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600,
		uintptr(unsafe.Pointer(&attr[0])), 0, 0)
	if errno != 0 {
		errs = append(errs, fmt.Errorf("mq_open: %w", errno))
	} else {
		unix.Close(int(q))
		unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	}
	return errors.Join(errs...)
}

// hostIdentity: each sandbox is a user of its own on the host. Its ids map onto a host range
// no other sandbox holds (where the host can make idmapped mounts), and nobody else on the
// host — another sandbox's root, had it escaped, or any other account — can list its state
// directory or read its workspace, not even a file the sandbox made world-readable.
func (e *env) hostIdentity(t *testing.T) {
	if e.opts.HostIDs == nil || e.opts.StateDirsOf == nil {
		t.Skip("the driver's test does not say where sandboxes live on the host")
	}
	a := e.boot(t, runtime.Limits{})
	b := e.boot(t, runtime.Limits{})
	secret := randHex(16)
	b.ok("echo " + secret + " > /workspace/secret && chmod 644 /workspace/secret && sync")
	ia, err := e.opts.HostIDs(a.id)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := e.opts.HostIDs(b.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host ids: %+v and %+v", ia, ib)
	switch {
	case e.opts.SharedIDs:
		t.Log("this host makes no idmapped mounts: both map the shared range")
	case ia.Base == runtime.IDBase || ib.Base == runtime.IDBase:
		t.Errorf("a sandbox maps the shared range %d: %+v %+v", runtime.IDBase, ia, ib)
	case ia.Base < ib.Base+ib.Count && ib.Base < ia.Base+ia.Count:
		t.Errorf("two sandboxes share host ids: %+v %+v", ia, ib)
	}
	// The file, as the host stores it.
	dirs := e.opts.StateDirsOf(b.id)
	var file string
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && d.Name() == "secret" {
				if data, _ := os.ReadFile(p); strings.TrimSpace(string(data)) == secret {
					file = p
				}
			}
			return nil
		})
	}
	if file == "" {
		t.Fatalf("the workspace file is nowhere under %s", dirs)
	}
	others := []uint32{65534} // nobody, for any other account of the host
	if !e.opts.SharedIDs {
		others = append(others, ia.Base) // the other sandbox's root
	}
	argvs := [][]string{{"cat", file}}
	for _, dir := range dirs {
		argvs = append(argvs, []string{"ls", dir})
	}
	for _, uid := range others {
		for _, argv := range argvs {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("host uid %d ran %q: %s", uid, argv, out)
			}
		}
	}
}

// kernelSurface: a sandbox on a kernel of its own (Options.Kernel) sees that kernel wherever
// a program looks (uname, /proc/version, /proc/sys/kernel/osrelease), and nothing of the
// host's: neither its release nor its boot id.
func (e *env) kernelSurface(t *testing.T) {
	if e.opts.Kernel == "" {
		t.Skip("the driver's sandboxes run on the host's kernel (or one it does not name)")
	}
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	b := e.shared(t)
	out := b.ok("uname -r; cat /proc/sys/kernel/osrelease; cat /proc/version; cat /proc/sys/kernel/random/boot_id")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("unexpected output %q", out)
	}
	if lines[0] != e.opts.Kernel || lines[1] != e.opts.Kernel || !strings.Contains(lines[2], e.opts.Kernel) {
		t.Errorf("the sandbox sees kernel %q (%q, %q), want %q", lines[0], lines[1], lines[2], e.opts.Kernel)
	}
	if hostRelease != e.opts.Kernel && strings.Contains(out, hostRelease) {
		t.Errorf("the host's kernel %q shows inside: %q", hostRelease, out)
	}
	if id := strings.TrimSpace(string(hostBoot)); id != "" && strings.Contains(out, id) {
		t.Errorf("the host's boot id %s shows inside", id)
	}
	t.Logf("inside: %s (host: %s)", lines[0], hostRelease)
}
