package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Holders: the control planes sharing the store, and the records each holds.

func (q queries) ListSandboxesHeld(ctx context.Context, holder string, statuses ...string) ([]store.Sandbox, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	return q.listSandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE holder = ? AND status IN (`+inList(len(statuses))+`) ORDER BY id`,
		append([]any{holder}, anys(statuses)...)...)
}

func (q queries) ListCommandsHeld(ctx context.Context, holder string, statuses ...string) ([]store.Command, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	return q.listCommands(ctx, `SELECT `+commandCols+` FROM commands WHERE holder = ? AND status IN (`+inList(len(statuses))+`) ORDER BY id`,
		append([]any{holder}, anys(statuses)...)...)
}

func (q queries) ListIdempotencyHeld(ctx context.Context, holder, state string) ([]store.Idempotency, error) {
	return collect(ctx, q, scanIdem, `SELECT `+idemCols+` FROM idempotency WHERE holder = ? AND state = ? ORDER BY created_at`, holder, state)
}

const controlPlaneCols = `id, started_at, heartbeat_at, adopted_by, adopted_at, recovered_at`

func scanControlPlane(sc row) (store.ControlPlane, error) {
	var p store.ControlPlane
	var started, beat int64
	var adopted, recovered sql.NullInt64
	if err := sc.Scan(&p.ID, &started, &beat, &p.AdoptedBy, &adopted, &recovered); err != nil {
		return p, err
	}
	p.StartedAt, p.HeartbeatAt = fromMs(started), fromMs(beat)
	p.AdoptedAt, p.RecoveredAt = fromNullMs(adopted), fromNullMs(recovered)
	return p, nil
}

func (q queries) RegisterControlPlane(ctx context.Context, id string, at time.Time) error {
	_, err := q.exec(ctx, `INSERT INTO control_planes (id, started_at, heartbeat_at, adopted_by) VALUES (?, ?, ?, '')
		ON CONFLICT (id) DO UPDATE SET started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
		adopted_by = '', adopted_at = NULL, recovered_at = NULL`, id, ms(at), ms(at))
	return err
}

func (q queries) Heartbeat(ctx context.Context, id string, at time.Time) (bool, error) {
	// Adopted by itself: its start is recovering its previous life.
	res, err := q.exec(ctx, `UPDATE control_planes SET heartbeat_at = ? WHERE id = ? AND adopted_by IN ('', id)`, ms(at), id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (q queries) GetControlPlane(ctx context.Context, id string) (store.ControlPlane, error) {
	p, err := scanControlPlane(q.queryRow(ctx, `SELECT `+controlPlaneCols+` FROM control_planes WHERE id = ?`, id))
	return p, notFound(err, "control plane %q not found", id)
}

func (q queries) ListControlPlanes(ctx context.Context) ([]store.ControlPlane, error) {
	return collect(ctx, q, scanControlPlane, `SELECT `+controlPlaneCols+` FROM control_planes ORDER BY id`)
}

// AdoptControlPlane runs in a transaction (DB's runs it in one of its own).
func (q queries) AdoptControlPlane(ctx context.Context, id, by string, deadBefore, at time.Time) (bool, error) {
	// A control plane that died while its start recovered its previous life (adopted by
	// itself, not finished) is adoptable too. One that adopts itself beats from now on.
	beat := `heartbeat_at`
	if id == by {
		beat = strconv.FormatInt(ms(at), 10)
	}
	res, err := q.exec(ctx, `UPDATE control_planes SET adopted_by = ?, adopted_at = ?, heartbeat_at = `+beat+`
		WHERE id = ? AND heartbeat_at < ? AND (adopted_by = '' OR (adopted_by = id AND recovered_at IS NULL))`,
		by, ms(at), id, ms(deadBefore))
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	// What the dead one was adopting itself, and had not finished, is the adopter's now.
	_, err = q.exec(ctx, `UPDATE control_planes SET adopted_by = ? WHERE adopted_by = ? AND recovered_at IS NULL AND id <> ?`, by, id, id)
	return err == nil, err
}

// FinishAdoption runs in a transaction (DB's runs it in one of its own).
func (q queries) FinishAdoption(ctx context.Context, id string, at time.Time) error {
	p, err := q.GetControlPlane(ctx, id)
	if err != nil {
		return err
	}
	if p.AdoptedBy == "" {
		return nil
	}
	for _, table := range []string{"sandboxes", "commands", "idempotency"} {
		if _, err := q.exec(ctx, `UPDATE `+table+` SET holder = ? WHERE holder = ?`, p.AdoptedBy, id); err != nil {
			return err
		}
	}
	_, err = q.exec(ctx, `UPDATE control_planes SET recovered_at = ? WHERE id = ?`, ms(at), id)
	return err
}
