package fleet

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"time"

	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Info describes the fleet as one machine: the first up host's default driver and image,
// every driver some host offers, the capacity of the hosts that are up.
func (f *Fleet) Info(ctx context.Context) (hostagent.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out hostagent.Info
	if len(f.members) == 0 {
		return out, errdefs.New(errdefs.ClassUnavailable, "no_host", "no host has joined yet")
	}
	found := false
	for _, m := range f.members {
		if m.state != store.HostUp {
			continue
		}
		if !found {
			out.Default, out.Image, found = m.info.Default, m.info.Image, true
		}
		for _, d := range m.info.Offered {
			if !slices.Contains(out.Offered, d) {
				out.Offered = append(out.Offered, d)
			}
		}
		out.Capacity.CPUs += m.info.Capacity.CPUs
		out.Capacity.MemoryMiB += m.info.Capacity.MemoryMiB
		out.Capacity.Sandboxes += m.info.Capacity.Sandboxes
	}
	if !found {
		return out, errdefs.New(errdefs.ClassUnavailable, "no_host", "no host is up")
	}
	slices.Sort(out.Offered)
	for _, m := range f.members {
		for d, why := range m.info.Unavailable {
			if !slices.Contains(out.Offered, d) {
				if out.Unavailable == nil {
					out.Unavailable = map[string]string{}
				}
				out.Unavailable[d] = why
			}
		}
	}
	return out, nil
}

// One-call runs.

func (f *Fleet) Claim(ctx context.Context, req hostagent.RunRequest) error {
	m, err := f.place(ctx, req.SandboxID, kindRun, req.Runtime)
	if err != nil {
		return err
	}
	if err := f.check(m, m.Host.Claim(ctx, req)); err != nil {
		f.unplace(ctx, req.SandboxID)
		return err
	}
	return nil
}

func (f *Fleet) Unclaim(ctx context.Context, sandboxID string) error {
	m, err := f.hostOf(ctx, sandboxID)
	if err != nil {
		if gone(err) {
			f.letGo(ctx, m, sandboxID)
			return nil
		}
		return err
	}
	err = f.check(m, m.Host.Unclaim(ctx, sandboxID))
	if gone(err) {
		f.letGo(ctx, m, sandboxID)
		return nil
	}
	f.unplace(ctx, sandboxID)
	return err
}

// Run runs req on the host that claimed its sandbox, else on a host chosen now. A run whose
// host broke off is host_lost: it may have run there, so it is never run elsewhere.
func (f *Fleet) Run(ctx context.Context, req hostagent.RunRequest) (hostagent.RunResult, error) {
	m, err := f.hostOf(ctx, req.SandboxID)
	if errdefs.IsNotFound(err) {
		m, err = f.place(ctx, req.SandboxID, kindRun, req.Runtime)
	}
	if err != nil {
		return hostagent.RunResult{}, err
	}
	f.noteCommand(req.CommandID, req.SandboxID)
	return whileUp(f, m, func() (hostagent.RunResult, error) { return m.Host.Run(ctx, req) })
}

func (f *Fleet) Release(ctx context.Context, sandboxID string) (hostagent.Ending, error) {
	m, err := f.hostOf(ctx, sandboxID)
	if err != nil {
		if gone(err) {
			f.letGo(ctx, m, sandboxID)
			return hostagent.Ending{At: time.Now().UTC()}, nil
		}
		return hostagent.Ending{}, err
	}
	end, err := m.Host.Release(ctx, sandboxID)
	if err = f.check(m, err); gone(err) {
		f.letGo(ctx, m, sandboxID)
		return hostagent.Ending{At: time.Now().UTC()}, nil
	}
	f.unplace(ctx, sandboxID)
	return end, err
}

// Long-lived sandboxes.

func (f *Fleet) Create(ctx context.Context, req hostagent.CreateRequest) (hostagent.Sandbox, error) {
	m, err := f.place(ctx, req.ID, store.PlacedSandbox, req.Runtime)
	if err != nil {
		return hostagent.Sandbox{}, err
	}
	sb, err := m.Host.Create(ctx, req)
	if err = f.check(m, err); err != nil {
		f.unplace(ctx, req.ID)
		return sb, err
	}
	if sb.ID != req.ID {
		// The warm pool's sandbox, with the pool's id.
		if err := f.placeOn(ctx, m, sb.ID, store.PlacedSandbox); err != nil {
			m.Host.Destroy(context.WithoutCancel(ctx), sb.ID)
			f.unplace(ctx, req.ID)
			return hostagent.Sandbox{}, err
		}
		f.unplace(ctx, req.ID)
	}
	f.noteCommand(sb.Kernel, sb.ID)
	return sb, nil
}

// Resume starts a stopped or paused sandbox again on the host that holds its disk. A stopped
// sandbox whose workspace is archived (req.Workspace), or a paused one whose checkpoint is
// (req.Checkpoint), and whose host is lost resumes on a host placed now among those sharing
// the lost host's blob store (Info.Blobs), which restores the archive; the old host destroys its copy when it answers again. One whose host merely failed a call is not moved (what that
// call did there is unknown).
func (f *Fleet) Resume(ctx context.Context, req hostagent.ResumeRequest) (hostagent.Sandbox, error) {
	m, err := f.hostOf(ctx, req.ID)
	if err == nil || req.Workspace == nil && req.Checkpoint == nil || m == nil || errdefs.CodeOf(err) != hostagent.CodeHostLost {
		if err != nil {
			return hostagent.Sandbox{}, err
		}
		sb, err := whileUp(f, m, func() (hostagent.Sandbox, error) { return m.Host.Resume(ctx, req) })
		if err == nil {
			f.setRunning(req.ID, true)
		}
		return sb, err
	}
	n, err := f.placeSharing(ctx, m, req.ID, req.Runtime, err)
	if err != nil {
		return hostagent.Sandbox{}, err
	}
	f.letGo(ctx, m, req.ID)
	f.placeOn(ctx, n, req.ID, store.PlacedSandbox) // letGo forgot it
	f.log.Info("resuming a sandbox from its archived workspace on another host", "sandbox", req.ID, "host", n.ID)
	// A failed resume leaves it placed on n, which restores the archive at the next try.
	return whileUp(f, n, func() (hostagent.Sandbox, error) { return n.Host.Resume(ctx, req) })
}

// placeSharing places sandbox id, whose host m is lost (lost is the error that says so), on
// a host that shares m's blob store, so that it restores the archive of what m held: only
// those can. It answers lost when none is.
func (f *Fleet) placeSharing(ctx context.Context, m *member, id, runtime string, lost error) (*member, error) {
	f.mu.Lock()
	shared := m.info.Blobs
	f.mu.Unlock()
	if shared == "" {
		return nil, lost
	}
	n, err := f.place(ctx, id, store.PlacedSandbox, runtime, func(c *member) bool { return c.info.Blobs == shared })
	if err != nil {
		return nil, errors.Join(lost, err)
	}
	return n, nil
}

// ArchiveWorkspace archives a stopped sandbox's disk from its host to the blob store.
func (f *Fleet) ArchiveWorkspace(ctx context.Context, id string) (hostagent.Workspace, error) {
	return routed(ctx, f, id, func(h hostagent.Host) (hostagent.Workspace, error) { return h.ArchiveWorkspace(ctx, id) })
}

func (f *Fleet) Stop(ctx context.Context, id string) (store.Usage, error) {
	u, err := routed(ctx, f, id, func(h hostagent.Host) (store.Usage, error) { return h.Stop(ctx, id) })
	if err == nil {
		f.setRunning(id, false)
	}
	return u, err
}

// Destroy ends a sandbox on its host; one whose host is gone is forgotten here, and
// destroyed by the host when it answers again.
func (f *Fleet) Destroy(ctx context.Context, id string) (store.Usage, error) {
	m, err := f.hostOf(ctx, id)
	if errdefs.IsNotFound(err) {
		return store.Usage{}, nil
	}
	if err != nil {
		if gone(err) {
			f.letGo(ctx, m, id)
			return store.Usage{}, nil
		}
		return store.Usage{}, err
	}
	u, err := m.Host.Destroy(ctx, id)
	if err = f.check(m, err); gone(err) {
		f.letGo(ctx, m, id)
		return u, nil
	}
	if err == nil {
		f.unplace(ctx, id)
	}
	return u, err
}

func (f *Fleet) Pause(ctx context.Context, id string) (hostagent.Paused, error) {
	p, err := routed(ctx, f, id, func(h hostagent.Host) (hostagent.Paused, error) { return h.Pause(ctx, id) })
	if err == nil {
		f.setRunning(id, false)
	}
	return p, err
}

// Snapshot saves the sandbox on its host, where the snapshot's files then are.
func (f *Fleet) Snapshot(ctx context.Context, id, snapshotID string) (hostagent.SnapshotInfo, error) {
	m, err := f.hostOf(ctx, id)
	if err != nil {
		return hostagent.SnapshotInfo{}, err
	}
	if err := f.placeOn(ctx, m, snapshotID, store.PlacedSnapshot); err != nil {
		return hostagent.SnapshotInfo{}, err
	}
	info, err := m.Host.Snapshot(ctx, id, snapshotID)
	if err = f.check(m, err); err != nil {
		f.unplace(ctx, snapshotID)
	}
	return info, err
}

func (f *Fleet) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	m, err := f.hostOf(ctx, snapshotID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		if gone(err) {
			f.letGo(ctx, m, snapshotID)
			return nil
		}
		return err
	}
	if err := f.check(m, m.Host.DeleteSnapshot(ctx, snapshotID)); err != nil {
		if gone(err) {
			f.letGo(ctx, m, snapshotID)
			return nil
		}
		return err
	}
	f.unplace(ctx, snapshotID)
	return nil
}

// Fork starts the fork on the host of its snapshot (or of its source): the files it starts
// from are there. A snapshot archived in the blob store (req.Archive) whose host is lost
// forks on a host placed now among those sharing the lost host's blob store, which restores
// the archive and holds the snapshot from then on.
func (f *Fleet) Fork(ctx context.Context, req hostagent.ForkRequest) (hostagent.Sandbox, error) {
	from := req.Source
	if req.SnapshotID != "" {
		from = req.SnapshotID
	}
	m, err := f.hostOf(ctx, from)
	switch {
	case err != nil && req.Archive != nil && req.SnapshotID != "" && m != nil && errdefs.CodeOf(err) == hostagent.CodeHostLost:
		n, perr := f.placeSharing(ctx, m, req.ID, req.Runtime, err)
		if perr != nil {
			return hostagent.Sandbox{}, perr
		}
		f.letGo(ctx, m, req.SnapshotID)
		if err := f.placeOn(ctx, n, req.SnapshotID, store.PlacedSnapshot); err != nil {
			f.unplace(ctx, req.ID)
			return hostagent.Sandbox{}, err
		}
		f.log.Info("forking a snapshot from its archive on another host", "snapshot", req.SnapshotID, "sandbox", req.ID, "host", n.ID)
		m = n
	case err != nil:
		return hostagent.Sandbox{}, err
	default:
		if err := f.placeOn(ctx, m, req.ID, store.PlacedSandbox); err != nil {
			return hostagent.Sandbox{}, err
		}
	}
	sb, err := m.Host.Fork(ctx, req)
	if err = f.check(m, err); err != nil {
		f.unplace(ctx, req.ID)
		return sb, err
	}
	for _, c := range req.Commands {
		f.noteCommand(c.ID, req.ID)
	}
	return sb, nil
}

func (f *Fleet) Usage(ctx context.Context, id string) (store.Usage, error) {
	return routed(ctx, f, id, func(h hostagent.Host) (store.Usage, error) { return h.Usage(ctx, id) })
}

func (f *Fleet) SetExpiry(ctx context.Context, id string, at time.Time) error {
	return routed0(ctx, f, id, func(h hostagent.Host) error { return h.SetExpiry(ctx, id, at) })
}

func (f *Fleet) SetGrant(ctx context.Context, id string, grant *egress.Grant) error {
	return routed0(ctx, f, id, func(h hostagent.Host) error { return h.SetGrant(ctx, id, grant) })
}

// Commands go to the host of their sandbox.

func (f *Fleet) Exec(ctx context.Context, req hostagent.ExecRequest) error {
	m, err := f.hostOf(ctx, req.SandboxID)
	if err != nil {
		return err
	}
	f.noteCommand(req.CommandID, req.SandboxID)
	return f.check(m, m.Host.Exec(ctx, req))
}

func (f *Fleet) Wait(ctx context.Context, commandID string) (hostagent.CommandEnd, error) {
	return commandRouted(ctx, f, commandID, func(h hostagent.Host) (hostagent.CommandEnd, error) { return h.Wait(ctx, commandID) })
}

func (f *Fleet) Signal(ctx context.Context, commandID, signal string) error {
	_, err := commandRouted(ctx, f, commandID, func(h hostagent.Host) (struct{}, error) { return struct{}{}, h.Signal(ctx, commandID, signal) })
	return err
}

func (f *Fleet) Resize(ctx context.Context, commandID string, size hostagent.PtySize) error {
	_, err := commandRouted(ctx, f, commandID, func(h hostagent.Host) (struct{}, error) { return struct{}{}, h.Resize(ctx, commandID, size) })
	return err
}

func (f *Fleet) WriteStdin(ctx context.Context, commandID string, r io.Reader, close bool) (hostagent.StdinResult, error) {
	return commandRouted(ctx, f, commandID, func(h hostagent.Host) (hostagent.StdinResult, error) { return h.WriteStdin(ctx, commandID, r, close) })
}

func (f *Fleet) ReadOutput(ctx context.Context, commandID, stream string, off int64, max int) (int64, []byte, error) {
	type read struct {
		start int64
		data  []byte
	}
	var eof bool
	r, err := commandRouted(ctx, f, commandID, func(h hostagent.Host) (read, error) {
		start, data, err := h.ReadOutput(ctx, commandID, stream, off, max)
		if errors.Is(err, io.EOF) {
			eof, err = true, nil
		}
		return read{start, data}, err
	})
	if eof {
		err = io.EOF
	}
	return r.start, r.data, err
}

func (f *Fleet) ReadHeld(ctx context.Context, req hostagent.HeldRead) (hostagent.HeldOutput, error) {
	return commandRouted(ctx, f, req.CommandID, func(h hostagent.Host) (hostagent.HeldOutput, error) { return h.ReadHeld(ctx, req) })
}

// Files, ports.

func (f *Fleet) WriteFile(ctx context.Context, sandboxID, path string, r io.Reader) (hostagent.FileEntry, error) {
	return routed(ctx, f, sandboxID, func(h hostagent.Host) (hostagent.FileEntry, error) { return h.WriteFile(ctx, sandboxID, path, r) })
}

func (f *Fleet) OpenFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, io.ReadCloser, error) {
	m, err := f.hostOf(ctx, sandboxID)
	if err != nil {
		return hostagent.FileEntry{}, nil, err
	}
	e, rc, err := m.Host.OpenFile(ctx, sandboxID, path)
	return e, rc, f.check(m, err)
}

func (f *Fleet) StatFile(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return routed(ctx, f, sandboxID, func(h hostagent.Host) (hostagent.FileEntry, error) { return h.StatFile(ctx, sandboxID, path) })
}

func (f *Fleet) ListFiles(ctx context.Context, sandboxID, path string, recursive bool) ([]hostagent.FileEntry, error) {
	return routed(ctx, f, sandboxID, func(h hostagent.Host) ([]hostagent.FileEntry, error) {
		return h.ListFiles(ctx, sandboxID, path, recursive)
	})
}

func (f *Fleet) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	return routed0(ctx, f, sandboxID, func(h hostagent.Host) error { return h.RemoveFile(ctx, sandboxID, path, recursive) })
}

func (f *Fleet) MakeDir(ctx context.Context, sandboxID, path string) (hostagent.FileEntry, error) {
	return routed(ctx, f, sandboxID, func(h hostagent.Host) (hostagent.FileEntry, error) { return h.MakeDir(ctx, sandboxID, path) })
}

func (f *Fleet) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	return routed(ctx, f, sandboxID, func(h hostagent.Host) (net.Conn, error) { return h.DialPort(ctx, sandboxID, port) })
}

// The machines.

// Sandboxes lists what every host that answers holds.
func (f *Fleet) Sandboxes(ctx context.Context) ([]string, error) {
	var all []string
	var errs []error
	for _, m := range f.all() {
		ids, err := m.Host.Sandboxes(ctx)
		if err != nil {
			errs = append(errs, f.check(m, err))
			continue
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	return slices.Compact(all), errors.Join(errs...)
}

// Reap reaps every host that answers of what keep does not name, and forgets the placements
// keep does not name: a control plane's Recover, after which the records are the truth. A
// host that does not answer now is reaped when it does.
func (f *Fleet) Reap(ctx context.Context, keep []string) ([]string, error) {
	kept := map[string]bool{}
	for _, id := range keep {
		kept[id] = true
	}
	f.mu.Lock()
	var forget []string
	for id := range f.where {
		if !kept[id] {
			forget = append(forget, id)
		}
	}
	f.reaped, f.kept = true, slices.Clone(keep)
	f.mu.Unlock()
	for _, id := range forget {
		f.unplace(ctx, id)
	}
	var reaped []string
	for _, m := range f.all() {
		f.mu.Lock()
		up := m.state == store.HostUp
		f.mu.Unlock()
		if !up {
			continue
		}
		ids, err := m.Host.Reap(ctx, keep)
		if err != nil {
			f.log.Warn("reaping a host; tried again at its next heartbeat", "host", m.ID, "err", err)
			continue
		}
		f.mu.Lock()
		m.reconciled = true
		f.mu.Unlock()
		reaped = append(reaped, ids...)
	}
	return reaped, nil
}

// routed calls the host holding sandbox id.
func routed[T any](ctx context.Context, f *Fleet, id string, call func(h hostagent.Host) (T, error)) (T, error) {
	m, err := f.hostOf(ctx, id)
	if err != nil {
		var zero T
		return zero, err
	}
	return whileUp(f, m, func() (T, error) { return call(m.Host) })
}

// whileUp makes call to m and answers what it answers, or host_lost as soon as m is lost,
// whichever comes first: a host cut off by the network answers nothing until the connection
// gives up (its pings), and what was under way there is lost all the same.
func whileUp[T any](f *Fleet, m *member, call func() (T, error)) (T, error) {
	f.mu.Lock()
	lost := m.lost
	f.mu.Unlock()
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := call()
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, f.check(m, a.err)
	case <-lost:
		var zero T
		return zero, errdefs.New(errdefs.ClassUnavailable, hostagent.CodeHostLost, "host %s was lost while the call was under way", m.ID)
	}
}

func routed0(ctx context.Context, f *Fleet, id string, call func(h hostagent.Host) error) error {
	_, err := routed(ctx, f, id, func(h hostagent.Host) (struct{}, error) { return struct{}{}, call(h) })
	return err
}

// commandRouted calls the host running command id (the host of its sandbox).
func commandRouted[T any](ctx context.Context, f *Fleet, id string, call func(h hostagent.Host) (T, error)) (T, error) {
	f.mu.Lock()
	sb, ok := f.cmds[id]
	f.mu.Unlock()
	if !ok {
		var zero T
		return zero, errdefs.NotFound("command %s is not running on any host", id)
	}
	return routed(ctx, f, sb, call)
}
