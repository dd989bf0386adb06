package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Previews.

const previewCols = `id, graph, sandbox_id, port, expires_at, created_at, origin_key`

func scanPreview(sc row) (store.Preview, error) {
	var p store.Preview
	var exp, created int64
	var key sql.NullString
	if err := sc.Scan(&p.ID, &p.Graph, &p.SandboxID, &p.Port, &exp, &created, &key); err != nil {
		return p, err
	}
	p.ExpiresAt, p.CreatedAt, p.Origin.Key = fromMs(exp), fromMs(created), key.String
	return p, nil
}

func (q queries) CreatePreview(ctx context.Context, p store.Preview) error {
	_, err := q.exec(ctx, `INSERT INTO previews (`+previewCols+`) VALUES (`+inList(7)+`)`,
		p.ID, p.Graph, p.SandboxID, p.Port, ms(p.ExpiresAt), ms(p.CreatedAt), p.Origin.Key)
	return err
}

func (q queries) GetPreview(ctx context.Context, id string) (store.Preview, error) {
	p, err := scanPreview(q.queryRow(ctx, `SELECT `+previewCols+` FROM previews WHERE id = ?`, id))
	return p, notFound(err, "preview %s not found", id)
}

func (q queries) ListPreviews(ctx context.Context, graph, sandboxID string, p store.Page) ([]store.Preview, string, error) {
	limit := pageLimit(p)
	out, err := collect(ctx, q, scanPreview, `SELECT `+previewCols+` FROM previews WHERE graph = ? AND sandbox_id = ?
		AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, graph, sandboxID, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Preview) string { return x.ID })
	return out, next, nil
}

func (q queries) DeleteExpiredPreviews(ctx context.Context, before time.Time) (int, error) {
	res, err := q.exec(ctx, `DELETE FROM previews WHERE expires_at < ?`, ms(before))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (q queries) DeletePreview(ctx context.Context, graph, id string) error {
	res, err := q.exec(ctx, `DELETE FROM previews WHERE graph = ? AND id = ?`, graph, id)
	return mustAffect(res, err, "preview "+id)
}
