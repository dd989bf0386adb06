//go:build linux

// Package microvm is the runtime driver that gives each sandbox a virtual machine with a
// kernel of its own: QEMU's microvm machine (the minimal-device design Firecracker has too),
// a Debian cloud kernel pinned by the image build, and no network device.
//
// A sandbox is, on the host:
//
//	<StateDir>/<id>/state.json   the Spec, limits resolved, QEMU's uid, the files it boots
//	<StateDir>/<id>/disk.img     its disk: a sparse ext4 file (with a journal), the workspace
//	                             quota; the guest mounts it, the host never does
//	<StateDir>/<id>/jail/        where the jail mounts QEMU's root, in QEMU's namespace only
//	<cgroup>/<CgroupParent>/<id> QEMU's cgroups: memory (the guest's RAM and QEMU's own),
//	                             CPU quota, pids, freezer
//
// beside <StateDir>/.templates (formatted disks) and <StateDir>/.initrd (initramfs archives,
// see initrd.go).
//
// The machine: the kernel (-kernel) and an initramfs holding the agent, which starts as the
// guest's supervisor (internal/agent/vmguest); the image as a read-only virtio disk (an ext4
// made once per image, images.Disk) and the sandbox's disk as a writable one, throttled by
// QEMU; a virtio entropy device fed from the host's /dev/urandom; virtio-serial ports for
// the console (the driver's log), the channel (the agent protocol, as on every driver) and
// the control port (the driver and the supervisor: accounting, sync, hostname, reseed). Each
// port is a socketpair end the driver passes in: no path anyone else could connect to. The
// guest's RAM is the sandbox's memory limit plus what its kernel needs; inside, the sandbox's
// processes are bounded by the limit itself (a cgroup of the guest), so that an OOM inside is
// reported as on the other drivers. vCPUs are the CPU limit rounded up, the host's CFS quota
// the limit itself.
//
// QEMU runs jailed (jail.go): fresh namespaces, a root holding /usr and the machine's files
// only, the sandbox's own unprivileged uid, no_new_privs, and QEMU's seccomp filter (-sandbox
// on with spawning, privileges and resource control denied).
//
// Acceleration is KVM when /dev/kvm boots a guest (probed once per process, accel.go), else
// TCG: the same machine emulated, which boots in seconds instead of a fraction of one.
package microvm

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/cgroup"
	"github.com/littlebigbrain/lbb/internal/runtime/driverkit"
	"github.com/littlebigbrain/lbb/internal/runtime/spawn"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// Config configures the driver. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// StateDir holds one directory per sandbox (default /var/lib/lbb/microvm).
	StateDir string
	// AgentPath is the static lbb-agent binary on the host: the guest's /init.
	AgentPath string
	// ImagesDir holds the guest kernel and the images' disks (default images.DefaultDir("")).
	ImagesDir string
	// QEMU is qemu-system-x86_64 (default /usr/bin/qemu-system-x86_64).
	QEMU string
	// CgroupParent is the cgroup under which each sandbox's QEMU gets its own
	// (default "lbb-microvm").
	CgroupParent string
	// Limits fills the zero fields of a Spec's limits.
	Limits runtime.Limits
	// IO throttles each sandbox's disk in QEMU; the zero value takes the ns driver's
	// defaults (200 MiB/s and 10000 IOPS each way).
	IO IOLimits
	// NoFile is the sandbox's RLIMIT_NOFILE (default 4096).
	NoFile uint64
	// Accel is "kvm", "tcg" or "" (probe: KVM when it boots a guest, else TCG).
	Accel  string
	Logger *slog.Logger
}

// IOLimits throttles a sandbox's disk (QEMU's throttling of the drive).
type IOLimits struct {
	ReadBPS, WriteBPS, ReadIOPS, WriteIOPS uint64
}

// DefaultQEMU is Debian's QEMU (qemu-system-x86, which scripts/deps.sh installs).
const DefaultQEMU = "/usr/bin/qemu-system-x86_64"

// DefaultConfig is the configuration the zero fields of a Config take.
func DefaultConfig() Config {
	return Config{
		StateDir:     "/var/lib/lbb/microvm",
		ImagesDir:    images.DefaultDir(""),
		QEMU:         DefaultQEMU,
		CgroupParent: "lbb-microvm",
		Limits:       runtime.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024, TmpMiB: 64},
		IO:           IOLimits{ReadBPS: 200 << 20, WriteBPS: 200 << 20, ReadIOPS: 10000, WriteIOPS: 10000},
		NoFile:       4096,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// Sizes around the sandbox's memory limit: the guest's kernel, page tables and supervisor
// take guestOverheadMiB of its RAM beside the sandbox's processes; QEMU itself (and, under
// TCG, its translation cache, tbSizeMiB) takes qemuOverheadMiB of the host's beside the
// guest's RAM. qemuPids bounds QEMU's threads (vCPUs, I/O workers).
const (
	guestOverheadMiB = 128
	qemuOverheadMiB  = 192
	tbSizeMiB        = 64
	qemuPids         = 256
)

// Driver is the microvm runtime driver.
type Driver struct {
	cfg Config

	cgOnce sync.Once
	cg     cgroup.Manager
	cgErr  error

	initrd  initrdCache
	uidMu   sync.Mutex // allocating QEMU uids
	layerMu sync.Mutex // making layers' disks

	sbs driverkit.Sandboxes[*sandbox]
}

var (
	_ runtime.Driver       = (*Driver)(nil)
	_ runtime.Freezer      = (*Driver)(nil)
	_ runtime.Checkpointer = (*Driver)(nil)
	_ runtime.Prioritizer  = (*Driver)(nil)
	_ runtime.Renamer      = (*Driver)(nil)
	_ runtime.LayerStacker = (*Driver)(nil)
	_ runtime.InitPIDer    = (*sandbox)(nil)
)

// New returns a driver for cfg. It checks nothing: runtime.CheckRequirements does.
func New(cfg Config) *Driver {
	def := DefaultConfig()
	cfg.StateDir = cmp.Or(cfg.StateDir, def.StateDir)
	cfg.ImagesDir = cmp.Or(cfg.ImagesDir, def.ImagesDir)
	cfg.QEMU = cmp.Or(cfg.QEMU, def.QEMU)
	cfg.CgroupParent = cmp.Or(cfg.CgroupParent, def.CgroupParent)
	cfg.Limits = cfg.Limits.Or(def.Limits)
	cfg.IO = cmp.Or(cfg.IO, def.IO)
	cfg.NoFile = cmp.Or(cfg.NoFile, def.NoFile)
	cfg.Logger = cmp.Or(cfg.Logger, def.Logger)
	d := &Driver{cfg: cfg}
	d.sbs = driverkit.Sandboxes[*sandbox]{Dir: cfg.StateDir, Halt: func(ctx context.Context, id string) error { return d.stop(ctx, id, true) },
		DiskJournal: true, Log: cfg.Logger}
	return d
}

// Name is "microvm".
func (d *Driver) Name() string { return "microvm" }

// Config is the driver's configuration, defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

func (d *Driver) dir(id string) string { return d.sbs.Path(id) }

func (d *Driver) cgroups() (cgroup.Manager, error) {
	d.cgOnce.Do(func() { d.cg, d.cgErr = cgroup.Detect("", d.cfg.CgroupParent) })
	return d.cg, d.cgErr
}

// state is what the driver keeps of a sandbox between calls (and processes).
type state struct {
	Spec runtime.Spec `json:"spec"`
	// UID is QEMU's: the sandbox's own, QEMUUIDBase + a slot no other sandbox here holds.
	UID int `json:"uid"`
	// Base is the image's disk (images.Disk); Layer, when Spec.Layer is set, the template
	// layer's (layerDisk), which the guest stacks over it.
	Base  string `json:"base"`
	Layer string `json:"layer,omitempty"`
	// Boot is what the machine was first booted with, which a restore must boot again (its
	// saved memory holds that kernel, initramfs and command line): set at the first start.
	Boot *boot `json:"boot,omitempty"`
}

// boot is the machine's boot files and configuration.
type boot struct {
	Kernel  string         `json:"kernel"`
	Initrd  string         `json:"initrd"`
	Release string         `json:"release"`
	Config  agent.VMConfig `json:"config"`
	Accel   string         `json:"accel"`
}

// QEMUUIDBase is the first of the host uids QEMU processes run as, one per sandbox; no host
// account and no other driver's sandbox uses them.
const QEMUUIDBase = 3_000_000_000

// Create makes the sandbox's state directory and its disk. No process runs.
func (d *Driver) Create(ctx context.Context, spec runtime.Spec) error {
	if spec.WritableRoot {
		return errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeNotSupported, "%s cannot make a build sandbox (a writable root): builds run on ns", d.Name())
	}
	spec, err := driverkit.CheckSpec(spec, d.cfg.Limits)
	if err != nil {
		return err
	}
	base, err := d.baseDisk(ctx, spec.Image)
	if err != nil {
		return err
	}
	var layer string
	if spec.Layer != "" {
		if layer, err = d.layerDisk(ctx, spec.Image, spec.Layer); err != nil {
			return err
		}
	}
	unlock := d.sbs.Lock(spec.ID)
	defer unlock()
	return d.create(ctx, state{Spec: spec, Base: base, Layer: layer}, "")
}

// StacksLayers: a template layer is a second read-only disk, stacked over the base by the
// guest (runtime.LayerStacker).
func (d *Driver) StacksLayers() {}

// layerDisk answers the ext4 of template layer directory layer (over image rootfs), made
// once beside it as <layer>.ext4: a layer never changes once built (its directory's name is
// its content's address), and the disk goes when the layer is collected.
func (d *Driver) layerDisk(ctx context.Context, rootfs, layer string) (string, error) {
	if !filepath.IsAbs(layer) {
		return "", errdefs.InvalidArgument("layer %q: want an absolute directory", layer)
	}
	path := filepath.Clean(layer) + ".ext4"
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	m, _, err := images.ManifestOf(rootfs)
	if err != nil {
		return "", errdefs.InvalidArgument("image %s: %v", rootfs, err)
	}
	d.layerMu.Lock()
	defer d.layerMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	var files int
	var bytes int64
	err = filepath.WalkDir(layer, func(_ string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		return "", errdefs.InvalidArgument("layer %s: %v", layer, err)
	}
	t0 := time.Now()
	// The layer's files hold the ids the base's do (the build sandbox's disk stores those).
	if err := images.Ext4(ctx, images.Ext4Options{Src: layer, Dst: path, MiB: (bytes*5/4)>>20 + 64,
		Inodes: files + files/4 + 1024, Label: "lbb-layer", IDBase: m.Recipe.IDBase, IDCount: m.Recipe.IDCount}); err != nil {
		return "", fmt.Errorf("the template layer's disk: %w", err)
	}
	d.cfg.Logger.Info("made a template layer's disk", "layer", layer, "files", files, "bytes", bytes, "took", time.Since(t0))
	return path, nil
}

// baseDisk answers the ext4 of the image whose rootfs is rootfs, made when missing.
func (d *Driver) baseDisk(ctx context.Context, rootfs string) (string, error) {
	m, dir, err := images.ManifestOf(rootfs)
	if err != nil {
		return "", errdefs.InvalidArgument("image %s: %v", rootfs, err)
	}
	p, err := images.Disk(ctx, images.Options{Dir: dir}, m)
	if err != nil {
		return "", fmt.Errorf("the image's disk: %w", err)
	}
	return p, nil
}

// create makes the state directory and the disk (a fresh one, or a copy of disk), owned by
// a uid of its own. The caller holds the id's lock.
func (d *Driver) create(ctx context.Context, st state, disk string) error {
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	uid, err := d.freeUID()
	if err != nil {
		return err
	}
	st.UID = uid
	id := st.Spec.ID
	if err := d.sbs.Create(ctx, id, driverkit.Layout{
		Disk: disk, DiskMiB: st.Spec.Limits.DiskMiB, Dirs: []string{"jail"}, DirMode: 0o700,
		StateFile: "state.json", State: st,
	}); err != nil {
		return err
	}
	if err := os.Chown(filepath.Join(d.dir(id), "disk.img"), uid, uid); err != nil {
		return errors.Join(err, os.RemoveAll(d.dir(id)))
	}
	return nil
}

// freeUID answers a QEMU uid no sandbox of this state directory holds. The caller holds
// uidMu.
func (d *Driver) freeUID() (int, error) {
	ids, err := d.sbs.List()
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, id := range ids {
		if st, err := d.readState(id); err == nil {
			used[st.UID] = true
		}
	}
	for slot := 0; slot < 1<<20; slot++ {
		if !used[QEMUUIDBase+slot] {
			return QEMUUIDBase + slot, nil
		}
	}
	return 0, errors.New("no free QEMU uid")
}

func readState(path, id string) (state, error) {
	var st state
	return st, driverkit.ReadJSON(path, id, &st)
}

func (d *Driver) readState(id string) (state, error) {
	return readState(filepath.Join(d.dir(id), "state.json"), id)
}

// agentReadyTimeout bounds how long Start waits for the guest's agent; under TCG on a loaded
// host a boot takes many seconds.
const agentReadyTimeout = 3 * time.Minute

// Start boots the sandbox and returns once the agent speaks on the channel.
func (d *Driver) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	return d.boot(ctx, id, "", false)
}

// boot starts sandbox id afresh, or from the machine saved in memFile (a fork when fork).
func (d *Driver) boot(ctx context.Context, id, memFile string, fork bool) (runtime.Sandbox, error) {
	return d.sbs.Start(ctx, id, func() (*sandbox, error) {
		st, err := d.readState(id)
		if err != nil {
			return nil, err
		}
		cg, err := d.cgroups()
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ClassUnavailable, "", err)
		}
		sb, err := d.start(ctx, st, cg, memFile, fork)
		var ended *qemuEnded
		if err != nil && memFile == "" && ctx.Err() == nil && errors.As(err, &ended) {
			// A boot (not a restore) whose QEMU ended before the agent spoke ran no command:
			// boot once more. (Under TCG on a loaded host about one CI run in ten here saw
			// one, with nothing printed by QEMU or the guest's console; the error now says
			// how QEMU ended.)
			d.cfg.Logger.Warn("QEMU ended before the agent spoke; booting once more", "sandbox", id, "err", err)
			if st, err = d.readState(id); err != nil {
				return nil, err
			}
			sb, err = d.start(ctx, st, cg, "", fork)
		}
		return sb, err
	})
}

// pipes are the socketpairs between the driver and QEMU: the driver's ends and QEMU's.
type pipes struct {
	qmp, channel, control, console [2]*os.File // [0] the driver's, [1] QEMU's
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	for _, pair := range []*[2]*os.File{&p.qmp, &p.channel, &p.control, &p.console} {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		pair[0], pair[1] = os.NewFile(uintptr(fds[0]), "driver"), os.NewFile(uintptr(fds[1]), "qemu")
	}
	return p, nil
}

func (p *pipes) qemuEnds() []*os.File {
	return []*os.File{p.qmp[1], p.channel[1], p.control[1], p.console[1]}
}

func (p *pipes) closeQEMUEnds() {
	for _, f := range p.qemuEnds() {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) close() {
	for _, pair := range []*[2]*os.File{&p.qmp, &p.channel, &p.control, &p.console} {
		for _, f := range pair {
			if f != nil {
				f.Close()
			}
		}
	}
}

// QEMU's descriptors: the pipes' QEMU ends in qemuEnds' order, then the saved machine.
const (
	fdQMP = 3 + iota
	fdChannel
	fdControl
	fdConsole
	fdIncoming
)

func (d *Driver) start(ctx context.Context, st state, cg cgroup.Manager, memFile string, fork bool) (*sandbox, error) {
	spec := st.Spec
	id, dir := spec.ID, d.dir(spec.ID)
	var u undo.Stack
	if err := u.Step("leftovers", func() error {
		ctx, cancel := driverkit.UndoContext()
		defer cancel()
		return d.cleanup(ctx, id)
	}, nil); err != nil {
		return nil, err
	}
	if err := u.Step("boot files", func() error {
		if st.Boot != nil {
			return nil // a machine booted before boots as it was (its memory may be restored)
		}
		b, err := d.bootFiles(st)
		if err == nil {
			st.Boot = &b
			err = driverkit.WriteJSON(filepath.Join(dir, "state.json"), st)
		}
		return err
	}, nil); err != nil {
		return nil, err
	}
	if memFile != "" && st.Boot.Accel != d.accel().name {
		return nil, fmt.Errorf("the machine was saved under %s; this host runs %s", st.Boot.Accel, d.accel().name)
	}
	lim := spec.Limits
	guestMiB := lim.MemoryMiB + guestOverheadMiB
	if err := u.Step("cgroups", func() error {
		return cg.Create(id, cgroup.Limits{MemoryBytes: (guestMiB + qemuOverheadMiB) << 20, CPUs: lim.CPUs, Pids: qemuPids})
	}, func() error {
		ctx, cancel := driverkit.UndoContext()
		defer cancel()
		return cg.Remove(ctx, id)
	}); err != nil {
		return nil, err
	}
	p, err := newPipes()
	if err != nil {
		return nil, errors.Join(err, u.Undo())
	}
	defer p.closeQEMUEnds()
	files := p.qemuEnds()
	if memFile != "" {
		f, err := os.Open(memFile)
		if err != nil {
			p.close()
			return nil, errors.Join(err, u.Undo())
		}
		defer f.Close()
		files = append(files, f)
	}
	jc := jailConfig{
		Root: filepath.Join(dir, "jail"),
		Files: map[string]string{"vmlinuz": st.Boot.Kernel, "initrd": st.Boot.Initrd, "base.ext4": st.Base,
			"disk.img": filepath.Join(dir, "disk.img")},
		Writable: []string{"disk.img"},
		KVM:      st.Boot.Accel == "kvm",
		UID:      st.UID,
		Argv:     d.qemuArgs(st, guestMiB, memFile != ""),
		FDs:      len(files),
	}
	if st.Layer != "" {
		jc.Files["layer.ext4"] = st.Layer
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		p.close()
		return nil, errors.Join(err, u.Undo())
	}
	defer cfgR.Close()
	defer cfgW.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		p.close()
		return nil, errors.Join(err, u.Undo())
	}
	defer logW.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"lbb-microvm-jail", jailArg},
		Env:        []string{},
		Stdout:     logW,
		Stderr:     logW,
		ExtraFiles: append([]*os.File{cfgR}, files...), // fd 3, then QEMU's from 4
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
				syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			Setsid: true,
			// The machine dies with the process that owns its channel, as ns sandboxes do. A
			// restarted server reaps what is left (List, then Destroy).
			Pdeathsig: syscall.SIGKILL,
		},
	}
	cgFD, err := cg.CloneFD(id)
	if err != nil {
		p.close()
		logR.Close()
		return nil, errors.Join(fmt.Errorf("cgroup: %w", err), u.Undo())
	}
	if cgFD != nil {
		defer cgFD.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgFD.Fd())
	}
	exited := make(chan struct{})
	if err := u.Step("start QEMU", func() error {
		if err := spawn.Start(cmd); err != nil {
			return err
		}
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		return nil
	}, func() error {
		_ = cmd.Process.Kill()
		<-exited
		return nil
	}); err != nil {
		p.close()
		logR.Close()
		return nil, err
	}
	logW.Close()
	qemuLog := driverkit.NewTail(logR, 2048)
	go driverkit.LogAgent(d.cfg.Logger.With("sandbox", id, "from", "qemu"), qemuLog)
	if err := u.Step("configure the jail", func() error { return json.NewEncoder(cfgW).Encode(jc) }, nil); err != nil {
		p.close()
		return nil, err
	}
	if cgFD == nil {
		if err := u.Step("join cgroups", func() error { return cg.Add(id, cmd.Process.Pid) }, nil); err != nil {
			p.close()
			return nil, err
		}
	}
	cfgW.Close() // go
	p.closeQEMUEnds()
	console := driverkit.NewTail(p.console[0], 2048)
	go driverkit.LogAgent(d.cfg.Logger.With("sandbox", id), console)

	sb := &sandbox{d: d, id: id, cmd: cmd, done: exited, cg: cg}
	fail := func(err error) (*sandbox, error) {
		sb.closeConns()
		return nil, errors.Join(err, u.Undo())
	}
	var err2 error
	sb.monConn, sb.conn, sb.ctlConn, err2 = connect(p)
	p.qmp[0].Close() // connect dup'ed them
	p.channel[0].Close()
	p.control[0].Close()
	if err2 != nil {
		return fail(err2)
	}
	wctx, cancel := context.WithTimeout(ctx, agentReadyTimeout)
	defer cancel()
	if err := u.Step("QMP", func() error {
		q, err := newQMP(wctx, sb.monConn.(*net.UnixConn))
		sb.mon = q
		return err
	}, nil); err != nil {
		return fail(err)
	}
	if memFile != "" {
		if err := u.Step("load the machine", func() error { return sb.resume(wctx) }, nil); err != nil {
			return fail(err)
		}
	}
	// QEMU's wait status, once exited is closed (cmd.Wait set it before).
	status := func() string { return cmd.ProcessState.String() }
	if err := u.Step("agent ready", func() error { return waitReady(wctx, sb.conn, exited, status, qemuLog, console) }, nil); err != nil {
		return fail(err)
	}
	if memFile != "" {
		if err := u.Step("reseed", func() error { return sb.reseed(wctx, fork) }, nil); err != nil {
			return fail(err)
		}
	}
	u.Release()
	d.cfg.Logger.Debug("sandbox started", append([]any{"sandbox", id, "pid", cmd.Process.Pid, "accel", st.Boot.Accel}, u.Times...)...)
	return sb, nil
}

// connect makes net.Conns of the driver's ends of the pipes.
func connect(p *pipes) (mon, channel, control net.Conn, err error) {
	var conns []net.Conn
	for _, f := range []*os.File{p.qmp[0], p.channel[0], p.control[0]} {
		c, err := net.FileConn(f)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, nil, nil, err
		}
		conns = append(conns, c)
	}
	return conns[0], conns[1], conns[2], nil
}

// waitReady waits for the agent's Hello on the channel, or QEMU's end.
// When QEMU ended, the error carries its wait status (status, called only then) and the last
// lines it and the guest's console printed.
func waitReady(ctx context.Context, conn net.Conn, exited <-chan struct{}, status func() string, logs ...*driverkit.Tail) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := agent.WaitReady(ctx, conn)
	if err == nil {
		return nil
	}
	select {
	case <-exited:
		msg := fmt.Sprintf("QEMU ended (%s) before the agent spoke", status())
		for i, l := range logs {
			if last := l.Last(time.Second); last != "" {
				msg += fmt.Sprintf("; %s printed: %q", [...]string{"QEMU", "the console"}[min(i, 1)], last)
			}
		}
		return &qemuEnded{msg}
	case <-time.After(time.Second):
	}
	return err
}

// qemuEnded is waitReady's error when QEMU exited before the agent's Hello.
type qemuEnded struct{ msg string }

func (e *qemuEnded) Error() string { return e.msg }

// bootFiles answers what a first boot of st uses: the pinned kernel, the initramfs of the
// current agent, the guest's configuration, and the acceleration.
func (d *Driver) bootFiles(st state) (boot, error) {
	k, err := images.CurrentKernel(d.cfg.ImagesDir)
	if err != nil {
		return boot{}, errdefs.Wrap(errdefs.ClassUnavailable, "", err)
	}
	initrd, err := d.initrd.get(d.cfg.StateDir, d.cfg.AgentPath, k)
	if err != nil {
		return boot{}, err
	}
	lim := st.Spec.Limits
	return boot{
		Kernel: k.Vmlinuz(), Initrd: initrd, Release: k.Recipe.Release, Accel: d.accel().name,
		Config: agent.VMConfig{SandboxID: st.Spec.ID, Hostname: st.Spec.Hostname, MemoryMiB: lim.MemoryMiB,
			Pids: lim.Pids, TmpMiB: lim.TmpMiB, DiskMiB: lim.DiskMiB, NoFile: d.cfg.NoFile, Layer: st.Layer != ""},
	}, nil
}

// qemuArgs is QEMU's command line for st (in the jail: its files under /vm). Everything a
// restore must match (machine, memory, vCPUs, devices and their order) depends on st alone.
func (d *Driver) qemuArgs(st state, guestMiB int64, incoming bool) []string {
	b := st.Boot
	vcpus := max(1, int(math.Ceil(st.Spec.Limits.CPUs)))
	cmdline := append([]string{"console=hvc0", "quiet", "panic=-1"}, b.Config.Cmdline()...)
	machine := "microvm,x-option-roms=off,isa-serial=off,rtc=on,acpi=on"
	accel, cpu := "kvm", "host"
	if b.Accel == "tcg" {
		// No kvmclock: the PIT and RTC are there for the kernel's timer setup, and the TSC's
		// rate (the host's, under TCG) is given so that the kernel need not calibrate it.
		machine += ",pit=on"
		accel, cpu = fmt.Sprintf("tcg,tb-size=%d", tbSizeMiB), "max"
		// no_timer_check: the kernel's check that the IO-APIC delivers the timer counts ticks
		// over a few of its milliseconds; an emulated vCPU starved by a loaded host misses
		// them, and the kernel panics ("IO-APIC + timer doesn't work"), which ends QEMU.
		cmdline = append(cmdline, "no_timer_check")
		if khz := hostTSCkHz(); khz > 0 {
			cmdline = append(cmdline, fmt.Sprintf("tsc_early_khz=%d", khz), "tsc=reliable")
		}
	}
	io := d.cfg.IO
	throttle := ""
	for k, v := range map[string]uint64{"bps-read": io.ReadBPS, "bps-write": io.WriteBPS, "iops-read": io.ReadIOPS, "iops-write": io.WriteIOPS} {
		if v > 0 {
			throttle += fmt.Sprintf(",throttling.%s=%d", k, v)
		}
	}
	args := []string{
		d.cfg.QEMU,
		"-name", "lbb-" + st.Spec.ID,
		"-machine", machine,
		"-accel", accel,
		"-cpu", cpu,
		"-smp", fmt.Sprint(vcpus),
		"-m", fmt.Sprintf("%dM", guestMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-kernel", "/vm/vmlinuz", "-initrd", "/vm/initrd", "-append", strings.Join(cmdline, " "),
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d", fdQMP), "-mon", "chardev=qmp,mode=control",
		"-device", "virtio-serial-device,max_ports=4",
		"-chardev", fmt.Sprintf("socket,id=console,fd=%d", fdConsole), "-device", "virtconsole,chardev=console,id=console",
		"-chardev", fmt.Sprintf("socket,id=channel,fd=%d", fdChannel), "-device", "virtserialport,chardev=channel,id=channel,name=" + agent.PortChannel,
		"-chardev", fmt.Sprintf("socket,id=control,fd=%d", fdControl), "-device", "virtserialport,chardev=control,id=control,name=" + agent.PortControl,
		"-drive", "id=base,file=/vm/base.ext4,format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=base,serial=" + agent.DiskBase,
		// unsafe: the guest's flushes are not waited for; what it wrote is in the host's page
		// cache (which survives QEMU), and the driver syncs before it saves the machine.
		"-drive", "id=disk,file=/vm/disk.img,format=raw,if=none,cache=unsafe" + throttle,
		"-device", "virtio-blk-device,drive=disk,serial=" + agent.DiskWorkspace,
		"-object", "rng-random,id=rng,filename=/dev/urandom", "-device", "virtio-rng-device,rng=rng",
	}
	if st.Layer != "" {
		args = append(args, "-drive", "id=layer,file=/vm/layer.ext4,format=raw,if=none,readonly=on",
			"-device", "virtio-blk-device,drive=layer,serial="+agent.DiskLayer)
	}
	if incoming {
		args = append(args, "-incoming", fmt.Sprintf("fd:%d", fdIncoming))
	}
	if os.Getenv("LBB_MICROVM_SERIAL") == "1" {
		// Debugging a boot: the kernel's messages from the first on, on a serial port whose
		// output (QEMU's stdout) the driver logs.
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "microvm,"):
				args[i] = strings.Replace(a, "isa-serial=off", "isa-serial=on", 1)
			case strings.HasPrefix(a, "console=hvc0 quiet"):
				args[i] = strings.Replace(a, "console=hvc0 quiet", "console=ttyS0", 1)
			}
		}
		args = append(args, "-serial", "stdio")
	}
	return args
}

// hostTSCkHz reads the host's TSC rate (the guest's under TCG) from /proc/cpuinfo; 0 when
// it does not tell.
func hostTSCkHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			var mhz float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &mhz); err == nil && mhz > 0 {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

// Stop ends the machine and its QEMU; the disk stays.
func (d *Driver) Stop(ctx context.Context, id string) error { return d.sbs.Stop(ctx, id) }

// stop works from whatever is there: a machine this driver started (synced first when sync),
// one a previous process started (its QEMU is found in its cgroup), or none.
func (d *Driver) stop(ctx context.Context, id string, sync bool) error {
	sb, _ := d.sbs.Take(id)
	if sb != nil && sync && !sb.frozen.Load() {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := sb.control(sctx, agent.VMRequest{Op: agent.VMOpSync}, nil); err != nil {
			d.cfg.Logger.Debug("no sync before the stop", "sandbox", id, "err", err)
		}
		cancel()
	}
	err := d.cleanup(ctx, id)
	if sb != nil {
		sb.closeConns()
		if err == nil {
			select {
			case <-sb.done:
			case <-ctx.Done():
				err = fmt.Errorf("wait for QEMU: %w", ctx.Err())
			}
		}
	}
	if err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	d.cfg.Logger.Debug("sandbox stopped", "sandbox", id)
	return nil
}

// cleanup kills whatever runs in the sandbox's cgroups (its QEMU) and removes them.
func (d *Driver) cleanup(ctx context.Context, id string) error {
	cg, err := d.cgroups()
	if err != nil {
		return err
	}
	return cg.Remove(ctx, id)
}

// Destroy stops the sandbox and removes its state and disk. A missing sandbox is no error.
func (d *Driver) Destroy(ctx context.Context, id string) error { return d.sbs.Destroy(ctx, id) }

// List names every sandbox with a state directory, started or not.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.sbs.List() }

// Freeze parks the whole machine (QEMU's cgroup freezer): its clock goes on with the host's,
// so a thawed guest's time is right.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	if err := sb.cg.Freeze(ctx, id); err != nil {
		return err
	}
	sb.frozen.Store(true)
	return nil
}

// Thaw wakes a frozen machine.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	if err := sb.cg.Thaw(ctx, id); err != nil {
		return err
	}
	sb.frozen.Store(false)
	return nil
}

// SetCPUWeight weighs a started machine's claim on contended CPU (runtime.Prioritizer).
func (d *Driver) SetCPUWeight(ctx context.Context, id string, weight int) error {
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	return sb.cg.SetCPUWeight(id, weight)
}

// SetHostname renames a started sandbox (runtime.Renamer): the guest's supervisor sets it.
func (d *Driver) SetHostname(ctx context.Context, id, name string) error {
	if err := driverkit.CheckHostname(name); err != nil {
		return err
	}
	sb, err := d.sbs.Started(id)
	if err != nil {
		return err
	}
	return sb.control(ctx, agent.VMRequest{Op: agent.VMOpHostname, Hostname: name}, nil)
}

// Leftovers lists what of sandbox id is on the host: its state directory, mounts under it,
// cgroups and the processes in them. After Destroy it is empty.
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

// randomHex answers n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// DiskFile answers the file of the sandbox's disk (runtime.DiskFiler).
func (d *Driver) DiskFile(ctx context.Context, id string) (string, error) { return d.sbs.DiskFile(id) }
