package lbb

import (
	"context"
	"net/http"
	"net/url"
)

// Pause, snapshots and forks of long-lived sandboxes.

// SnapshotRequest is what Snapshot takes.
type SnapshotRequest struct {
	Metadata map[string]string `json:"metadata,omitempty"`
	// IdempotencyKey makes a retried snapshot take one snapshot; a fresh one is made when
	// empty.
	IdempotencyKey string `json:"-"`
}

// ForkRequest is what Fork takes.
type ForkRequest struct {
	// Snapshot (of this sandbox) to start from; empty takes a fresh one of the running
	// sandbox first, and keeps it.
	Snapshot string `json:"snapshot,omitempty"`
	// Metadata labels the fork; nil keeps the source's.
	Metadata         map[string]string `json:"metadata,omitempty"`
	ExpiresInSeconds int64             `json:"expires_in_seconds,omitempty"`
	// Env is given to the fork's commands, over the source's; its values are masked.
	Env map[string]string `json:"env,omitempty"`
	// IdempotencyKey makes a retried fork make one sandbox; a fresh one is made when empty.
	IdempotencyKey string `json:"-"`
}

// Pause parks a running sandbox: on gvisor its memory and processes are saved to disk and
// its RAM freed (it stays paused across a server restart); on ns the freezer holds them in
// RAM. Resume wakes it where it was. A sandbox with commands running is frozen on every
// isolation: its commands, their output streams and stdin go on at resume, and the paused
// time does not count toward their timeouts. Terminals and code contexts are kept too: a
// terminal's socket goes on (or re-attaches) after resume, a context keeps its variables.
func (s *SandboxesService) Pause(ctx context.Context, id string) (*Sandbox, error) {
	return s.lifecycle(ctx, http.MethodPost, s.path(id, "/pause"))
}

// Snapshot saves a running sandbox with its memory (gvisor only: elsewhere 409
// not_supported); the sandbox runs on, its running commands too.
func (s *SandboxesService) Snapshot(ctx context.Context, id string, p SnapshotRequest) (*Snapshot, error) {
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	// Retried under its key: a retry answers the snapshot the first attempt took.
	return call[Snapshot](ctx, s.c, request{method: http.MethodPost, path: s.path(id, "/snapshot"),
		body: p, idemKey: p.IdempotencyKey, retry: true})
}

// Fork starts a new sandbox from a snapshot of sandbox id and returns its record (status
// running, ForkedFrom set). Without p.Snapshot, the source's running commands carry on in the
// fork as commands of its own (Sandboxes.Commands of the fork; Command.ForkedFrom names each
// one's source), and its code contexts as contexts of the fork's own with the same variables
// (CodeContext.ForkedFrom); its terminals are not carried. A fork of a named snapshot carries
// neither.
func (s *SandboxesService) Fork(ctx context.Context, id string, p ForkRequest) (*Sandbox, error) {
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = NewIdempotencyKey()
	}
	return call[Sandbox](ctx, s.c, request{method: http.MethodPost, path: s.path(id, "/fork"), body: p,
		idemKey: p.IdempotencyKey, retry: true})
}

// Snapshots lists a sandbox's snapshots, newest first.
func (s *SandboxesService) Snapshots(ctx context.Context, id string, p ListParams) (*SnapshotList, error) {
	return get[SnapshotList](ctx, s.c, s.path(id, "/snapshots"), p.query())
}

// GetSnapshot returns a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return get[Snapshot](ctx, c, "/v1/snapshots/"+url.PathEscape(id), nil)
}

// DeleteSnapshot removes a snapshot and its bytes; forks made from it run on.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, request{method: http.MethodDelete,
		path: "/v1/snapshots/" + url.PathEscape(id), retry: true})
}
