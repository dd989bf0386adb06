package sqlstore

import (
	"context"
	"database/sql"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Snapshots.

const snapshotCols = `id, graph, sandbox_id, isolation, memory, size_bytes, metadata, created_at, duration_ms, archive, archive_sha256`

func scanSnapshot(sc row) (store.Snapshot, error) {
	var s store.Snapshot
	var memory int
	var meta, archive, archiveSHA sql.NullString
	var created int64
	if err := sc.Scan(&s.ID, &s.Graph, &s.SandboxID, &s.Isolation, &memory, &s.SizeBytes, &meta, &created, &s.DurationMs,
		&archive, &archiveSHA); err != nil {
		return s, err
	}
	s.Memory, s.CreatedAt = memory != 0, fromMs(created)
	if err := optFrom(archive, &s.Archive); err != nil {
		return s, err
	}
	return s, fromJSON(meta, &s.Metadata)
}

func (q queries) CreateSnapshot(ctx context.Context, s store.Snapshot) error {
	_, err := q.exec(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (`+inList(11)+`)`,
		s.ID, s.Graph, s.SandboxID, s.Isolation, b2i(s.Memory), s.SizeBytes, jsonText(s.Metadata), ms(s.CreatedAt), s.DurationMs,
		jsonOpt(s.Archive), workspaceDigest(s.Archive))
	return err
}

func (q queries) GetSnapshot(ctx context.Context, graph, id string) (store.Snapshot, error) {
	s, err := scanSnapshot(q.queryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE graph = ? AND id = ?`, graph, id))
	return s, notFound(err, "snapshot %s not found", id)
}

func (q queries) listSnapshots(ctx context.Context, query string, args ...any) ([]store.Snapshot, error) {
	return collect(ctx, q, scanSnapshot, query, args...)
}

func (q queries) ListSnapshots(ctx context.Context, graph, sandboxID string, p store.Page) ([]store.Snapshot, string, error) {
	limit := pageLimit(p)
	out, err := q.listSnapshots(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE graph = ? AND sandbox_id = ?
		AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, graph, sandboxID, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Snapshot) string { return x.ID })
	return out, next, nil
}

func (q queries) DeleteSnapshot(ctx context.Context, graph, id string) error {
	res, err := q.exec(ctx, `DELETE FROM snapshots WHERE graph = ? AND id = ?`, graph, id)
	return mustAffect(res, err, "snapshot "+id)
}

func (q queries) ListEndedSnapshots(ctx context.Context, limit int) ([]store.Snapshot, error) {
	return q.listSnapshots(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes WHERE sandboxes.id = snapshots.sandbox_id AND sandboxes.status NOT IN (?, ?))
		ORDER BY id LIMIT ?`, store.SandboxDestroyed, store.SandboxFailed, limit)
}
