//go:build linux

package spawn

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// The test binary is its own helper, and its own child (argv[1] childArg), which prints what
// the test checks.
const childArg = "__spawn_test_child__"

func TestMain(m *testing.M) {
	MaybeHelper()
	if len(os.Args) > 1 && os.Args[1] == childArg {
		child()
	}
	testkit.Main(m, nil)
}

// child prints its pid, its parent's pid, its uid, its uid map, what fd 3 reads and which of
// its fds are sockets, then exits 7.
func child() {
	b, _ := io.ReadAll(os.NewFile(3, "extra"))
	m, _ := os.ReadFile("/proc/self/uid_map")
	var sockets []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(l, "socket:") {
			sockets = append(sockets, e.Name())
		}
	}
	os.Stdout.WriteString(strings.Join([]string{
		"pid=" + strconv.Itoa(os.Getpid()), "ppid=" + strconv.Itoa(os.Getppid()),
		"uid=" + strconv.Itoa(os.Getuid()), "map=" + strings.Join(strings.Fields(string(m)), " "),
		"extra=" + string(b), "sockets=" + strings.Join(sockets, " ")}, "\n") + "\n")
	os.Exit(7)
}

// childCmd is a child in user and pid namespaces of its own, its uid 0 mapped to 100000,
// printing to out and reading fd 3 from extra.
func childCmd(t *testing.T, out, extra *os.File) *exec.Cmd {
	return &exec.Cmd{
		Path: childBinary(t), Args: []string{"child", childArg}, Env: []string{},
		Stdout: out, Stderr: out, ExtraFiles: []*os.File{extra},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
}

// run starts one child through h and answers what it printed and its exit status.
func run(t *testing.T, h *Helper, euid uint32) (map[string]string, *os.ProcessState) {
	return runWith(t, h, euid, "hello")
}

// runWith is run with what the child reads on fd 3.
func runWith(t *testing.T, h *Helper, euid uint32, extra string) (map[string]string, *os.ProcessState) {
	t.Helper()
	self, _ := os.Executable()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	exR, exW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer exR.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proc, err := h.Start(ctx, self, childCmd(t, outW, exR), euid)
	outW.Close()
	if err != nil {
		exW.Close()
		t.Fatalf("Start: %v", err)
	}
	exW.WriteString(extra)
	exW.Close()
	b, _ := io.ReadAll(outR)
	st, err := proc.Wait() // the child is this process's: only its parent can reap it
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	return got, st
}

func TestHelper(t *testing.T) {
	testkit.RequiresRoot(t)
	testkit.RequiresUserNS(t)
	var h Helper
	defer h.Close()
	got, st := run(t, &h, 0)
	if st.ExitCode() != 7 {
		t.Errorf("exit code %d, want 7 (output %v)", st.ExitCode(), got)
	}
	// ppid 0: the parent is outside the child's pid namespace. No socket: the helper's own
	// stays with it.
	want := map[string]string{"pid": "1", "ppid": "0", "uid": "0", "map": "0 100000 1", "extra": "hello", "sockets": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	helper := h.Pid()
	if helper == 0 {
		t.Fatal("no helper runs")
	}
	// The helper is small: its fork does not copy this process's heap.
	if rss := rssKiB(t, helper); rss > 64<<10 {
		t.Errorf("helper RSS %d KiB", rss)
	}

	// A second child, as another euid, from the same helper.
	if got, st := run(t, &h, 100000); st.ExitCode() != 7 || got["extra"] != "hello" {
		t.Errorf("second child: %v %v", got, st)
	}
	if h.Pid() != helper {
		t.Errorf("helper %d replaced by %d", helper, h.Pid())
	}

	// A helper that died is replaced at the next Start.
	if err := syscall.Kill(helper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got, st := run(t, &h, 0); st.ExitCode() != 7 || got["extra"] != "hello" {
		t.Errorf("after the helper died: %v %v", got, st)
	}
	if h.Pid() == helper || h.Pid() == 0 {
		t.Errorf("helper %d not replaced (now %d)", helper, h.Pid())
	}
	// Close ends it and reaps it.
	old := h.Pid()
	h.Close()
	if err := syscall.Kill(old, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("helper %d after Close: %v", old, err)
	}
}

// TestHelperConcurrent: children started at once each get their own descriptors.
func TestHelperConcurrent(t *testing.T) {
	testkit.RequiresRoot(t)
	testkit.RequiresUserNS(t)
	var h Helper
	defer h.Close()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := "child-" + strconv.Itoa(i)
			got, st := runWith(t, &h, 0, want)
			if st.ExitCode() != 7 || got["extra"] != want {
				t.Errorf("child %d: exit %d, read %q", i, st.ExitCode(), got["extra"])
			}
		}()
	}
	wg.Wait()
}

func TestHelperRefuses(t *testing.T) {
	testkit.RequiresRoot(t)
	var h Helper
	defer h.Close()
	self, _ := os.Executable()
	ctx := context.Background()
	cases := map[string]*exec.Cmd{
		"env nil":   {Path: self, Args: []string{"x"}},
		"not files": {Path: self, Args: []string{"x"}, Env: []string{}, Stdout: io.Discard},
		"chroot":    {Path: self, Args: []string{"x"}, Env: []string{}, SysProcAttr: &syscall.SysProcAttr{Chroot: "/"}},
		"pdeathsig without a pid namespace": {Path: self, Args: []string{"x"}, Env: []string{},
			SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}},
		"no such binary": {Path: "/nonexistent", Args: []string{"x"}, Env: []string{}},
	}
	for name, cmd := range cases {
		if p, err := h.Start(ctx, self, cmd, 0); err == nil {
			t.Errorf("%s: started %d", name, p.Pid)
			_, _ = p.Wait()
		}
	}
}

var childBin struct {
	once sync.Once
	path string
	err  error
}

// childBinary is a copy of the test binary that the child's ids (100000) may execute: go
// test's own directory is root's alone.
func childBinary(t *testing.T) string {
	childBin.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			childBin.err = err
			return
		}
		b, err := os.ReadFile(self)
		if err != nil {
			childBin.err = err
			return
		}
		dir, err := os.MkdirTemp("", "lbb-spawn-test-")
		if err != nil {
			childBin.err = err
			return
		}
		testkit.AtExit(func() { os.RemoveAll(dir) })
		childBin.path = filepath.Join(dir, "child")
		if err := os.Chmod(dir, 0o755); err != nil {
			childBin.err = err
			return
		}
		childBin.err = os.WriteFile(childBin.path, b, 0o755)
	})
	if childBin.err != nil {
		t.Fatal(childBin.err)
	}
	return childBin.path
}

func rssKiB(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// TestRequestKeepsCgroupFD: the cgroup descriptor a caller passes stays the caller's; nothing
// the request made of it closes it when collected.
func TestRequestKeepsCgroupFD(t *testing.T) {
	f, err := os.Open(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	req, fds, err := newRequest(&exec.Cmd{Path: "/bin/true", Env: []string{},
		SysProcAttr: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if req.CgroupFD < 0 || fds[req.CgroupFD] != fd {
		t.Fatalf("cgroup fd %d of %v, want %d", req.CgroupFD, fds, fd)
	}
	for range 3 {
		goruntime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the caller's cgroup fd was closed: %v", err)
	}
}
