package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Graphs.

func (q queries) CreateGraph(ctx context.Context, g store.Graph) error {
	_, err := q.exec(ctx, `INSERT INTO graphs (name, created_at) VALUES (?, ?)`, g.Name, ms(g.CreatedAt))
	return err
}

func (q queries) GetGraph(ctx context.Context, name string) (store.Graph, error) {
	var g store.Graph
	var at int64
	err := q.queryRow(ctx, `SELECT name, created_at FROM graphs WHERE name = ?`, name).Scan(&g.Name, &at)
	g.CreatedAt = fromMs(at)
	return g, notFound(err, "graph %q not found", name)
}

func (q queries) ListGraphs(ctx context.Context) ([]store.Graph, error) {
	rows, err := q.query(ctx, `SELECT name, created_at FROM graphs ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Graph
	for rows.Next() {
		var g store.Graph
		var at int64
		if err := rows.Scan(&g.Name, &at); err != nil {
			return nil, err
		}
		g.CreatedAt = fromMs(at)
		out = append(out, g)
	}
	return out, rows.Err()
}

// Keys.

const keyCols = `id, name, hash, prefix, graphs, scopes, created_at, created_by, revoked_at, parent, sandbox_id, expires_at,
	max_runs, runs, kind, origin, budget_vcpu_ms, budget_gib_ms, used_vcpu_ms, used_gib_ms, spend_cap`

func scanKey(sc row) (store.Key, error) {
	var k store.Key
	var graphs, scopes sql.NullString
	var created int64
	var revoked, expires sql.NullInt64
	var createdBy, parent, sandbox, kind, origin, spendCap sql.NullString
	if err := sc.Scan(&k.ID, &k.Name, &k.Hash, &k.Prefix, &graphs, &scopes, &created, &createdBy, &revoked,
		&parent, &sandbox, &expires, &k.MaxRuns, &k.Runs, &kind, &origin, &k.BudgetVCPUMs, &k.BudgetGiBMs,
		&k.UsedVCPUMs, &k.UsedGiBMs, &spendCap); err != nil {
		return k, err
	}
	if err := optFrom(spendCap, &k.SpendCap); err != nil {
		return k, err
	}
	k.Kind = kind.String
	if err := optFrom(origin, &k.Origin); err != nil {
		return k, err
	}
	k.CreatedAt, k.RevokedAt, k.CreatedBy = fromMs(created), fromNullMs(revoked), createdBy.String
	k.Parent, k.Sandbox, k.ExpiresAt = parent.String, sandbox.String, fromNullMs(expires)
	if err := fromJSON(graphs, &k.Graphs); err != nil {
		return k, err
	}
	return k, fromJSON(scopes, &k.Scopes)
}

func (q queries) CreateKey(ctx context.Context, k store.Key) error {
	_, err := q.exec(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES (`+inList(21)+`)`,
		k.ID, k.Name, k.Hash, k.Prefix, jsonText(k.Graphs), jsonText(k.Scopes), ms(k.CreatedAt), nullStr(k.CreatedBy), msPtr(k.RevokedAt),
		nullStr(k.Parent), nullStr(k.Sandbox), msPtr(k.ExpiresAt), k.MaxRuns, k.Runs, nullStr(k.Kind), jsonOpt(k.Origin),
		k.BudgetVCPUMs, k.BudgetGiBMs, k.UsedVCPUMs, k.UsedGiBMs, jsonOpt(k.SpendCap))
	return err
}

func (q queries) CountKeyRun(ctx context.Context, id string) (bool, error) {
	res, err := q.exec(ctx, `UPDATE api_keys SET runs = runs + 1 WHERE id = ? AND (max_runs = 0 OR runs < max_runs)`, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (q queries) GetKey(ctx context.Context, id string) (store.Key, error) {
	k, err := scanKey(q.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE id = ?`, id))
	return k, notFound(err, "key %s not found", id)
}

func (q queries) GetKeyByHash(ctx context.Context, hash string) (store.Key, error) {
	k, err := scanKey(q.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = ?`, hash))
	return k, notFound(err, "key not found")
}

func (q queries) ListKeys(ctx context.Context, p store.Page) ([]store.Key, string, error) {
	limit := pageLimit(p)
	out, err := collect(ctx, q, scanKey, `SELECT `+keyCols+` FROM api_keys WHERE (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`,
		p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Key) string { return x.ID })
	return out, next, nil
}

func (q queries) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := q.exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(at), id)
	if err := mustAffect(res, err, "key "+id); err != nil {
		if _, gerr := q.GetKey(ctx, id); gerr == nil {
			return nil // already revoked
		}
		return err
	}
	return nil
}

// Sandboxes.

const sandboxCols = `id, graph, status, one_call, base, image, template_id, template_name, template_version,
	limits, env_names, metadata, origin, created_at, started_at, ended_at, expires_at, end_reason, error, vcpu_ms, gib_ms,
	paused_at, pause_mode, forked_from, isolation, checkpoint_bytes, egress, egress_usage, api_grant, git, layer,
	session, size, workspace, workspace_sha256, host, checkpoint, checkpoint_sha256`

func sandboxArgs(s store.Sandbox) []any {
	var tid, tname any
	var tver any
	if s.Template != nil {
		tid, tname, tver = s.Template.ID, s.Template.Name, s.Template.Version
	}
	return []any{s.ID, s.Graph, s.Status, b2i(s.OneCall), s.Base, s.Image, tid, tname, tver,
		jsonText(s.Limits), jsonText(s.EnvNames), jsonText(s.Metadata), jsonText(s.Origin), ms(s.CreatedAt),
		msPtr(s.StartedAt), msPtr(s.EndedAt), msPtr(s.ExpiresAt), nullStr(s.EndReason), nullStr(s.Error),
		s.Usage.VCPUMs, s.Usage.GiBMs,
		msPtr(s.PausedAt), nullStr(s.PauseMode), forkedFromText(s.ForkedFrom), s.Isolation, s.CheckpointBytes,
		jsonOpt(s.Egress), jsonOpt(s.Usage.Egress), jsonOpt(s.API), jsonOpt(s.Git), nullStr(s.Layer),
		nullStr(s.Session), nullStr(s.Size), jsonOpt(s.Workspace), workspaceDigest(s.Workspace), nullStr(s.Host),
		jsonOpt(s.Checkpoint), workspaceDigest(s.Checkpoint)}
}

// workspaceDigest is the digest of a workspace (or checkpoint) archive, NULL when there is none.
func workspaceDigest(w *store.WorkspaceArchive) any {
	if w == nil {
		return nil
	}
	return w.SHA256
}

// jsonOpt is the JSON of an optional field, NULL when it is absent.
func jsonOpt[T any](v *T) any {
	if v == nil {
		return nil
	}
	return jsonText(v)
}

// optFrom reads an optional JSON field.
func optFrom[T any](v sql.NullString, dst **T) error {
	if !v.Valid || v.String == "" || v.String == "null" {
		return nil
	}
	*dst = new(T)
	return json.Unmarshal([]byte(v.String), *dst)
}

func forkedFromText(f *store.ForkedFrom) any {
	if f == nil {
		return nil
	}
	return jsonText(f)
}

func scanSandbox(sc row) (store.Sandbox, error) {
	var s store.Sandbox
	var oneCall int
	var tid, tname, limits, env, meta, origin, endReason, errStr sql.NullString
	var tver, started, ended, expires sql.NullInt64
	var created int64
	var paused sql.NullInt64
	var pauseMode, forkedFrom, egress, egressUsage, apiGrant, git, layer, session, size, workspace, workspaceSHA, host, checkpoint, checkpointSHA sql.NullString
	err := sc.Scan(&s.ID, &s.Graph, &s.Status, &oneCall, &s.Base, &s.Image, &tid, &tname, &tver,
		&limits, &env, &meta, &origin, &created, &started, &ended, &expires, &endReason, &errStr,
		&s.Usage.VCPUMs, &s.Usage.GiBMs,
		&paused, &pauseMode, &forkedFrom, &s.Isolation, &s.CheckpointBytes, &egress, &egressUsage, &apiGrant, &git, &layer,
		&session, &size, &workspace, &workspaceSHA, &host, &checkpoint, &checkpointSHA)
	if err != nil {
		return s, err
	}
	s.Layer, s.Session, s.Size, s.Host = layer.String, session.String, size.String, host.String
	if err := errors.Join(optFrom(egress, &s.Egress), optFrom(egressUsage, &s.Usage.Egress), optFrom(apiGrant, &s.API),
		optFrom(git, &s.Git), optFrom(workspace, &s.Workspace), optFrom(checkpoint, &s.Checkpoint)); err != nil {
		return s, err
	}
	s.OneCall = oneCall != 0
	if tid.Valid {
		s.Template = &store.TemplateRef{ID: tid.String, Name: tname.String, Version: int(tver.Int64)}
	}
	s.CreatedAt, s.StartedAt, s.EndedAt, s.ExpiresAt = fromMs(created), fromNullMs(started), fromNullMs(ended), fromNullMs(expires)
	s.EndReason, s.Error = endReason.String, errStr.String
	s.PausedAt, s.PauseMode = fromNullMs(paused), pauseMode.String
	if forkedFrom.Valid {
		s.ForkedFrom = &store.ForkedFrom{}
		if err := fromJSON(forkedFrom, s.ForkedFrom); err != nil {
			return s, err
		}
	}
	for _, f := range []struct {
		v   sql.NullString
		dst any
	}{{limits, &s.Limits}, {env, &s.EnvNames}, {meta, &s.Metadata}, {origin, &s.Origin}} {
		if err := fromJSON(f.v, f.dst); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (q queries) CreateSandbox(ctx context.Context, s store.Sandbox) error {
	args := append(sandboxArgs(s), q.holder)
	_, err := q.exec(ctx, `INSERT INTO sandboxes (`+sandboxCols+`, holder) VALUES (`+inList(len(args))+`)`, args...)
	return err
}

func (q queries) GetSandbox(ctx context.Context, graph, id string) (store.Sandbox, error) {
	s, err := scanSandbox(q.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE graph = ? AND id = ?`, graph, id))
	return s, notFound(err, "sandbox %s not found", id)
}

func (q queries) GetSandboxBySession(ctx context.Context, graph, session string) (store.Sandbox, error) {
	s, err := scanSandbox(q.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE graph = ? AND session = ?
		AND status NOT IN ('destroyed', 'failed')`, graph, session))
	return s, notFound(err, "session %s not found", session)
}

func (q queries) UpdateSandbox(ctx context.Context, s store.Sandbox) error {
	args := sandboxArgs(s)
	res, err := q.exec(ctx, `UPDATE sandboxes SET status = ?, one_call = ?, base = ?, image = ?, template_id = ?,
		template_name = ?, template_version = ?, limits = ?, env_names = ?, metadata = ?, origin = ?, created_at = ?,
		started_at = ?, ended_at = ?, expires_at = ?, end_reason = ?, error = ?, vcpu_ms = ?, gib_ms = ?,
		paused_at = ?, pause_mode = ?, forked_from = ?, isolation = ?, checkpoint_bytes = ?, egress = ?, egress_usage = ?, api_grant = ?, git = ?, layer = ?,
		session = ?, size = ?, workspace = ?, workspace_sha256 = ?, host = ?, checkpoint = ?, checkpoint_sha256 = ?
		WHERE id = ? AND graph = ?`, append(args[2:], s.ID, s.Graph)...)
	return mustAffect(res, err, "sandbox "+s.ID)
}

func (q queries) listSandboxes(ctx context.Context, query string, args ...any) ([]store.Sandbox, error) {
	return collect(ctx, q, scanSandbox, query, args...)
}

func (q queries) ListSandboxes(ctx context.Context, graph string, f store.SandboxFilter, p store.Page) ([]store.Sandbox, string, error) {
	limit := pageLimit(p)
	if len(f.Labels) > 0 {
		return q.listSandboxesByLabel(ctx, graph, f, p.Cursor, limit)
	}
	out, err := q.listSandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE graph = ? AND (? = '' OR status = ?)
		AND (? = '' OR session = ?) AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, graph, f.Status, f.Status, f.Session, f.Session,
		p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Sandbox) string { return x.ID })
	return out, next, nil
}

// listSandboxesByLabel filters metadata in Go, a batch at a time: metadata is JSON text,
// and JSON queries differ between databases.
func (q queries) listSandboxesByLabel(ctx context.Context, graph string, f store.SandboxFilter, cursor string, limit int) ([]store.Sandbox, string, error) {
	const batch = 500
	var out []store.Sandbox
	for {
		got, err := q.listSandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE graph = ? AND (? = '' OR status = ?)
			AND (? = '' OR session = ?) AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, graph, f.Status, f.Status, f.Session, f.Session,
			cursor, cursor, batch)
		if err != nil {
			return nil, "", err
		}
		for _, s := range got {
			if !f.Matches(s) {
				continue
			}
			if len(out) == limit {
				return out, out[limit-1].ID, nil
			}
			out = append(out, s)
		}
		if len(got) < batch {
			return out, "", nil
		}
		cursor = got[len(got)-1].ID
	}
}

func (q queries) CountSandboxes(ctx context.Context, graph string) (running, held int, err error) {
	err = q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END), 0) FROM sandboxes
		WHERE graph = ? AND status IN (?, ?, ?, ?)`, store.SandboxStarting, store.SandboxRunning,
		graph, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped).Scan(&held, &running)
	return running, held, err
}

func (q queries) CountLongLived(ctx context.Context, graph string) (running, held int, err error) {
	err = q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END), 0) FROM sandboxes
		WHERE graph = ? AND one_call = ? AND status IN (?, ?, ?, ?)`, store.SandboxStarting, store.SandboxRunning,
		graph, false, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped).Scan(&held, &running)
	return running, held, err
}

func (q queries) GraphUsage(ctx context.Context, graph string) (store.GraphUsage, error) {
	var u store.GraphUsage
	// One-call runs' sandboxes are the host's run slots' (admission), not the graph's: the
	// caps of running and held sandboxes count long-lived ones (CountLongLived), and so does
	// what GET /v1/quotas shows against them.
	rows, err := q.query(ctx, `SELECT status, pause_mode, COUNT(*), COALESCE(SUM(checkpoint_bytes), 0) FROM sandboxes
		WHERE graph = ? AND one_call = ? AND status IN (?, ?, ?, ?) GROUP BY status, pause_mode`,
		graph, false, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped)
	if err != nil {
		return u, err
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var mode sql.NullString
		var n, bytes int64
		if err := rows.Scan(&status, &mode, &n, &bytes); err != nil {
			return u, err
		}
		u.Sandboxes += n
		switch {
		case status == store.SandboxStarting || status == store.SandboxRunning:
			u.Running += n
		case status == store.SandboxStopped:
			u.Stopped += n
		case mode.String == store.PauseCheckpoint:
			u.Checkpoints += n
			u.CheckpointBytes += bytes
		}
	}
	if err := rows.Err(); err != nil {
		return u, err
	}
	// A disk's size limit is in the limits JSON: summed here, not in SQL, whose JSON
	// functions differ between databases.
	limits, err := collect(ctx, q, func(r row) (sql.NullString, error) {
		var l sql.NullString
		return l, r.Scan(&l)
	}, `SELECT limits FROM sandboxes WHERE graph = ? AND status = ?`, graph, store.SandboxStopped)
	if err != nil {
		return u, err
	}
	for _, l := range limits {
		var lim store.Limits
		if err := fromJSON(l, &lim); err != nil {
			return u, err
		}
		u.StoppedDiskBytes += lim.DiskMiB << 20
	}
	if err := q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM files WHERE graph = ?`, graph).Scan(&u.Files, &u.FileBytes); err != nil {
		return u, err
	}
	err = q.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE graph = ?`, graph).Scan(&u.Snapshots, &u.SnapshotBytes)
	return u, err
}

func (q queries) ListSandboxesByStatus(ctx context.Context, statuses ...string) ([]store.Sandbox, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	return q.listSandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE status IN (`+inList(len(statuses))+`) ORDER BY id`, anys(statuses)...)
}

// Commands.

const commandCols = `id, graph, sandbox_id, kind, one_call, argv, cwd, stdin_bytes, language, code, input, config,
	template_id, template_name, template_version, env_names, timeout_ms, status, ok, result, error, exit_code, signal,
	stdout_head, stdout_tail, stdout_bytes, stderr_head, stderr_tail, stderr_bytes, output_expired,
	idempotency_key, origin, created_at, started_at, finished_at, duration_ms, result_truncated, result_bytes, result_file,
	egress_usage, usage, budget_left, forked_from`

func commandArgs(c store.Command, oneCall bool) []any {
	var tid, tname, tver any
	if c.Template != nil {
		tid, tname, tver = c.Template.ID, c.Template.Name, c.Template.Version
	}
	var exit any
	if c.ExitCode != nil {
		exit = *c.ExitCode
	}
	return []any{c.ID, c.Graph, c.SandboxID, c.Kind, b2i(oneCall), jsonText(c.Argv), nullStr(c.Cwd), c.StdinBytes,
		nullStr(c.Language), nullStr(c.Code), nullRaw(c.Input), nullRaw(c.Config), tid, tname, tver,
		jsonText(c.EnvNames), c.TimeoutMs, c.Status, b2i(c.OK), nullRaw(c.Result), nullStr(c.Error), exit, nullStr(c.Signal),
		c.Stdout.Head, c.Stdout.Tail, c.Stdout.Bytes, c.Stderr.Head, c.Stderr.Tail, c.Stderr.Bytes,
		b2i(c.Stdout.Expired || c.Stderr.Expired), nullStr(c.IdempotencyKey), jsonText(c.Origin),
		ms(c.CreatedAt), msPtr(c.StartedAt), msPtr(c.FinishedAt), c.DurationMs,
		b2i(c.ResultTruncated), c.ResultBytes, nullStr(c.ResultFile), jsonOpt(c.Egress), jsonOpt(c.Usage), jsonOpt(c.Budget), nullStr(c.ForkedFrom)}
}

func scanCommand(sc row) (store.Command, error) {
	var c store.Command
	var oneCall, ok, expired, truncated int
	var argv, cwd, lang, code, input, config, tid, tname, env, result, errStr, signal, idem, origin, resultFile, egress, usage, left, forked sql.NullString
	var tver, exit, started, finished sql.NullInt64
	var created int64
	err := sc.Scan(&c.ID, &c.Graph, &c.SandboxID, &c.Kind, &oneCall, &argv, &cwd, &c.StdinBytes, &lang, &code, &input, &config,
		&tid, &tname, &tver, &env, &c.TimeoutMs, &c.Status, &ok, &result, &errStr, &exit, &signal,
		&c.Stdout.Head, &c.Stdout.Tail, &c.Stdout.Bytes, &c.Stderr.Head, &c.Stderr.Tail, &c.Stderr.Bytes, &expired,
		&idem, &origin, &created, &started, &finished, &c.DurationMs, &truncated, &c.ResultBytes, &resultFile, &egress, &usage, &left, &forked)
	if err != nil {
		return c, err
	}
	if err := optFrom(usage, &c.Usage); err != nil {
		return c, err
	}
	if err := optFrom(left, &c.Budget); err != nil {
		return c, err
	}
	if err := optFrom(egress, &c.Egress); err != nil {
		return c, err
	}
	c.Cwd, c.Language, c.Code, c.Error, c.Signal, c.IdempotencyKey = cwd.String, lang.String, code.String, errStr.String, signal.String, idem.String
	c.Input, c.Config, c.Result = rawFrom(input), rawFrom(config), rawFrom(result)
	c.OK = ok != 0
	c.ResultTruncated, c.ResultFile = truncated != 0, resultFile.String
	c.ForkedFrom = forked.String
	c.Stdout.Expired, c.Stderr.Expired = expired != 0, expired != 0
	if tid.Valid {
		c.Template = &store.TemplateRef{ID: tid.String, Name: tname.String, Version: int(tver.Int64)}
	}
	if exit.Valid {
		e := int(exit.Int64)
		c.ExitCode = &e
	}
	c.CreatedAt, c.StartedAt, c.FinishedAt = fromMs(created), fromNullMs(started), fromNullMs(finished)
	for _, f := range []struct {
		v   sql.NullString
		dst any
	}{{argv, &c.Argv}, {env, &c.EnvNames}, {origin, &c.Origin}} {
		if err := fromJSON(f.v, f.dst); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (q queries) CreateCommand(ctx context.Context, c store.Command) error {
	var oneCall int
	if err := q.queryRow(ctx, `SELECT one_call FROM sandboxes WHERE graph = ? AND id = ?`, c.Graph, c.SandboxID).Scan(&oneCall); err != nil {
		return notFound(err, "sandbox %s not found", c.SandboxID)
	}
	_, err := q.exec(ctx, `INSERT INTO commands (`+commandCols+`, holder) VALUES (`+inList(44)+`)`, append(commandArgs(c, oneCall != 0), q.holder)...)
	return err
}

func (q queries) GetCommand(ctx context.Context, graph, id string) (store.Command, error) {
	c, err := scanCommand(q.queryRow(ctx, `SELECT `+commandCols+` FROM commands WHERE graph = ? AND id = ?`, graph, id))
	return c, notFound(err, "command %s not found", id)
}

func (q queries) UpdateCommand(ctx context.Context, c store.Command) error {
	args := commandArgs(c, false)
	// Everything but id, graph, sandbox_id, kind and one_call, which never change.
	res, err := q.exec(ctx, `UPDATE commands SET argv = ?, cwd = ?, stdin_bytes = ?, language = ?, code = ?, input = ?,
		config = ?, template_id = ?, template_name = ?, template_version = ?, env_names = ?, timeout_ms = ?, status = ?,
		ok = ?, result = ?, error = ?, exit_code = ?, signal = ?, stdout_head = ?, stdout_tail = ?, stdout_bytes = ?,
		stderr_head = ?, stderr_tail = ?, stderr_bytes = ?, output_expired = ?, idempotency_key = ?, origin = ?,
		created_at = ?, started_at = ?, finished_at = ?, duration_ms = ?, result_truncated = ?, result_bytes = ?, result_file = ?,
		egress_usage = ?, usage = ?, budget_left = ?, forked_from = ? WHERE id = ? AND graph = ?`,
		append(args[5:], c.ID, c.Graph)...)
	return mustAffect(res, err, "command "+c.ID)
}

func (q queries) listCommands(ctx context.Context, query string, args ...any) ([]store.Command, error) {
	return collect(ctx, q, scanCommand, query, args...)
}

func (q queries) ListCommands(ctx context.Context, graph string, f store.CommandFilter, p store.Page) ([]store.Command, string, error) {
	limit := pageLimit(p)
	out, err := q.listCommands(ctx, `SELECT `+commandCols+` FROM commands WHERE graph = ? AND (? = '' OR sandbox_id = ?)
		AND (? = '' OR status = ?) AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`,
		graph, f.SandboxID, f.SandboxID, f.Status, f.Status, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Command) string { return x.ID })
	return out, next, nil
}

func (q queries) ListCommandsByStatus(ctx context.Context, statuses ...string) ([]store.Command, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	return q.listCommands(ctx, `SELECT `+commandCols+` FROM commands WHERE status IN (`+inList(len(statuses))+`) ORDER BY id`, anys(statuses)...)
}

// Templates.

const templateCols = `id, graph, name, version, base, code, limits, timeout_ms, config, files, description, created_at, created_by,
	isolation, egress, image, layer, build`

func scanTemplate(sc row) (store.Template, error) {
	var t store.Template
	var code, limits, config, files, desc, by, isolation, egress, image, layer, build sql.NullString
	var created int64
	if err := sc.Scan(&t.ID, &t.Graph, &t.Name, &t.Version, &t.Base, &code, &limits, &t.TimeoutMs, &config, &files, &desc, &created, &by,
		&isolation, &egress, &image, &layer, &build); err != nil {
		return t, err
	}
	if err := optFrom(egress, &t.Egress); err != nil {
		return t, err
	}
	if err := optFrom(image, &t.Image); err != nil {
		return t, err
	}
	if err := optFrom(build, &t.Build); err != nil {
		return t, err
	}
	t.Layer = layer.String
	t.Code, t.Description, t.CreatedBy, t.CreatedAt, t.Config = code.String, desc.String, by.String, fromMs(created), rawFrom(config)
	t.Isolation = isolation.String
	if err := fromJSON(limits, &t.Limits); err != nil {
		return t, err
	}
	return t, fromJSON(files, &t.Files)
}

func (q queries) CreateTemplateVersion(ctx context.Context, t store.Template) (store.Template, error) {
	var id sql.NullString
	var version sql.NullInt64
	err := q.queryRow(ctx, `SELECT MAX(id), MAX(version) FROM templates WHERE graph = ? AND name = ?`, t.Graph, t.Name).Scan(&id, &version)
	if err != nil {
		return t, err
	}
	if id.Valid {
		t.ID = id.String
	}
	if t.ID == "" {
		return t, fmt.Errorf("store: a new template needs an id")
	}
	t.Version = int(version.Int64) + 1
	var files any
	if len(t.Files) > 0 {
		files = jsonText(t.Files)
	}
	_, err = q.exec(ctx, `INSERT INTO templates (`+templateCols+`) VALUES (`+inList(18)+`)`,
		t.ID, t.Graph, t.Name, t.Version, t.Base, nullStr(t.Code), jsonText(t.Limits), t.TimeoutMs, nullRaw(t.Config),
		files, nullStr(t.Description), ms(t.CreatedAt), nullStr(t.CreatedBy), nullStr(t.Isolation), jsonOpt(t.Egress),
		jsonOpt(t.Image), nullStr(t.Layer), jsonOpt(t.Build))
	return t, err
}

func (q queries) SetTemplateBuild(ctx context.Context, id string, version int, b store.TemplateBuild) error {
	res, err := q.exec(ctx, `UPDATE templates SET build = ? WHERE id = ? AND version = ?`, jsonText(b), id, version)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("template %s@%d not found", id, version)
	}
	return nil
}

func (q queries) TemplateLayers(ctx context.Context) ([]string, error) {
	rows, err := q.query(ctx, `SELECT DISTINCT layer FROM templates WHERE layer IS NOT NULL AND layer <> ''`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (q queries) GetTemplate(ctx context.Context, graph, name string, version int) (store.Template, error) {
	var t store.Template
	var err error
	if version > 0 {
		t, err = scanTemplate(q.queryRow(ctx, `SELECT `+templateCols+` FROM templates WHERE graph = ? AND name = ? AND version = ?`, graph, name, version))
		return t, notFound(err, "template %s@%d not found", name, version)
	}
	t, err = scanTemplate(q.queryRow(ctx, `SELECT `+templateCols+` FROM templates WHERE graph = ? AND name = ? ORDER BY version DESC LIMIT 1`, graph, name))
	return t, notFound(err, "template %s not found", name)
}

func (q queries) listTemplates(ctx context.Context, query string, args ...any) ([]store.Template, error) {
	return collect(ctx, q, scanTemplate, query, args...)
}

func (q queries) ListTemplates(ctx context.Context, graph string, p store.Page) ([]store.Template, string, error) {
	limit := pageLimit(p)
	out, err := q.listTemplates(ctx, `SELECT `+templateCols+` FROM templates t WHERE graph = ?
		AND version = (SELECT MAX(version) FROM templates v WHERE v.graph = t.graph AND v.name = t.name)
		AND (? = '' OR name > ?) ORDER BY name LIMIT ?`, graph, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.Template) string { return x.Name })
	return out, next, nil
}

func (q queries) ListTemplateVersions(ctx context.Context, graph, name string) ([]store.Template, error) {
	out, err := q.listTemplates(ctx, `SELECT `+templateCols+` FROM templates WHERE graph = ? AND name = ? ORDER BY version DESC`, graph, name)
	if err == nil && len(out) == 0 {
		err = errdefs.NotFound("template %s not found", name)
	}
	return out, err
}

// Idempotency.

const idemCols = `graph, idem_key, route, request_hash, state, command_id, sandbox_id, response_status, response_body, created_at, completed_at`

func scanIdem(sc row) (store.Idempotency, error) {
	var r store.Idempotency
	var cmd, sbx sql.NullString
	var status, completed sql.NullInt64
	var created int64
	if err := sc.Scan(&r.Graph, &r.Key, &r.Route, &r.RequestHash, &r.State, &cmd, &sbx, &status, &r.ResponseBody, &created, &completed); err != nil {
		return r, err
	}
	r.CommandID, r.SandboxID, r.ResponseStatus = cmd.String, sbx.String, int(status.Int64)
	r.CreatedAt, r.CompletedAt = fromMs(created), fromNullMs(completed)
	return r, nil
}

func (q queries) CreateIdempotency(ctx context.Context, r store.Idempotency) error {
	_, err := q.exec(ctx, `INSERT INTO idempotency (`+idemCols+`, holder) VALUES (`+inList(12)+`)`,
		r.Graph, r.Key, r.Route, r.RequestHash, r.State, nullStr(r.CommandID), nullStr(r.SandboxID),
		r.ResponseStatus, r.ResponseBody, ms(r.CreatedAt), msPtr(r.CompletedAt), q.holder)
	return err
}

func (q queries) GetIdempotency(ctx context.Context, graph, key string) (store.Idempotency, error) {
	r, err := scanIdem(q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency WHERE graph = ? AND idem_key = ?`, graph, key))
	return r, notFound(err, "idempotency key not found")
}

func (q queries) GetIdempotencyByCommand(ctx context.Context, commandID string) (store.Idempotency, error) {
	r, err := scanIdem(q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency WHERE command_id = ?`, commandID))
	return r, notFound(err, "no idempotency key for command %s", commandID)
}

func (q queries) UpdateIdempotency(ctx context.Context, r store.Idempotency) error {
	res, err := q.exec(ctx, `UPDATE idempotency SET route = ?, request_hash = ?, state = ?, command_id = ?, sandbox_id = ?,
		response_status = ?, response_body = ?, completed_at = ? WHERE graph = ? AND idem_key = ?`,
		r.Route, r.RequestHash, r.State, nullStr(r.CommandID), nullStr(r.SandboxID), r.ResponseStatus, r.ResponseBody,
		msPtr(r.CompletedAt), r.Graph, r.Key)
	return mustAffect(res, err, "idempotency key")
}

func (q queries) DeleteIdempotency(ctx context.Context, graph, key string) error {
	res, err := q.exec(ctx, `DELETE FROM idempotency WHERE graph = ? AND idem_key = ?`, graph, key)
	return mustAffect(res, err, "idempotency key")
}

func (q queries) ListIdempotencyByState(ctx context.Context, state string) ([]store.Idempotency, error) {
	return collect(ctx, q, scanIdem, `SELECT `+idemCols+` FROM idempotency WHERE state = ? ORDER BY created_at`, state)
}

// Files of the graph.

const fileCols = `id, graph, sha256, size, name, origin, created_at`

func scanFile(sc row) (store.File, error) {
	var f store.File
	var name, origin sql.NullString
	var created int64
	if err := sc.Scan(&f.ID, &f.Graph, &f.SHA256, &f.Size, &name, &origin, &created); err != nil {
		return f, err
	}
	f.Name, f.CreatedAt = name.String, fromMs(created)
	return f, fromJSON(origin, &f.Origin)
}

func (q queries) CreateFile(ctx context.Context, f store.File) error {
	// The blob's row first: a DeleteFile of the last File with these bytes waits for this
	// transaction, or this one for it (store.Queries.DeleteFile).
	if _, err := q.exec(ctx, `INSERT INTO blobs (sha256, size, created_at) VALUES (?, ?, ?)
		ON CONFLICT (sha256) DO UPDATE SET size = excluded.size`, f.SHA256, f.Size, ms(f.CreatedAt)); err != nil {
		return err
	}
	_, err := q.exec(ctx, `INSERT INTO files (`+fileCols+`) VALUES (`+inList(7)+`)`,
		f.ID, f.Graph, f.SHA256, f.Size, nullStr(f.Name), jsonText(f.Origin), ms(f.CreatedAt))
	return err
}

func (q queries) DeleteFile(ctx context.Context, graph, id string) (store.File, bool, error) {
	f, err := q.GetFile(ctx, graph, id)
	if err != nil {
		return f, false, err
	}
	if _, err := q.exec(ctx, `DELETE FROM files WHERE graph = ? AND id = ?`, graph, id); err != nil {
		return f, false, err
	}
	// Writing the blob's row waits for a transaction creating a File with these bytes, whose
	// File the count below then sees.
	if _, err := q.exec(ctx, `UPDATE blobs SET size = size WHERE sha256 = ?`, f.SHA256); err != nil {
		return f, false, err
	}
	var n int
	if err := q.queryRow(ctx, `SELECT COUNT(*) FROM files WHERE sha256 = ?`, f.SHA256).Scan(&n); err != nil {
		return f, false, err
	}
	if n > 0 {
		return f, false, nil
	}
	_, err = q.exec(ctx, `DELETE FROM blobs WHERE sha256 = ?`, f.SHA256)
	return f, err == nil, err
}

func (q queries) BlobNamed(ctx context.Context, sha256 string) (bool, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM blobs WHERE sha256 = ?`, sha256).Scan(&n)
	if err != nil || n > 0 {
		return n > 0, err
	}
	// A stopped sandbox's workspace archive, a paused one's checkpoint.
	err = q.queryRow(ctx, `SELECT COUNT(*) FROM sandboxes WHERE (workspace_sha256 = ? OR checkpoint_sha256 = ?)
		AND status NOT IN ('destroyed', 'failed')`, sha256, sha256).Scan(&n)
	if err != nil || n > 0 {
		return n > 0, err
	}
	// A snapshot's archive.
	err = q.queryRow(ctx, `SELECT COUNT(*) FROM snapshots WHERE archive_sha256 = ?`, sha256).Scan(&n)
	return n > 0, err
}

func (q queries) TemplatesNamingFile(ctx context.Context, graph string, refs ...string) ([]store.TemplateRef, error) {
	var out []store.TemplateRef
	seen := map[store.TemplateRef]bool{}
	for _, ref := range refs {
		// files is JSON text: LIKE narrows the versions, the decoded list decides.
		ts, err := q.listTemplates(ctx, `SELECT `+templateCols+` FROM templates WHERE graph = ? AND files LIKE ?
			ORDER BY name, version`, graph, "%"+ref+"%")
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			r := store.TemplateRef{ID: t.ID, Name: t.Name, Version: t.Version}
			for _, tf := range t.Files {
				if strings.EqualFold(tf.File, ref) && !seen[r] {
					seen[r] = true
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

func (q queries) GetFile(ctx context.Context, graph, id string) (store.File, error) {
	f, err := scanFile(q.queryRow(ctx, `SELECT `+fileCols+` FROM files WHERE graph = ? AND id = ?`, graph, id))
	return f, notFound(err, "file %s not found", id)
}

func (q queries) GetFileBySHA256(ctx context.Context, graph, sha256 string) (store.File, error) {
	f, err := scanFile(q.queryRow(ctx, `SELECT `+fileCols+` FROM files WHERE graph = ? AND sha256 = ? ORDER BY id DESC LIMIT 1`, graph, sha256))
	return f, notFound(err, "no file with sha256 %s in graph %s", sha256, graph)
}

func (q queries) ListFiles(ctx context.Context, graph string, p store.Page) ([]store.File, string, error) {
	limit := pageLimit(p)
	out, err := collect(ctx, q, scanFile, `SELECT `+fileCols+` FROM files WHERE graph = ? AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`,
		graph, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.File) string { return x.ID })
	return out, next, nil
}

// Audit.

const auditCols = `id, graph, key_id, method, route, path, target, status, request_id, at, actor`

func (q queries) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	_, err := q.exec(ctx, `INSERT INTO audit (`+auditCols+`) VALUES (`+inList(11)+`)`,
		e.ID, e.Graph, e.KeyID, e.Method, e.Route, e.Path, nullStr(e.Target), e.Status, e.RequestID, ms(e.At), nullStr(e.Actor))
	return err
}

func (q queries) ListAudit(ctx context.Context, graph string, p store.Page) ([]store.AuditEntry, string, error) {
	limit := pageLimit(p)
	out, err := collect(ctx, q, scanAudit, `SELECT `+auditCols+` FROM audit WHERE (? = '' OR graph = ?) AND (? = '' OR id < ?)
		ORDER BY id DESC LIMIT ?`, graph, graph, p.Cursor, p.Cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, limit, func(x store.AuditEntry) string { return x.ID })
	return out, next, nil
}

func scanAudit(sc row) (store.AuditEntry, error) {
	var e store.AuditEntry
	var target, actor sql.NullString
	var at int64
	err := sc.Scan(&e.ID, &e.Graph, &e.KeyID, &e.Method, &e.Route, &e.Path, &target, &e.Status, &e.RequestID, &at, &actor)
	e.Target, e.At, e.Actor = target.String, fromMs(at), actor.String
	return e, err
}

// Retention.

func (q queries) selectIDs(ctx context.Context, query string, args ...any) ([]any, []string, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var args2 []any
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, nil, err
		}
		args2, ids = append(args2, id), append(ids, id)
	}
	return args2, ids, rows.Err()
}

func (q queries) DeleteEndedSandboxes(ctx context.Context, before time.Time, limit int) (int, error) {
	args, _, err := q.selectIDs(ctx, `SELECT id FROM sandboxes WHERE ended_at IS NOT NULL AND ended_at < ? ORDER BY id LIMIT ?`, ms(before), limit)
	if err != nil || len(args) == 0 {
		return 0, err
	}
	if _, err := q.exec(ctx, `DELETE FROM commands WHERE sandbox_id IN (`+inList(len(args))+`)`, args...); err != nil {
		return 0, err
	}
	if _, err := q.exec(ctx, `DELETE FROM sandboxes WHERE id IN (`+inList(len(args))+`)`, args...); err != nil {
		return 0, err
	}
	return len(args), nil
}

func (q queries) ExpireRunOutput(ctx context.Context, before time.Time, limit int) ([]string, error) {
	args, ids, err := q.selectIDs(ctx, `SELECT id FROM commands WHERE one_call = 1 AND output_expired = 0
		AND finished_at IS NOT NULL AND finished_at < ? ORDER BY id LIMIT ?`, ms(before), limit)
	if err != nil || len(args) == 0 {
		return nil, err
	}
	_, err = q.exec(ctx, `UPDATE commands SET stdout_head = '', stdout_tail = '', stderr_head = '', stderr_tail = '',
		output_expired = 1 WHERE id IN (`+inList(len(args))+`)`, args...)
	return ids, err
}
