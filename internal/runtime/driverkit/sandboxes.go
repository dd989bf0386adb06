package driverkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/hostdisk"
	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// Sandboxes is what a driver keeps of its sandboxes on the host: a state directory each
// under Dir, the per-sandbox locks of the lifecycle calls, and the started ones. It runs the
// parts of Start, Stop, Destroy and List that every driver does the same way around the
// driver's own steps.
type Sandboxes[S runtime.Sandbox] struct {
	// Dir holds one directory per sandbox.
	Dir string
	// Halt is the driver's stop, called with the sandbox's lock held: it ends whatever runs
	// of sandbox id and unmounts its disk, from whatever is there (a sandbox this process
	// started, one a previous process started, one that never started). It removes id from
	// the started ones first (Take).
	Halt func(ctx context.Context, id string) error
	// Held, when set, reports whether the driver holds something of id besides its state
	// directory and the started ones (runsc's state): Destroy then has work to do.
	Held func(id string) bool
	// IDs, when set, gives each sandbox a range of host ids of its own (see Identity), claimed
	// at Create and released at Destroy.
	IDs *hostids.Registry
	// IDMap, when set, says whether a sandbox of an image can map its ids onto its own range
	// (see MountViews); without it, or where it refuses, sandboxes map the shared range.
	IDMap IDMapCheck
	// DiskJournal gives new sandboxes' disks a journal (hostdisk.Templates.Journal).
	DiskJournal bool
	// RunDir, when set, holds what of a sandbox lasts only while it is started: its mount
	// points (disk/, the views, a driver's own), one directory per sandbox (RunPath), made
	// again at each start (MakeRunDir). It belongs on a tmpfs (DefaultRunDir): on the data
	// directory's file system every one of them was an inode allocated and freed per
	// sandbox. Empty: the state directory holds them.
	RunDir string
	Log    *slog.Logger

	idmaps    idmapCache
	locks     Locks
	mu        sync.Mutex
	started   map[string]S
	tmplOnce  sync.Once
	templates hostdisk.Templates
	dirMade   atomic.Bool // Dir exists with its mode (MakeDir)
	runMade   atomic.Bool // RunDir exists and is root's (MakeRunDir)
}

// Path is a file of sandbox id's state directory (the directory itself without elem).
func (s *Sandboxes[S]) Path(id string, elem ...string) string {
	return filepath.Join(append([]string{s.Dir, id}, elem...)...)
}

// RunPath is a path in sandbox id's run directory: under RunDir, else its state directory.
func (s *Sandboxes[S]) RunPath(id string, elem ...string) string {
	if s.RunDir == "" {
		return s.Path(id, elem...)
	}
	return filepath.Join(append([]string{s.RunDir, id}, elem...)...)
}

// Lock takes id's lifecycle lock and returns what releases it.
func (s *Sandboxes[S]) Lock(id string) (unlock func()) { return s.locks.Lock(id) }

// Get answers started sandbox id.
func (s *Sandboxes[S]) Get(id string) (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.started[id]
	return sb, ok
}

// Take forgets started sandbox id and answers it.
func (s *Sandboxes[S]) Take(id string) (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.started[id]
	delete(s.started, id)
	return sb, ok
}

func (s *Sandboxes[S]) put(id string, sb S) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started == nil {
		s.started = map[string]S{}
	}
	s.started[id] = sb
}

// Started answers sandbox id when this driver started it; conflict when it did not.
func (s *Sandboxes[S]) Started(id string) (S, error) {
	if err := CheckID(id); err != nil {
		var zero S
		return zero, err
	}
	sb, ok := s.Get(id)
	if !ok {
		return sb, errdefs.Wrap(errdefs.ClassConflict, "", fmt.Errorf("sandbox %s is not started here", id))
	}
	return sb, nil
}

// MakeDir makes sandbox id's state directory; conflict when it exists. Dir itself is
// traversable by everyone (0711), not listable: each sandbox's ids reach their own directory
// through it. A driver that gives sandboxes host ids keeps a sandbox's directory to root
// (0700) until Identity lets the sandbox's ids through; one that does not (local) makes it
// 0711.
func (s *Sandboxes[S]) MakeDir(id string) error {
	mode := os.FileMode(0o711)
	if s.IDs != nil {
		mode = 0o700
	}
	// Dir is made (and its mode set: a chmod is a journalled write) once, by the first
	// sandbox, or again when it has gone.
	if !s.dirMade.Load() {
		if err := s.makeParentDir(); err != nil {
			return err
		}
	}
	err := os.Mkdir(s.Path(id), mode)
	if errors.Is(err, os.ErrNotExist) {
		if err = s.makeParentDir(); err == nil {
			err = os.Mkdir(s.Path(id), mode)
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errdefs.Conflict("sandbox %s already exists", id)
		}
		return err
	}
	return nil
}

// MakeRunDir makes sandbox id's run directory (0700, root's) when RunDir is set, and dirs in
// it (0700), each unless it exists: a start's first step, since a reboot empties RunDir.
func (s *Sandboxes[S]) MakeRunDir(id string, dirs ...string) error {
	if s.RunDir != "" {
		if !s.runMade.Load() {
			if err := s.makeRunParent(); err != nil {
				return err
			}
		}
		err := os.Mkdir(s.RunPath(id), 0o700)
		if errors.Is(err, os.ErrNotExist) {
			if err = s.makeRunParent(); err == nil {
				err = os.Mkdir(s.RunPath(id), 0o700)
			}
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	for _, d := range dirs {
		if err := os.Mkdir(s.RunPath(id, d), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// makeRunParent makes RunDir (0711, like Dir) or checks the one there: it may sit in a
// directory every user may write (/dev/shm), so it must be a real directory of root's that
// nobody else may write.
func (s *Sandboxes[S]) makeRunParent() error {
	if err := os.MkdirAll(s.RunDir, 0o711); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(s.RunDir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("run directory %s is not a directory only root may write (mode %o, owner %d)", s.RunDir, st.Mode, st.Uid)
	}
	s.runMade.Store(true)
	return nil
}

// DefaultRunDir is where a driver whose state directory is stateDir keeps its run
// directories (Sandboxes.RunDir): a directory of its own in /dev/shm when that is a tmpfs,
// else "" (the state directories).
func DefaultRunDir(stateDir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return ""
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	return "/dev/shm/lbb-run-" + hex.EncodeToString(sum[:6])
}

// RemoveRunDir removes RunDir itself when no sandbox's run directory is left in it (a
// driver's Close): a test's driver leaves nothing behind.
func (s *Sandboxes[S]) RemoveRunDir() {
	if s.RunDir != "" {
		_ = os.Remove(s.RunDir)
	}
}

func (s *Sandboxes[S]) makeParentDir() error {
	if err := os.MkdirAll(s.Dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(s.Dir, 0o711); err != nil {
		return err
	}
	s.dirMade.Store(true)
	return nil
}

// Layout is what Create makes of a new sandbox in its state directory.
type Layout struct {
	// Disk is the disk image to copy (sparsely) as disk.img: a checkpoint's disk. Empty takes
	// a fresh one of DiskMiB, formatted once per size under <Dir>/.templates; without either
	// the sandbox has no disk (the local driver's have none).
	Disk    string
	DiskMiB int64
	// Dirs are made in the state directory, with DirMode.
	Dirs    []string
	DirMode os.FileMode
	// State is written last, as JSON, to StateFile: a directory without it is a Create that
	// did not finish.
	StateFile string
	State     any
}

// Create makes sandbox id's state directory as l says; on failure nothing stays. The caller
// holds id's lock.
func (s *Sandboxes[S]) Create(ctx context.Context, id string, l Layout) error {
	dir := s.Path(id)
	var u undo.Stack
	if err := u.Step("state directory", func() error { return s.MakeDir(id) },
		func() error { return os.RemoveAll(dir) }); err != nil {
		return err
	}
	if s.IDs != nil {
		if err := u.Step("host ids", func() error { _, err := s.claim(id); return err },
			func() error { return s.release(id) }); err != nil {
			return err
		}
	}
	if err := u.Step("disk", func() error {
		img := l.Disk
		if img == "" && l.DiskMiB > 0 {
			s.tmplOnce.Do(func() { s.templates.Dir, s.templates.Journal = filepath.Join(s.Dir, ".templates"), s.DiskJournal })
			var err error
			if img, err = s.templates.Get(ctx, l.DiskMiB); err != nil {
				return err
			}
		}
		if img == "" {
			return nil
		}
		return hostdisk.CopySparse(img, filepath.Join(dir, "disk.img"))
	}, nil); err != nil {
		return err
	}
	if err := u.Step("directories", func() error {
		for _, p := range l.Dirs {
			if err := os.Mkdir(filepath.Join(dir, p), l.DirMode); err != nil {
				return err
			}
		}
		return nil
	}, nil); err != nil {
		return err
	}
	if err := u.Step("state", func() error { return WriteJSON(filepath.Join(dir, l.StateFile), l.State) }, nil); err != nil {
		return err
	}
	u.Release()
	s.Log.Debug("sandbox created", append([]any{"sandbox", id}, u.Times...)...)
	return nil
}

// MountDisk is the start step that mounts sandbox id's disk.img on its disk/ directory (see
// hostdisk.Mount), once no loop device holds the image any more (a Stop by another process
// may have left one detaching), and unmounts it when a later step fails. It answers the
// loop device's numbers.
func (s *Sandboxes[S]) MountDisk(ctx context.Context, u *undo.Stack, id string) (major, minor uint32, err error) {
	img, diskDir := s.Path(id, "disk.img"), s.RunPath(id, "disk")
	err = u.Step("mount disk", func() error {
		if m, _ := s.mountsOf(id); len(m) > 0 {
			return fmt.Errorf("%s is still mounted: stop the sandbox first", m[0])
		}
		if err := hostdisk.WaitDetached(ctx, img, diskDir); err != nil {
			return err
		}
		var err error
		major, minor, err = hostdisk.Mount(img, diskDir)
		return err
	}, func() error {
		ctx, cancel := UndoContext()
		defer cancel()
		return hostdisk.Unmount(ctx, diskDir)
	})
	return major, minor, err
}

// UnmountDisk is the stop step that undoes MountDisk: it unmounts sandbox id's disk, checks
// that nothing is mounted under its state directory any more, and then waits until no loop
// device holds disk.img. A file system also mounted in a namespace the kernel is still
// tearing down (gvisor's gofer's) lives on until that is gone, and mounting the image again
// meanwhile would run two ext4 instances on one disk; its loop device detaches itself
// (autoclear) when the last mount goes.
func (s *Sandboxes[S]) UnmountDisk(ctx context.Context, id string) error {
	var errs []error
	for _, dir := range s.dirs(id) {
		if err := unmountViews(dir); err != nil {
			errs = append(errs, err)
		}
		if err := hostdisk.Unmount(ctx, filepath.Join(dir, "disk")); err != nil {
			errs = append(errs, err)
		}
	}
	if m, err := s.mountsOf(id); err != nil || len(m) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v %v", m, err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // a mount holds the loop device: no use waiting
	}
	if err := hostdisk.WaitDetached(ctx, s.Path(id, "disk.img"), s.RunPath(id, "disk")); err != nil {
		return err
	}
	// Its mount points go with what was mounted on them; the next start makes them again.
	if s.RunDir != "" {
		return os.RemoveAll(s.RunPath(id))
	}
	return nil
}

// dirs are where sandbox id's mount points may be: its run directory and, for a sandbox an
// older build created (its state directory has a disk/ mount point), its state directory too.
// A sandbox made since has none there: its stops and starts do not look.
func (s *Sandboxes[S]) dirs(id string) []string {
	if s.RunDir == "" {
		return []string{s.Path(id)}
	}
	if _, err := os.Lstat(s.Path(id, "disk")); err == nil {
		return []string{s.RunPath(id), s.Path(id)}
	}
	return []string{s.RunPath(id)}
}

// mountsOf lists which of the places the host mounts for sandbox id (its state directory
// itself, and its disk and views in each of dirs) are mount points. Start and stop ask it
// rather than hostdisk.MountsUnder, which reads the host's whole mount table; Leftovers, off
// the hot path, still reads the table for anything else under them.
func (s *Sandboxes[S]) mountsOf(id string) ([]string, error) {
	var out []string
	check := func(p string) error {
		mounted, err := hostdisk.IsMounted(p)
		if mounted {
			out = append(out, p)
		}
		return err
	}
	if err := check(s.Path(id)); err != nil {
		return out, err
	}
	for _, dir := range s.dirs(id) {
		for _, p := range [...]string{filepath.Join(dir, "disk"), filepath.Join(dir, rootfsView), filepath.Join(dir, layerView), filepath.Join(dir, templateView)} {
			if err := check(p); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// UndoContext is the context of an undo step: it must run even when the step's context is
// what failed.
func UndoContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// ReapDead stops what is left of sandbox id when its init has died; conflict when it still
// runs. The caller holds id's lock.
func (s *Sandboxes[S]) ReapDead(ctx context.Context, id string) error {
	old, ok := s.Get(id)
	if !ok {
		return nil
	}
	select {
	case <-old.Done():
		return s.Halt(ctx, id)
	default:
		return errdefs.Conflict("sandbox %s is already started", id)
	}
}

// Start boots sandbox id with start, under its lock, once what a dead init left is gone, and
// keeps it among the started ones.
func (s *Sandboxes[S]) Start(ctx context.Context, id string, start func() (S, error)) (S, error) {
	var zero S
	if err := CheckID(id); err != nil {
		return zero, err
	}
	unlock := s.Lock(id)
	defer unlock()
	if err := s.ReapDead(ctx, id); err != nil {
		return zero, err
	}
	sb, err := start()
	if err != nil {
		return zero, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	s.put(id, sb)
	return sb, nil
}

// Stop ends every process of sandbox id and unmounts its disk (Halt); the disk stays.
func (s *Sandboxes[S]) Stop(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	unlock := s.Lock(id)
	defer unlock()
	if _, err := os.Stat(s.Path(id)); errors.Is(err, os.ErrNotExist) {
		return NotFound(id)
	}
	return s.Halt(ctx, id)
}

// Destroy stops sandbox id and removes its state and disk. A missing sandbox is no error.
func (s *Sandboxes[S]) Destroy(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	unlock := s.Lock(id)
	defer unlock()
	dir := s.Path(id)
	_, running := s.Get(id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && !running && (s.Held == nil || !s.Held(id)) {
		return nil
	}
	if err := s.Halt(ctx, id); err != nil {
		// Never remove a directory something is still mounted under.
		return fmt.Errorf("destroy: %w", err)
	}
	var release func() error
	if s.IDs != nil {
		var r hostids.Range
		if ReadJSON(s.Path(id, identityFile), id, &r) == nil {
			owner := s.claimant(id)
			release = func() error { return s.IDs.Release(r, owner) }
		}
	}
	// The run directory first: a state directory left by a crash here is reaped again.
	if s.RunDir != "" {
		if err := os.RemoveAll(s.RunPath(id)); err != nil {
			return fmt.Errorf("destroy sandbox %s: %w", id, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if release != nil {
		if err := release(); err != nil {
			return fmt.Errorf("destroy sandbox %s: %w", id, err)
		}
	}
	s.Log.Debug("sandbox destroyed", "sandbox", id)
	return nil
}

// List names every sandbox with a state directory, started or not.
func (s *Sandboxes[S]) List() ([]string, error) { return StateDirs(s.Dir) }

// Leftovers lists what of sandbox id is on the host: its state directory, mounts under it,
// loop devices on its disk, its claim of host ids, and of cgroups (its cgroup directories)
// those that exist. After
// Destroy it is empty; the conformance suite and a janitor use it. A driver adds what else
// it leaves (processes, runsc's state).
func (s *Sandboxes[S]) Leftovers(id string, cgroups []string) []string {
	var out []string
	dir := s.Path(id)
	if _, err := os.Lstat(dir); err == nil {
		out = append(out, "state directory "+dir)
	}
	if s.RunDir != "" {
		if _, err := os.Lstat(s.RunPath(id)); err == nil {
			out = append(out, "run directory "+s.RunPath(id))
		}
	}
	for _, d := range s.dirs(id) {
		if m, err := hostdisk.MountsUnder(d); err != nil || len(m) > 0 {
			out = append(out, fmt.Sprintf("mounts %v %v", m, err))
		}
	}
	for _, p := range cgroups {
		if _, err := os.Stat(p); err == nil {
			out = append(out, "cgroup "+p)
		}
	}
	for _, l := range hostdisk.LoopDevicesFor(filepath.Join(dir, "disk.img")) {
		out = append(out, "loop device "+l)
	}
	if s.IDs != nil {
		for _, r := range s.IDs.HeldBy(s.claimant(id)) {
			out = append(out, fmt.Sprintf("host ids %d+%d still claimed", r.Base, r.Count))
		}
	}
	return out
}

// WriteJSON writes v to path as JSON, atomically (a temporary file renamed), readable by the
// host's root alone.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON reads path, a state file of sandbox id, into v; a missing file is NotFound(id).
func ReadJSON(path, id string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NotFound(id)
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// CheckSpec checks what every driver needs of a spec (an id, an image directory, a hostname)
// and fills in its defaults: limits from def, the hostname "sandbox".
func CheckSpec(spec runtime.Spec, def runtime.Limits) (runtime.Spec, error) {
	if err := CheckID(spec.ID); err != nil {
		return spec, err
	}
	if !filepath.IsAbs(spec.Image) {
		return spec, errdefs.InvalidArgument("image %q: want an absolute directory", spec.Image)
	}
	if fi, err := os.Stat(spec.Image); err != nil || !fi.IsDir() {
		return spec, errdefs.InvalidArgument("image %q is not a directory: %v", spec.Image, err)
	}
	spec.Limits = spec.Limits.Or(def)
	if spec.Hostname == "" {
		spec.Hostname = "sandbox"
	}
	if err := CheckHostname(spec.Hostname); err != nil {
		return spec, err
	}
	return spec, nil
}

// CheckHostname refuses a name that cannot be a sandbox's hostname.
func CheckHostname(name string) error {
	if !ValidHostname(name) {
		return errdefs.InvalidArgument("hostname %q: want 1-63 letters, digits, '-' or '.'", name)
	}
	return nil
}

// DiskFile answers sandbox id's disk.img (runtime.DiskFiler); NotFound when it has none here.
func (s *Sandboxes[S]) DiskFile(id string) (string, error) {
	if err := CheckID(id); err != nil {
		return "", err
	}
	p := s.Path(id, "disk.img")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", NotFound(id)
	} else if err != nil {
		return "", err
	}
	return p, nil
}
