//go:build linux

// Package ns is lbb's default runtime driver: Linux namespaces, cgroups, an overlay root on
// a per-sandbox ext4 disk, and seccomp, Landlock and capability dropping around the agent.
//
// A sandbox is, on the host:
//
//	<StateDir>/<id>/            0700, root's
//	<StateDir>/<id>/spec.json   the Spec, limits resolved
//	<StateDir>/<id>/ids.json    its own range of host ids (hostids), claimed at Create
//	<StateDir>/<id>/disk.img    its disk: a sparse ext4 file, its size the workspace quota
//	<RunDir>/<id>/              made at each start, 0710 to the sandbox's root's group: no
//	                            other host user enters; mount points only
//	<RunDir>/<id>/disk/         disk.img loop-mounted while started (upper/ and work/ inside,
//	                            stored with the shared ids)
//	<RunDir>/<id>/rootfs/       while started, the image through an idmapped mount onto the
//	<RunDir>/<id>/layer/        sandbox's range, and its disk likewise: the overlay's layers
//	<RunDir>/<id>/template/     and a template layer (Spec.Layer), if any, as the image is
//	<RunDir>/<id>/root/         where the init mounts the overlay, in the sandbox's own mount
//	                            namespace only
//	<cgroup>/<CgroupParent>/<id> its cgroups (memory, pids, cpu, cpuacct, freezer, blkio)
//
// beside <StateDir>/.templates (a formatted disk per size, copied sparsely by Create) and
// <StateDir>/.agent (the agent binary, copied where the sandbox's ids can reach it, root's).
// RunDir is on a tmpfs (driverkit.DefaultRunDir): what lasts only while a sandbox is started
// is not made and removed on the data directory's disk at every start and stop.
//
// Inside: user (ids 0..65535 = the sandbox's own host range, or the shared one where the host
// makes no idmapped mounts; the namespace owned by the range's first id: see
// spawn.As), mount, pid, net (lo only), ipc, uts and cgroup namespaces; the image
// read-only under a writable overlay; the agent as PID 1 with no capabilities, no_new_privs,
// Landlock and a seccomp filter. See nsinit for the sandbox side (the init, which is the agent
// binary started with nsinit.Arg).
package ns

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/nsinit"
	"github.com/littlebigbrain/lbb/internal/runtime/ns/zygote"
	"github.com/littlebigbrain/lbb/internal/runtime/spawn"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// Config configures the driver. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// StateDir holds one directory per sandbox (default /var/lib/lbb/sandboxes).
	StateDir string
	// RunDir holds a started sandbox's mount points, one directory per sandbox (default
	// driverkit.DefaultRunDir of StateDir: on /dev/shm when it is a tmpfs, else StateDir).
	RunDir string
	// AgentPath is the static lbb-agent binary on the host. Start copies it under StateDir
	// (exec-only for the sandbox's ids) and bind-mounts the copy read-only at /.lbb/agent.
	AgentPath string
	// CgroupParent is the cgroup under which each sandbox gets its own (default "lbb").
	CgroupParent string
	// Limits fills the zero fields of a Spec's limits.
	Limits runtime.Limits
	// IO throttles each sandbox's disk (its loop device). The zero value takes the
	// defaults (200 MiB/s and 10000 IOPS each way); in a set IOLimits, a zero field is
	// unthrottled.
	IO IOLimits
	// NoFile is the sandbox's RLIMIT_NOFILE (default 4096).
	NoFile uint64
	// IDRegistry is the host-wide registry of sandbox host id ranges (default
	// hostids.DefaultDir); every driver of the host must share it.
	IDRegistry string
	Logger     *slog.Logger
}

// IOLimits throttles a sandbox's workspace disk. With cgroup v1 only direct and synchronous
// writes and all reads are throttled: v1 cannot attribute buffered writeback to a group.
type IOLimits struct {
	ReadBPS, WriteBPS, ReadIOPS, WriteIOPS uint64
}

// DefaultConfig is the configuration the zero fields of a Config take.
func DefaultConfig() Config {
	return Config{
		StateDir:     "/var/lib/lbb/sandboxes",
		CgroupParent: "lbb",
		Limits:       runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024, TmpMiB: 64},
		IO:           IOLimits{ReadBPS: 200 << 20, WriteBPS: 200 << 20, ReadIOPS: 10000, WriteIOPS: 10000},
		NoFile:       4096,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// Driver is the ns runtime driver.
type Driver struct {
	cfg Config

	cgOnce sync.Once
	cg     cgroup.Manager
	cgErr  error

	oomWarn sync.Once

	agent driverkit.AgentCopy

	sbs driverkit.Sandboxes[*sandbox]

	zmu     sync.Mutex
	zygotes map[string]*zygote.Zygote // by image and imports (zygoteKey)
	zclosed bool

	// spawner starts the inits: their user namespace makes Go fork without CLONE_VM, which
	// from this process would copy its whole heap's page tables (spawn.Helper).
	spawner spawn.Helper
}

var (
	_ runtime.Driver            = (*Driver)(nil)
	_ runtime.Freezer           = (*Driver)(nil)
	_ runtime.Prioritizer       = (*Driver)(nil)
	_ runtime.Renamer           = (*Driver)(nil)
	_ runtime.LayerStacker      = (*Driver)(nil)
	_ runtime.InterpreterForker = (*Driver)(nil)
	_ runtime.InitPIDer         = (*sandbox)(nil)
)

// New returns a driver for cfg. It checks nothing: runtime.CheckRequirements does.
func New(cfg Config) *Driver {
	def := DefaultConfig()
	cfg.StateDir = cmp.Or(cfg.StateDir, def.StateDir)
	cfg.CgroupParent = cmp.Or(cfg.CgroupParent, def.CgroupParent)
	cfg.Limits = cfg.Limits.Or(def.Limits)
	cfg.IO = cmp.Or(cfg.IO, def.IO)
	cfg.NoFile = cmp.Or(cfg.NoFile, def.NoFile)
	cfg.Logger = cmp.Or(cfg.Logger, def.Logger)
	if cfg.RunDir == "" {
		cfg.RunDir = driverkit.DefaultRunDir(cfg.StateDir)
	}
	d := &Driver{cfg: cfg}
	d.sbs = driverkit.Sandboxes[*sandbox]{Dir: cfg.StateDir, RunDir: cfg.RunDir, Halt: d.stop, Log: cfg.Logger,
		IDs: &hostids.Registry{Dir: cfg.IDRegistry}, IDMap: idmap.CheckOverlay}
	return d
}

// Name is "ns".
func (d *Driver) Name() string { return "ns" }

// Config is the driver's configuration, defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

func (d *Driver) cgroups() (cgroup.Manager, error) {
	d.cgOnce.Do(func() { d.cg, d.cgErr = cgroup.Detect("", d.cfg.CgroupParent) })
	return d.cg, d.cgErr
}

func (d *Driver) dir(id string) string { return d.sbs.Path(id) }

// RunDirOf is sandbox id's run directory (Config.RunDir), where its mount points are while it
// is started.
func (d *Driver) RunDirOf(id string) string { return d.sbs.RunPath(id) }

// StacksLayers: a template layer is a second read-only lower directory of the sandbox's
// overlay, seen through an idmapped mount of its own as the image is (runtime.LayerStacker):
// an overlay of base and layer made on the host cannot be idmapped, and its sandboxes would
// share the host's id range.
func (d *Driver) StacksLayers() {}

// Create makes the sandbox's state directory and its disk. No process runs.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) error {
	spec, err := driverkit.CheckSpec(spec, d.cfg.Limits)
	if err != nil {
		return err
	}
	if strings.ContainsAny(spec.Image+spec.Layer, ",:\n") {
		return errdefs.InvalidArgument("image %q, layer %q: overlayfs cannot take ',' or ':' in a path", spec.Image, spec.Layer)
	}
	if spec.Layer != "" {
		if fi, err := os.Stat(spec.Layer); err != nil || !fi.IsDir() || !filepath.IsAbs(spec.Layer) {
			return errdefs.InvalidArgument("layer %q: want an absolute directory (%v)", spec.Layer, err)
		}
		if spec.WritableRoot {
			return errdefs.InvalidArgument("a build sandbox runs on its base alone, not on a layer")
		}
	}
	unlock := d.sbs.Lock(spec.ID)
	defer unlock()

	// The mount points are made at each start, in the run directory (start).
	return d.sbs.Create(ctx, spec.ID, driverkit.Layout{
		DiskMiB:   spec.Limits.DiskMiB,
		StateFile: "spec.json",
		State:     spec,
	})
}

func (d *Driver) readSpec(id string) (runtime.Spec, error) {
	var spec runtime.Spec
	return spec, driverkit.ReadJSON(filepath.Join(d.dir(id), "spec.json"), id, &spec)
}

// agentReadyTimeout bounds how long Start waits for a started agent to speak.
const agentReadyTimeout = 30 * time.Second

// Start boots the sandbox and returns once the agent speaks on the channel.
func (d *Driver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	return d.sbs.Start(ctx, id, func() (*sandbox, error) {
		spec, err := d.readSpec(id)
		if err != nil {
			return nil, err
		}
		cg, err := d.cgroups()
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ClassUnavailable, "", err)
		}
		return d.start(ctx, spec, cg)
	})
}

func (d *Driver) start(ctx context.Context, spec runtime.Spec, cg cgroup.Manager) (*sandbox, error) {
	id := spec.ID
	diskDir := d.sbs.RunPath(id, "disk")
	var u undo.Stack
	go cg.Warm()
	if err := u.Step("run directory", func() error { return d.sbs.MakeRunDir(id, "disk", "root") }, nil); err != nil {
		return nil, err
	}
	var agentBin string
	if err := u.Step("agent binary", func() (err error) { agentBin, err = d.agentBinary(); return err }, nil); err != nil {
		return nil, err
	}
	var ident driverkit.Identity
	if err := u.Step("host ids", func() (err error) { ident, err = d.sbs.Identity(id, spec.Image, spec.Layer); return err }, nil); err != nil {
		return nil, err
	}
	major, minor, err := d.sbs.MountDisk(ctx, &u, id)
	if err != nil {
		return nil, err
	}
	if err := u.Step("writable layer", func() error { return prepareLayer(diskDir) }, nil); err != nil {
		return nil, err
	}
	views, err := d.sbs.MountViews(&u, id, spec.Image, spec.Layer, ident)
	if err != nil {
		return nil, err
	}

	lim := spec.Limits
	io := d.cfg.IO
	cgl := cgroup.Limits{
		MemoryBytes: lim.MemoryMiB << 20,
		CPUs:        lim.CPUs,
		Pids:        lim.Pids,
		IO: []cgroup.IOLimit{{Major: major, Minor: minor,
			ReadBPS: io.ReadBPS, WriteBPS: io.WriteBPS, ReadIOPS: io.ReadIOPS, WriteIOPS: io.WriteIOPS}},
	}
	if err := u.Step("cgroups", func() error { return cg.Create(id, cgl) }, func() error {
		ctx, cancel := driverkit.UndoContext()
		defer cancel()
		return cg.Remove(ctx, id)
	}); err != nil {
		return nil, err
	}

	p, err := newInitPipes()
	if err != nil {
		return nil, errors.Join(err, u.Undo())
	}
	defer p.closeAll()
	// The init is the small agent binary (nsinit), not this process's own: its start costs a
	// few milliseconds of CPU less per sandbox than the server's (its Go runtime and package
	// initialisation, its page faults). The sandbox's ids may execute the copy (see
	// agentBinary).
	cmd := &exec.Cmd{
		Path:       agentBin,
		Args:       []string{"lbb-sandbox-init", nsinit.Arg},
		Env:        []string{}, // nothing of the host's environment
		Stdout:     p.logW,
		Stderr:     p.logW,
		ExtraFiles: []*os.File{p.childChan, p.cfgR, p.statusW}, // fds 3, 4, 5
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings:                idMap(ident),
			GidMappings:                idMap(ident),
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:                     true,
			// The sandbox dies with the process that owns its channel: nobody else could talk
			// to it. A restarted server reaps what is left (List, then Destroy).
			Pdeathsig: syscall.SIGKILL,
		},
	}
	// On cgroup v2 the init is born in its group (no move, no wait: see cgroup.warm).
	cgFD, err := cg.CloneFD(id)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cgroup: %w", err), u.Undo())
	}
	if cgFD != nil {
		defer cgFD.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgFD.Fd())
	}
	// The user namespace is the sandbox's own range's (its first id owns it): see spawn.As.
	// The helper is the driver's copy of the agent, which the sandbox needs anyway.
	var proc *os.Process
	if err := u.Step("start init", func() error {
		var err error
		proc, err = d.spawner.Start(ctx, agentBin, cmd, ident.Owner())
		return err
	}, func() error {
		_ = proc.Kill()
		_, err := proc.Wait()
		return err
	}); err != nil {
		return nil, err
	}
	p.closeChildEnds()
	pid := proc.Pid

	// The init builds the sandbox's file system while the host moves it into the cgroups
	// (a v1 cgroup move waits for an RCU grace period per hierarchy: milliseconds). It execs
	// nothing of the sandbox's before the go signal.
	icfg := nsinit.Config{
		Hostname:     spec.Hostname,
		Image:        views.Rootfs,
		Layer:        views.Template,
		Upper:        filepath.Join(views.Disk, "upper"),
		Work:         filepath.Join(views.Disk, "work"),
		Root:         d.sbs.RunPath(id, "root"),
		Agent:        agentBin,
		TmpMiB:       lim.TmpMiB,
		DiskMiB:      lim.DiskMiB,
		NoFile:       d.cfg.NoFile,
		Env:          agentEnv(spec),
		WritableRoot: spec.WritableRoot,
	}
	if err := u.Step("configure init", func() error { return p.sendConfig(icfg) }, nil); err != nil {
		return nil, err
	}
	if cgFD == nil {
		if err := u.Step("join cgroups", func() error { return cg.Add(id, pid) }, nil); err != nil {
			return nil, err
		}
	}
	// The agent (PID 1) must outlive an OOM inside; it resets its children to 0. The legacy
	// oom_adj file is used on purpose: writing oom_score_adj would also lower the minimum its
	// descendants may set themselves, letting user code make itself unkillable.
	// Lowering it needs CAP_SYS_RESOURCE; a host without it (some CI containers) gets a
	// warning, and the agent is then only as safe as its small size makes it.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_adj", pid), []byte("-17"), 0); err != nil {
		d.oomWarn.Do(func() {
			d.cfg.Logger.Warn("cannot protect sandbox agents from the OOM killer", "err", err)
		})
	}
	if err := u.Step("go", p.sendGo, nil); err != nil {
		return nil, err
	}
	if err := u.Step("wait for agent", func() error { return p.waitExec(ctx, proc) }, nil); err != nil {
		return nil, err
	}
	var conn net.Conn
	if err := u.Step("agent ready", func() error {
		var err error
		if conn, err = net.FileConn(p.hostChan); err != nil {
			return fmt.Errorf("channel: %w", err)
		}
		// The agent speaks first (HTTP/2 SETTINGS); peeking consumes nothing.
		wctx, cancel := context.WithTimeout(ctx, agentReadyTimeout)
		defer cancel()
		if err := agent.WaitReady(wctx, conn); err != nil {
			conn.Close()
			return err
		}
		return nil
	}, nil); err != nil {
		return nil, err
	}
	u.Release()

	sb := &sandbox{id: id, conn: conn, proc: proc, cg: cg, done: make(chan struct{})}
	go func() {
		_, _ = proc.Wait()
		close(sb.done)
	}()
	go driverkit.LogAgent(d.cfg.Logger.With("sandbox", id), p.takeLogR())
	d.cfg.Logger.Debug("sandbox started", append([]any{"sandbox", id, "pid", pid}, u.Times...)...)
	return sb, nil
}

// MaybeInit runs the sandbox init or the spawn helper when this process was started as one
// (nsinit.MaybeInit, spawn.MaybeHelper).
// The driver starts the agent binary as the init; test binaries that stand in for it, and
// older callers, call this first thing.
func MaybeInit() {
	spawn.MaybeHelper()
	nsinit.MaybeInit()
}

// AgentChannelFD is where the agent finds its end of the channel.
const AgentChannelFD = nsinit.FDChannel

// idMap maps the sandbox's ids 0..65535 onto its range on the host.
func idMap(ident driverkit.Identity) []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ident.Mapped.Base), Size: int(ident.Mapped.Count)}}
}

// agentEnv is the agent's whole environment; nothing of the host's is passed.
func agentEnv(spec runtime.Spec) []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"HOSTNAME=" + spec.Hostname,
		fmt.Sprintf("LBB_CHANNEL_FD=%d", nsinit.FDChannel),
		"LBB_SANDBOX_ID=" + spec.ID,
	}
}

// prepareLayer makes the overlay's upper and work directories on a mounted disk, owned by the
// sandbox's root as disks store it (the shared range: see driverkit.MountViews). The disk's
// root is the host's, traversable by the sandbox's ids, which reach upper/ and work/ through it.
func prepareLayer(diskDir string) error {
	if err := os.Chmod(diskDir, 0o711); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"upper", 0o755}, {"work", 0o700}} {
		p := filepath.Join(diskDir, d.name)
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Lchown(p, int(runtime.IDBase), int(runtime.IDBase)); err != nil {
			return err
		}
	}
	// lost+found belongs to the host's root; nothing in the sandbox sees it.
	return nil
}

// initPipes are the descriptors between Start and the init.
type initPipes struct {
	hostChan, childChan *os.File // the socketpair
	cfgR, cfgW          *os.File
	statusR, statusW    *os.File
	logR, logW          *os.File
}

func newInitPipes() (p *initPipes, err error) {
	p = &initPipes{}
	defer func() {
		if err != nil {
			p.closeAll()
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	p.hostChan, p.childChan = os.NewFile(uintptr(fds[0]), "channel"), os.NewFile(uintptr(fds[1]), "channel")
	if p.cfgR, p.cfgW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.statusR, p.statusW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.logR, p.logW, err = os.Pipe(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *initPipes) closeChildEnds() {
	for _, f := range []**os.File{&p.childChan, &p.cfgR, &p.statusW, &p.logW} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

func (p *initPipes) closeAll() {
	p.closeChildEnds()
	for _, f := range []**os.File{&p.hostChan, &p.cfgW, &p.statusR, &p.logR} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

func (p *initPipes) takeLogR() *os.File {
	f := p.logR
	p.logR = nil
	return f
}

// sendConfig hands the init its config, one JSON line.
func (p *initPipes) sendConfig(cfg nsinit.Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = p.cfgW.Write(append(b, '\n'))
	return err
}

// sendGo closes the config pipe: the init now runs inside the sandbox's cgroups and may
// exec the agent.
func (p *initPipes) sendGo() error {
	err := p.cfgW.Close()
	p.cfgW = nil
	return err
}

// waitExec waits until the init has exec'd the agent (the close-on-exec status pipe reads EOF)
// or failed (it wrote why, or died).
func (p *initPipes) waitExec(ctx context.Context, proc *os.Process) error {
	type result struct {
		msg []byte
		err error
	}
	ch := make(chan result, 1)
	r := p.statusR
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, 8<<10))
		ch <- result{b, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		_ = proc.Kill()
		<-ch
		return ctx.Err()
	}
	if res.err != nil {
		return res.err
	}
	if len(res.msg) > 0 {
		return errors.New(string(res.msg))
	}
	// EOF without a message: the exec happened, or the init died without a word.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, proc.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if info.Signo != 0 {
		return errors.New("sandbox init died before starting the agent")
	}
	return nil
}

// Stop ends every process of the sandbox and unmounts its disk; the disk stays.
func (d *Driver) Stop(ctx context.Context, id string) error { return d.sbs.Stop(ctx, id) }

// stop works from whatever is there: a sandbox this driver started, one a previous process
// started (its cgroups and mount are found by name), or one that never started.
func (d *Driver) stop(ctx context.Context, id string) error {
	sb, _ := d.sbs.Take(id)
	var errs []error
	t0 := time.Now()
	if sb != nil {
		// Killing PID 1 ends its pid namespace: the kernel kills the rest and the init is
		// reaped only after them. A process stuck in the kernel can hold that up; the cgroup
		// kill below then does what it can.
		_ = sb.proc.Signal(syscall.SIGKILL)
		select {
		case <-sb.done:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
	t1 := time.Now()
	if cg, err := d.cgroups(); err == nil {
		if err := cg.Remove(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("cgroups: %w", err))
		}
	} else if sb != nil {
		errs = append(errs, err)
	}
	if sb != nil {
		select {
		case <-sb.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for init: %w", ctx.Err()))
		}
		sb.conn.Close()
	}
	t2 := time.Now()
	if err := d.sbs.UnmountDisk(ctx, id); err != nil {
		errs = append(errs, err)
	}
	d.cfg.Logger.Debug("sandbox stopped", "sandbox", id, "kill", t1.Sub(t0), "cgroups", t2.Sub(t1), "unmount", time.Since(t2))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	return nil
}

// Destroy stops the sandbox and removes its state and disk. A missing sandbox is no error.
func (d *Driver) Destroy(ctx context.Context, id string) error { return d.sbs.Destroy(ctx, id) }

// List names every sandbox with a state directory, started or not.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.sbs.List() }

// Freeze parks every process of a started sandbox (the freezer cgroup).
func (d *Driver) Freeze(ctx context.Context, id string) error {
	return d.freezer(ctx, id, true)
}

// Thaw wakes a frozen sandbox.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	return d.freezer(ctx, id, false)
}

func (d *Driver) freezer(ctx context.Context, id string, freeze bool) error {
	cg, err := d.startedCgroups(id)
	if err != nil {
		return err
	}
	if freeze {
		return cg.Freeze(ctx, id)
	}
	return cg.Thaw(ctx, id)
}

// SetCPUWeight weighs a started sandbox's claim on contended CPU (runtime.Prioritizer): its
// cgroup's cpu.shares (v1) or cpu.weight (v2) against the other sandboxes'.
func (d *Driver) SetCPUWeight(ctx context.Context, id string, weight int) error {
	cg, err := d.startedCgroups(id)
	if err != nil {
		return err
	}
	return cg.SetCPUWeight(id, weight)
}

// startedCgroups answers the cgroup manager for a sandbox this driver started; conflict
// for one it did not.
func (d *Driver) startedCgroups(id string) (cgroup.Manager, error) {
	if _, err := d.sbs.Started(id); err != nil {
		return nil, err
	}
	return d.cgroups()
}

// sandbox is a started sandbox.
type sandbox struct {
	id   string
	conn net.Conn
	proc *os.Process
	cg   cgroup.Manager
	done chan struct{}
}

func (s *sandbox) ID() string            { return s.id }
func (s *sandbox) Conn() net.Conn        { return s.conn }
func (s *sandbox) Done() <-chan struct{} { return s.done }

// InitPID is the host pid of the sandbox's PID 1 (the agent).
func (s *sandbox) InitPID() int { return s.proc.Pid }

func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	st, err := s.cg.Stats(s.id)
	return runtime.Stats(st), err
}

// Leftovers lists what of sandbox id is on the host: its state directory, mounts under it,
// cgroups, processes in them and loop devices on its disk. After Destroy it is empty; the
// conformance suite and a janitor use it.
func (d *Driver) Leftovers(id string) []string {
	cg, err := d.cgroups()
	if err != nil {
		return d.sbs.Leftovers(id, nil)
	}
	out := d.sbs.Leftovers(id, cg.Paths(id))
	if pids, _ := cg.Procs(id); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	return out
}

// HostIDs answers who started sandbox id is on the host, as its processes show it.
func (d *Driver) HostIDs(id string) (driverkit.HostIDs, error) {
	cg, err := d.cgroups()
	if err != nil {
		return driverkit.HostIDs{}, err
	}
	pids, err := cg.Procs(id)
	if err != nil || len(pids) == 0 {
		return driverkit.HostIDs{}, fmt.Errorf("sandbox %s has no process: %v", id, err)
	}
	return driverkit.ProcessIDs(pids[0])
}

// agentBinary answers the agent binary the init bind-mounts: a copy under the state
// directory, which the sandbox's ids can search, whereas AgentPath may sit anywhere (in a
// private home directory, say), with the mode the sandbox needs (0711). The copy is named by
// its content, so a rebuilt agent gets a new one and a running sandbox keeps its own.
func (d *Driver) agentBinary() (string, error) {
	// Executable but not readable by the sandbox's ids: the kernel then makes the agent
	// non-dumpable at exec, so that user code, which runs as the same id, cannot reach into it
	// through /proc/1 (mem, fd, environ) nor ptrace it.
	return d.agent.Get(d.cfg.AgentPath, filepath.Join(d.cfg.StateDir, ".agent"), 0, 0o711)
}

// DiskFile answers the file of the sandbox's disk (runtime.DiskFiler).
func (d *Driver) DiskFile(ctx context.Context, id string) (string, error) { return d.sbs.DiskFile(id) }
