package control

import (
	"context"
	"regexp"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Sessions, sizes and workspace archives (seed 004).
//
// A session is a caller's name for a long-lived sandbox, unique in its graph among the
// sandboxes that have not ended: POST /v1/sandboxes with a session creates the sandbox the
// first time (201), and afterwards answers it running, or resumes it when it is stopped or
// paused (200). A deleted (or failed) sandbox frees its name: the next call starts a fresh one.
//
// Stopping a sandbox archives its disk to the blob store (hostagent.ArchiveWorkspace) and its
// record says where (Workspace); resuming hands the archive to the host agent, which restores
// it when its own copy of the disk is gone or is not the archive's. The archive is stale as
// soon as the sandbox starts again, and is removed then (and when the sandbox is destroyed).

// Size is a named preset of limits.
type Size struct {
	Name      string
	CPUs      float64
	MemoryMiB int64
	DiskMiB   int64
}

// Sizes are the named sizes, smallest first; SizeAliases maps seed 004's older names onto them.
var Sizes = []Size{
	{"standard-1", 1, 1024, 2048},
	{"standard-2", 1, 2048, 4096},
	{"standard-3", 2, 4096, 6144},
	{"standard-4", 2, 6144, 8192},
	{"standard-5", 4, 8192, 10240},
}

var SizeAliases = map[string]string{"small": "standard-2", "standard": "standard-3", "large": "standard-4"}

// LookupSize answers the size name (or alias) names.
func LookupSize(name string) (Size, bool) {
	if a, ok := SizeAliases[name]; ok {
		name = a
	}
	for _, sz := range Sizes {
		if sz.Name == name {
			return sz, true
		}
	}
	return Size{}, false
}

// sizeLimits answers the limits of a named size ("" none), with the canonical name.
func sizeLimits(name string) (*store.Limits, string, error) {
	if name == "" {
		return nil, "", nil
	}
	sz, ok := LookupSize(name)
	if !ok {
		return nil, "", errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeUnknownSize,
			"unknown size %q: want standard-1 … standard-5 (or small, standard, large)", name)
	}
	return &store.Limits{CPUs: sz.CPUs, MemoryMiB: sz.MemoryMiB, DiskMiB: sz.DiskMiB}, sz.Name, nil
}

var validSession = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

func checkSession(name string) error {
	if name != "" && !validSession.MatchString(name) {
		return errdefs.InvalidArgument("session %q: 1 to 128 letters, digits and . _ : @ -, starting with a letter or digit", name)
	}
	return nil
}

// openSession answers the graph's sandbox of session when there is one that has not ended:
// running (as it is), or resumed when it was stopped or paused. ok is false when the session
// has no such sandbox (the caller creates it).
//
// What the call asks for explicitly — size, isolation, base — must be what the sandbox has:
// 409 session_mismatch otherwise (a session is one workspace; a different one is a new name).
func (s *Service) openSession(ctx context.Context, req CreateRequest, want store.Sandbox) (resp idempotency.Response, ok bool, err error) {
	graph, session := want.Graph, want.Session
	sb, err := s.st.GetSandboxBySession(ctx, graph, session)
	if errdefs.IsNotFound(err) {
		return resp, false, nil
	}
	if err != nil {
		return resp, false, err
	}
	for _, f := range []struct {
		name, asked, want, has string
	}{
		{"size", req.Size, want.Size, sb.Size},
		{"isolation", req.Isolation, want.Isolation, sb.Isolation},
		{"base", req.Base + req.Template, want.Base, sb.Base},
	} {
		if f.asked != "" && f.want != f.has {
			return resp, true, errdefs.New(errdefs.ClassConflict, errdefs.CodeSessionMismatch,
				"session %s: its sandbox %s has %s %q, not %q; use another session for another sandbox", session, sb.ID, f.name, f.has, f.want)
		}
	}
	busy := func() error {
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeSessionBusy,
			"session %s: its sandbox %s is being changed by another call (%s); try again", session, sb.ID, sb.Status)
	}
	hs := s.lookupHeld(sb.ID)
	if hs == nil {
		return resp, true, errdefs.Conflict("session %s: its sandbox %s is %s and not held by this server", session, sb.ID, sb.Status)
	}
	// A stop, pause or snapshot under way holds the sandbox's lock: the session is busy,
	// rather than this call waiting for it behind a caller it does not know.
	if !hs.ops.TryLock() {
		return resp, true, busy()
	}
	hs.ops.Unlock()
	switch sb.Status {
	case store.SandboxRunning:
		resp, err = idempotency.JSON(idempotency.Done, sb)
		return resp, true, err
	case store.SandboxStopped, store.SandboxPaused:
		sb, err = s.ResumeSandbox(ctx, graph, sb.ID)
		if err != nil {
			return resp, true, err
		}
		resp, err = idempotency.JSON(idempotency.Done, sb)
		return resp, true, err
	default:
		return resp, true, busy()
	}
}

// sessionTaken turns the failure to record a new sandbox of session into session_busy when
// another call created the session's sandbox meanwhile.
func (s *Service) sessionTaken(ctx context.Context, graph, session string, err error) error {
	if session == "" || err == nil {
		return err
	}
	if _, gerr := s.st.GetSandboxBySession(context.WithoutCancel(ctx), graph, session); gerr == nil {
		return errdefs.New(errdefs.ClassConflict, errdefs.CodeSessionBusy,
			"session %s was created by another call at the same time; try again", session)
	}
	return err
}

// archiveWorkspace archives a stopped sandbox's disk and sets sb.Workspace (nil when it could
// not be archived: its disk stays on its host alone, and failed says why for the record's
// error). It answers the digest of the archive it replaces, for dropArchive once the record
// is updated.
func (s *Service) archiveWorkspace(ctx context.Context, sb *store.Sandbox) (replaced, failed string) {
	prev := sb.Workspace
	sb.Workspace = nil
	t0 := time.Now()
	ws, err := s.host.ArchiveWorkspace(ctx, sb.ID)
	switch {
	case err == nil:
		sb.Workspace = &ws
		s.log.Info("workspace archived", "graph", sb.Graph, "sandbox", sb.ID, "bytes", ws.Bytes, "disk_bytes", ws.DiskBytes, "ms", msSince(t0))
	case hostagent.IsNotSupported(err):
	default:
		s.log.Error("archiving a stopped sandbox's workspace (it stays on its host alone)", "sandbox", sb.ID, "err", err)
		failed = "the workspace was not archived: " + err.Error()
	}
	if prev != nil && (sb.Workspace == nil || prev.SHA256 != sb.Workspace.SHA256) {
		return prev.SHA256, failed
	}
	return "", failed
}

// clearPause forgets how sb was paused, and answers the digest of its checkpoint's archive
// (stale now) for dropArchive once the record is updated.
func clearPause(sb *store.Sandbox) (archive string) {
	if sb.Checkpoint != nil {
		archive = sb.Checkpoint.SHA256
	}
	sb.PausedAt, sb.PauseMode, sb.CheckpointBytes, sb.Checkpoint = nil, "", 0, nil
	return archive
}

// withError appends what failed to a record's error.
func withError(prev, failed string) string {
	if prev == "" || failed == "" {
		return prev + failed
	}
	return prev + "; " + failed
}

// dropArchive removes a workspace, checkpoint or snapshot archive no record names any more.
func (s *Service) dropArchive(ctx context.Context, sha string) {
	if sha == "" || s.blobs == nil {
		return
	}
	named, err := s.st.BlobNamed(ctx, sha)
	if err == nil && !named {
		err = s.blobs.Delete(ctx, sha)
	}
	if err != nil {
		s.log.Warn("removing a workspace archive", "sha256", sha, "err", err)
	}
}
