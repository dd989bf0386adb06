//go:build linux

// Package vmguest is the inside of a microvm sandbox (see agent.VMConfig): the guest's
// supervisor, which the kernel starts as /init from the initramfs the driver made, and the
// sandbox init it starts, which builds the sandbox's root and becomes the agent. Both are the
// agent binary (cmd/lbb-agent calls Main first thing).
//
// The supervisor, PID 1 of the guest and root with every capability:
//  1. mounts /dev, /proc and /sys, loads the kernel modules the initramfs holds (in the order
//     of /lib/modules/order), then forbids loading any other (kernel.modules_disabled);
//  2. sends its log, and the sandbox's, to the console port (hvc0: the driver's log);
//  3. mounts the base image disk read-only and the workspace disk, and an overlay of the one
//     over the other (upper and work directories on the workspace disk) as the sandbox's
//     root, as the ns driver does on the host;
//  4. makes the sandbox's cgroup (memory, pids) and brings lo up: the machine has no other
//     network device;
//  5. starts the sandbox init in a pid and mount namespace of its own, in that cgroup, with
//     the channel port as fd 3, and answers the control port until the init ends, when it
//     syncs the disks and powers the machine off.
//
// The sandbox init (sandbox.go) is to the guest what the ns driver's init is to the host.
package vmguest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Mount points of the initramfs (agent.VMInitramfsDirs), and the sandbox's cgroup.
const (
	baseDir, diskDir, rootDir = "/mnt/base", "/mnt/disk", "/mnt/root"
	layerDir                  = "/mnt/layer"
	cgroupDir                 = "/sys/fs/cgroup/sandbox"
)

// Main runs the supervisor or the sandbox init when this process is one, and never returns
// then. The agent calls it first thing.
func Main() {
	if len(os.Args) > 1 && os.Args[1] == sandboxInitArg {
		sandboxInit()
	}
	if os.Getpid() != 1 {
		return
	}
	cfg, ok, err := agent.ParseVMConfig(os.Environ())
	if !ok {
		return
	}
	supervise(cfg, err)
}

// supervise is the guest's PID 1. A failure is logged on the console and powers the machine
// off: the driver sees QEMU end, with the log.
func supervise(cfg agent.VMConfig, cfgErr error) {
	s := &supervisor{cfg: cfg, log: os.Stderr}
	err := cfgErr
	if err == nil {
		err = s.boot()
	}
	if err == nil {
		err = s.run()
	}
	fmt.Fprintf(s.log, "lbb-agent (guest supervisor): %v; powering off\n", err)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

type supervisor struct {
	cfg     agent.VMConfig
	log     io.Writer
	console *os.File
	channel *os.File // the channel port: the agent's fd 3
	control *os.File
	t0      time.Time
}

func (s *supervisor) boot() error {
	s.t0 = time.Now()
	for _, m := range []struct{ src, dst, fs string }{{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}} {
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if err := loadModules(); err != nil {
		return err
	}
	if err := s.openConsole(); err != nil {
		return err
	}
	// The kernel's own knobs: nothing of the sandbox's may load code into it, read its log
	// or its addresses, use perf or unprivileged bpf; and its page cache goes to the disk
	// soon, since a machine can end without a sync (SIGKILL of QEMU).
	for k, v := range map[string]string{
		"kernel/modules_disabled": "1", "kernel/dmesg_restrict": "1", "kernel/kptr_restrict": "2",
		"kernel/perf_event_paranoid": "3", "kernel/unprivileged_bpf_disabled": "1", "kernel/sysrq": "0",
		"vm/dirty_expire_centisecs": "100", "vm/dirty_writeback_centisecs": "100",
		// As on a host with plenty of RAM: a large allocation succeeds and the sandbox's
		// memory limit (its cgroup) ends the process that touches too much, rather than the
		// allocation failing because the guest's RAM is small.
		"vm/overcommit_memory": "1",
	} {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
	}
	base, err := waitFor("the base disk", func() (string, bool) { return diskBySerial(agent.DiskBase) })
	if err != nil {
		return err
	}
	disk, err := waitFor("the workspace disk", func() (string, bool) { return diskBySerial(agent.DiskWorkspace) })
	if err != nil {
		return err
	}
	if err := unix.Mount(base, baseDir, "ext4", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount the base disk %s: %w", base, err)
	}
	if err := unix.Mount(disk, diskDir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount the workspace disk %s: %w", disk, err)
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"upper", 0o755}, {"work", 0o700}} {
		if err := os.Mkdir(filepath.Join(diskDir, d.name), d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	lower, xattr := baseDir, ""
	if s.cfg.Layer {
		// A template layer's disk goes over the base. Its opaque directories carry the
		// user.overlay.* marks its build's overlay (unprivileged, on the host) gave them.
		layer, err := waitFor("the template layer's disk", func() (string, bool) { return diskBySerial(agent.DiskLayer) })
		if err != nil {
			return err
		}
		if err := os.MkdirAll(layerDir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(layer, layerDir, "ext4", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("mount the template layer's disk %s: %w", layer, err)
		}
		lower, xattr = layerDir+":"+baseDir, ",userxattr"
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work%s", lower, diskDir, diskDir, xattr)
	if err := unix.Mount("overlay", rootDir, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount the sandbox's root (overlay %s): %w", opts, err)
	}
	if err := s.cgroup(); err != nil {
		return err
	}
	if err := loUp(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(s.cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if s.channel, err = openPort(agent.PortChannel); err != nil {
		return err
	}
	if s.control, err = openPort(agent.PortControl); err != nil {
		return err
	}
	return nil
}

// loadModules loads the initramfs's modules, compressed as Debian ships them (the kernel
// decompresses), in the order agent.VMModulesDir/order names them.
func loadModules() error {
	b, err := os.ReadFile(filepath.Join(agent.VMModulesDir, "order"))
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(b)) {
		fd, err := unix.Open(filepath.Join(agent.VMModulesDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		const compressed = 4 // MODULE_INIT_COMPRESSED_FILE
		err = unix.FinitModule(fd, "", compressed)
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

// openConsole makes the console port (hvc0, there once virtio-mmio is loaded) this process's
// stdout and stderr: the driver logs what comes out of it.
func (s *supervisor) openConsole() error {
	if _, err := waitFor("the console", func() (string, bool) { _, err := os.Stat("/dev/hvc0"); return "", err == nil }); err != nil {
		return err
	}
	c, err := os.OpenFile("/dev/hvc0", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(c.Fd()), fd, 0); err != nil {
			return err
		}
	}
	if null, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err == nil {
		unix.Dup3(null, 0, 0)
		unix.Close(null)
	}
	s.console = c
	return nil
}

// waitFor polls found until it answers true, for up to 150 s (devices appear as their drivers
// probe them, which takes a while under emulation: on a loaded 2-core host with several
// machines booting at once under TCG, 20 s was not enough, and the guest gave up while the
// host still waited — it waits 3 minutes for the agent).
func waitFor(what string, found func() (string, bool)) (string, error) {
	deadline := time.Now().Add(150 * time.Second)
	for {
		if v, ok := found(); ok {
			return v, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s did not appear", what)
		}
		time.Sleep(5 * time.Millisecond) // each poll costs the guest's vCPU, which probes the devices
	}
}

// diskBySerial answers the /dev node of the virtio disk with serial.
func diskBySerial(serial string) (string, bool) {
	ms, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, m := range ms {
		if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == serial {
			dev := "/dev/" + filepath.Base(filepath.Dir(m))
			if _, err := os.Stat(dev); err == nil {
				return dev, true
			}
		}
	}
	return "", false
}

// openPort opens the virtio-serial port called name, non-blocking (the Go poller waits on it).
func openPort(name string) (*os.File, error) {
	dev, err := waitFor("port "+name, func() (string, bool) {
		ms, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range ms {
			if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(m))
				if _, err := os.Stat(dev); err == nil {
					return dev, true
				}
			}
		}
		return "", false
	})
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open port %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), dev), nil
}

// cgroup makes the sandbox's cgroup: its processes' memory (without swap) and pids limits.
func (s *supervisor) cgroup() error {
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount cgroup2: %w", err)
	}
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids +cpu"), 0); err != nil {
		return fmt.Errorf("cgroup controllers: %w", err)
	}
	if err := os.Mkdir(cgroupDir, 0o755); err != nil {
		return err
	}
	for file, v := range map[string]string{
		"memory.max":      strconv.FormatInt(s.cfg.MemoryMiB<<20, 10),
		"memory.swap.max": "0",
		"pids.max":        strconv.FormatInt(s.cfg.Pids, 10),
	} {
		if err := os.WriteFile(filepath.Join(cgroupDir, file), []byte(v), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup %s: %w", file, err)
		}
	}
	return nil
}

// loUp brings up lo, the machine's only network interface.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// run starts the sandbox init and serves the control port until the init ends.
func (s *supervisor) run() error {
	cg, err := os.Open(cgroupDir)
	if err != nil {
		return err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"lbb-agent", sandboxInitArg},
		Env:        []string{},
		Stdout:     s.console,
		Stderr:     s.console,
		ExtraFiles: []*os.File{s.channel, cfgR}, // fds 3 and 4
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			Setsid:      true,
			UseCgroupFD: true,
			CgroupFD:    int(cg.Fd()),
		},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the sandbox init: %w", err)
	}
	cg.Close()
	cfgR.Close()
	s.channel.Close() // the agent's now
	err = json.NewEncoder(cfgW).Encode(sandboxConfig{VMConfig: s.cfg})
	cfgW.Close()
	if err != nil {
		cmd.Process.Kill()
	}
	go s.serveControl()
	fmt.Fprintf(s.log, "lbb-agent (guest supervisor): sandbox %s started %v after /init\n", s.cfg.SandboxID, time.Since(s.t0).Round(time.Millisecond))
	werr := cmd.Wait()
	return fmt.Errorf("the sandbox's init ended: %v", werr)
}

// serveControl answers VMRequests on the control port, one line each, until it fails.
func (s *supervisor) serveControl() {
	sc := bufio.NewScanner(s.control)
	sc.Buffer(make([]byte, 4096), 64<<10)
	enc := json.NewEncoder(s.control)
	for sc.Scan() {
		var req agent.VMRequest
		var resp agent.VMResponse
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else if err := s.handle(req, &resp); err != nil {
			resp.Error = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			fmt.Fprintf(s.log, "lbb-agent (guest supervisor): control port: %v\n", err)
			return
		}
	}
	fmt.Fprintf(s.log, "lbb-agent (guest supervisor): control port closed: %v\n", sc.Err())
}

func (s *supervisor) handle(req agent.VMRequest, resp *agent.VMResponse) error {
	switch req.Op {
	case agent.VMOpStats:
		st, err := readStats()
		resp.Stats = &st
		return err
	case agent.VMOpSync:
		unix.Sync()
		return nil
	case agent.VMOpHostname:
		if req.Hostname == "" || len(req.Hostname) > 64 {
			return fmt.Errorf("hostname %q", req.Hostname)
		}
		return unix.Sethostname([]byte(req.Hostname))
	case agent.VMOpReseed:
		if req.UnixNano > 0 {
			ts := unix.NsecToTimespec(req.UnixNano)
			if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
				return fmt.Errorf("set the clock: %w", err)
			}
		}
		if req.MachineID != "" {
			if err := writeMachineID(req.MachineID); err != nil {
				return err
			}
		}
		return reseed(req.Seed)
	default:
		return fmt.Errorf("unknown op %q", req.Op)
	}
}

// readStats reads the sandbox's cgroup.
func readStats() (agent.VMStats, error) {
	var st agent.VMStats
	num := func(file string) uint64 {
		b, _ := os.ReadFile(filepath.Join(cgroupDir, file))
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	st.MemoryBytes, st.MemoryMaxBytes, st.Pids = num("memory.current"), num("memory.peak"), num("pids.current")
	b, err := os.ReadFile(filepath.Join(cgroupDir, "memory.events"))
	if err != nil {
		return st, err
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			st.OOMKills, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	return st, nil
}

// writeMachineID writes id into the sandbox's /etc/machine-id in place (the sandbox init
// bound that file; a new one would not be seen there).
func writeMachineID(id string) error {
	if len(id) != 32 || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "" {
		return fmt.Errorf("machine id %q: want 32 hex digits", id)
	}
	f, err := os.OpenFile(filepath.Join(rootDir, "etc/machine-id"), os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.ToLower(id) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// reseed credits seed and 64 bytes of the virtio entropy device (the host's) to the kernel's
// pool and makes it reseed its generator now, not at its next scheduled reseed.
func reseed(seed []byte) error {
	hw := make([]byte, 64)
	n := 0
	if f, err := os.OpenFile("/dev/hwrng", os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
		deadline := time.Now().Add(2 * time.Second)
		for n < len(hw) && time.Now().Before(deadline) {
			m, err := f.Read(hw[n:])
			if m > 0 {
				n += m
			} else if err != nil && !errors.Is(err, unix.EAGAIN) {
				break
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
		f.Close()
	}
	buf := append(append([]byte{}, seed...), hw[:n]...)
	if len(buf) == 0 {
		return errors.New("no entropy: neither a seed nor the entropy device gave any")
	}
	r, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(buf))
	*(*int32)(unsafe.Pointer(&info[0])) = int32(8 * len(buf))
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(buf))
	copy(info[8:], buf)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, r.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, r.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}
