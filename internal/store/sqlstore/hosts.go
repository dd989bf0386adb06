package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Hosts and placements of a fleet.

const hostCols = `id, url, state, capacity, last_heartbeat, registered_at, token_hash`

func scanHost(sc row) (store.Host, error) {
	var h store.Host
	var capacity, token sql.NullString
	var beat, reg int64
	if err := sc.Scan(&h.ID, &h.URL, &h.State, &capacity, &beat, &reg, &token); err != nil {
		return h, err
	}
	h.TokenHash = token.String
	h.LastHeartbeat, h.RegisteredAt = fromMs(beat), fromMs(reg)
	if capacity.String != "" {
		h.Capacity = json.RawMessage(capacity.String)
	}
	return h, nil
}

func (q queries) PutHost(ctx context.Context, h store.Host) error {
	_, err := q.exec(ctx, `INSERT INTO hosts (`+hostCols+`) VALUES (`+inList(7)+`)
		ON CONFLICT (id) DO UPDATE SET url = COALESCE(NULLIF(excluded.url, ''), hosts.url), state = excluded.state,
		capacity = excluded.capacity, last_heartbeat = excluded.last_heartbeat,
		token_hash = COALESCE(excluded.token_hash, hosts.token_hash)`,
		h.ID, h.URL, h.State, nullJSON(h.Capacity), ms(h.LastHeartbeat), ms(h.RegisteredAt),
		sql.NullString{String: h.TokenHash, Valid: h.TokenHash != ""})
	return err
}

func (q queries) DeleteHost(ctx context.Context, id string) error {
	_, err := q.exec(ctx, `DELETE FROM hosts WHERE id = ?`, id)
	return err
}

func (q queries) ListHosts(ctx context.Context) ([]store.Host, error) {
	return collect(ctx, q, scanHost, `SELECT `+hostCols+` FROM hosts ORDER BY id`)
}

const placementCols = `id, host_id, kind, placed_at`

func scanPlacement(sc row) (store.Placement, error) {
	var p store.Placement
	var at int64
	if err := sc.Scan(&p.ID, &p.Host, &p.Kind, &at); err != nil {
		return p, err
	}
	p.PlacedAt = fromMs(at)
	return p, nil
}

func (q queries) PutPlacement(ctx context.Context, p store.Placement) error {
	_, err := q.exec(ctx, `INSERT INTO placements (`+placementCols+`) VALUES (`+inList(4)+`)
		ON CONFLICT (id) DO UPDATE SET host_id = excluded.host_id, kind = excluded.kind, placed_at = excluded.placed_at`,
		p.ID, p.Host, p.Kind, ms(p.PlacedAt))
	return err
}

func (q queries) GetPlacement(ctx context.Context, id string) (store.Placement, error) {
	p, err := scanPlacement(q.queryRow(ctx, `SELECT `+placementCols+` FROM placements WHERE id = ?`, id))
	return p, notFound(err, "placement of %s not found", id)
}

func (q queries) DeletePlacement(ctx context.Context, id string) error {
	_, err := q.exec(ctx, `DELETE FROM placements WHERE id = ?`, id)
	return err
}

func (q queries) ListPlacements(ctx context.Context, host string) ([]store.Placement, error) {
	return collect(ctx, q, scanPlacement, `SELECT `+placementCols+` FROM placements
		WHERE ? = '' OR host_id = ? ORDER BY id`, host, host)
}

func nullJSON(b json.RawMessage) sql.NullString {
	return sql.NullString{String: string(b), Valid: len(b) > 0}
}
