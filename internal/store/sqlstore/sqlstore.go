// Package sqlstore implements store.Store over database/sql. A Dialect carries what differs
// between databases (placeholders, unique-violation errors, migrations), so the same queries
// serve SQLite now and PostgreSQL later.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Dialect is what one database needs beyond portable SQL.
type Dialect struct {
	Name string
	// Rebind rewrites a query written with ? placeholders; nil keeps it.
	Rebind func(query string) string
	// IsUnique reports whether err is a unique or primary-key violation.
	IsUnique func(err error) bool
	// Migrations holds NNNN_name.sql files, applied in order, each once, each in a transaction
	// (Migrations() for lbb's own).
	Migrations fs.FS
	// Rewrite puts a migration, written in SQLite's dialect, into this database's; nil
	// keeps it.
	Rewrite func(sql string) string
	// TxLock, when set, is the first statement of every transaction WithTx runs: where
	// several processes write one database, it makes their transactions take turns, as
	// SQLite's one writer does within a process (a count and the insert it admits, above all).
	TxLock string
}

// DB is a store over a writer pool and a reader pool (the same pool where the database
// needs no split).
type DB struct {
	queries
	w, r *sql.DB
}

// stmts keeps each query text prepared on one pool, so that a query is parsed (and, on
// PostgreSQL, planned) once per connection rather than on every call.
type stmts struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// maxStmts bounds a pool's prepared statements: the texts are lbb's queries, but those with
// an IN list differ by its length; past the bound a text runs unprepared.
const maxStmts = 256

// get answers query prepared on the pool, preparing it first (nil when it could not be, or
// the cache is full: the caller runs the text itself). No lock is held while preparing,
// which waits for a connection.
func (c *stmts) get(ctx context.Context, query string) *sql.Stmt {
	if s := c.lookup(query); s != nil {
		return s
	}
	c.mu.Lock()
	full := len(c.m) >= maxStmts
	c.mu.Unlock()
	if full {
		return nil
	}
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	// Never close a statement under c.mu: Close waits for the connections it was prepared
	// on, one of which may be in a transaction waiting for a lock whose holder waits for
	// c.mu (TestTwoControlPlanes hung so on PostgreSQL).
	c.mu.Lock()
	cur := c.m[query]
	if cur == nil {
		c.m[query] = s
	}
	c.mu.Unlock()
	if cur != nil {
		_ = s.Close()
		return cur
	}
	return s
}

func (c *stmts) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

func (c *stmts) close() error {
	c.mu.Lock()
	m := c.m
	c.m = map[string]*sql.Stmt{}
	c.mu.Unlock()
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

var _ store.Store = (*DB)(nil)

// New returns a store writing through w and reading through r.
func New(w, r *sql.DB, d Dialect) *DB {
	if d.Rebind == nil {
		d.Rebind = func(q string) string { return q }
	}
	ws := &stmts{db: w, m: map[string]*sql.Stmt{}}
	rs := ws
	if r != w {
		rs = &stmts{db: r, m: map[string]*sql.Stmt{}}
	}
	return &DB{queries: queries{w: w, r: r, d: &d, ws: ws, rs: rs}, w: w, r: r}
}

// SetHolder makes id the holder of the sandboxes, commands and idempotency reservations
// inserted from now on: the control plane this store was opened for (store.Queries, Holders).
// Call it before the store is used.
func (db *DB) SetHolder(id string) { db.holder = id }

// Close closes both pools.
func (db *DB) Close() error {
	err := db.ws.close()
	if db.rs != db.ws {
		err = errors.Join(err, db.rs.close())
	}
	err = errors.Join(err, db.w.Close())
	if db.r != db.w {
		err = errors.Join(err, db.r.Close())
	}
	return err
}

// WithTx runs fn in one transaction on the writer.
func (db *DB) WithTx(ctx context.Context, fn func(q store.Queries) error) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if db.d.TxLock != "" {
		if _, err := tx.ExecContext(ctx, db.d.TxLock); err != nil {
			return errors.Join(fmt.Errorf("store: lock: %w", err), ignoreDone(tx.Rollback()))
		}
	}
	// A transaction holds a connection of the writer, which may be its only one: a query
	// not prepared yet runs as text in it, and is prepared on the pool once it is over.
	var unprepared []string
	defer func() {
		for _, q := range unprepared {
			db.ws.get(ctx, q)
		}
	}()
	if err := fn(queries{w: tx, r: tx, d: db.d, ws: db.ws, rs: db.ws, holder: db.holder, tx: tx, unprepared: &unprepared}); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are lbb's schema, one set for every database: NNNN_name.sql files in SQLite's
// dialect, which another database's Dialect.Rewrite puts into its own at load.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Migrate applies every migration not applied yet.
func (db *DB) Migrate(ctx context.Context) error {
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrations table: %w", err)
	}
	entries, err := fs.ReadDir(db.d.Migrations, ".")
	if err != nil {
		return fmt.Errorf("store: reading migrations: %w", err)
	}
	type mig struct {
		version int
		name    string
	}
	var migs []mig
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("store: migration %q: name must start with its number", e.Name())
		}
		migs = append(migs, mig{v, e.Name()})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].version < migs[j].version })
	// Two files of one number would apply only the first: a merge of two branches that each
	// took the next number does exactly that, so it fails here instead of skipping one.
	for i := 1; i < len(migs); i++ {
		if migs[i].version == migs[i-1].version {
			return fmt.Errorf("store: migrations %q and %q have the same number", migs[i-1].name, migs[i].name)
		}
	}
	for _, m := range migs {
		body, err := fs.ReadFile(db.d.Migrations, m.name)
		if err != nil {
			return err
		}
		err = db.WithTx(ctx, func(q store.Queries) error {
			tx := q.(queries)
			var n int
			if err := tx.w.QueryRowContext(ctx, db.d.Rebind(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), m.version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			text := string(body)
			if db.d.Rewrite != nil {
				text = db.d.Rewrite(text)
			}
			for _, stmt := range splitStatements(text) {
				if _, err := tx.w.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%w\n%s", err, stmt)
				}
			}
			_, err := tx.w.ExecContext(ctx, db.d.Rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
				m.version, m.name, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// splitStatements splits a migration on semicolons that end a line.
func splitStatements(s string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "--") || t == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// The operations that take several statements run in their own transaction when called
// outside one.

func (db *DB) CreateTemplateVersion(ctx context.Context, t store.Template) (out store.Template, err error) {
	err = db.WithTx(ctx, func(q store.Queries) error {
		out, err = q.CreateTemplateVersion(ctx, t)
		return err
	})
	return out, err
}

func (db *DB) DeleteEndedSandboxes(ctx context.Context, before time.Time, limit int) (n int, err error) {
	err = db.WithTx(ctx, func(q store.Queries) error {
		n, err = q.DeleteEndedSandboxes(ctx, before, limit)
		return err
	})
	return n, err
}

func (db *DB) CreateFile(ctx context.Context, f store.File) error {
	return db.WithTx(ctx, func(q store.Queries) error { return q.CreateFile(ctx, f) })
}

func (db *DB) DeleteFile(ctx context.Context, graph, id string) (f store.File, last bool, err error) {
	err = db.WithTx(ctx, func(q store.Queries) error {
		f, last, err = q.DeleteFile(ctx, graph, id)
		return err
	})
	return f, last, err
}

func (db *DB) ExpireRunOutput(ctx context.Context, before time.Time, limit int) (ids []string, err error) {
	err = db.WithTx(ctx, func(q store.Queries) error {
		ids, err = q.ExpireRunOutput(ctx, before, limit)
		return err
	})
	return ids, err
}

func (db *DB) AdoptControlPlane(ctx context.Context, id, by string, deadBefore, at time.Time) (won bool, err error) {
	err = db.WithTx(ctx, func(q store.Queries) error {
		won, err = q.AdoptControlPlane(ctx, id, by, deadBefore, at)
		return err
	})
	return won, err
}

func (db *DB) FinishAdoption(ctx context.Context, id string, at time.Time) error {
	return db.WithTx(ctx, func(q store.Queries) error { return q.FinishAdoption(ctx, id, at) })
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queries runs the statements on a pool or in a transaction, prepared where it can (ws, rs:
// the statements of the writer and of the reader).
type queries struct {
	w, r   execer
	d      *Dialect
	ws, rs *stmts
	// holder is the control plane the records inserted are stamped with (SetHolder).
	holder string
	// In a transaction: tx, and the texts it ran unprepared.
	tx         *sql.Tx
	unprepared *[]string
}

// stmt answers query prepared for the writer (reader: false, the reader), or nil: run the text.
func (q queries) stmt(ctx context.Context, query string, writer bool) *sql.Stmt {
	c := q.rs
	if writer {
		c = q.ws
	}
	if c == nil {
		return nil
	}
	if q.tx == nil {
		return c.get(ctx, query)
	}
	s := c.lookup(query)
	if s == nil {
		if len(*q.unprepared) < maxStmts {
			*q.unprepared = append(*q.unprepared, query)
		}
		return nil
	}
	// On the transaction's connection, where the statement is prepared once.
	return q.tx.StmtContext(ctx, s)
}

func (q queries) exec(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	query = q.d.Rebind(query)
	if s := q.stmt(ctx, query, true); s != nil {
		res, err = s.ExecContext(ctx, plain(args)...)
	} else {
		res, err = q.w.ExecContext(ctx, query, plain(args)...)
	}
	if err != nil && q.d.IsUnique != nil && q.d.IsUnique(err) {
		return nil, errdefs.Wrap(errdefs.ClassConflict, "", err)
	}
	return res, err
}

func (q queries) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query = q.d.Rebind(query)
	if s := q.stmt(ctx, query, false); s != nil {
		return s.QueryContext(ctx, plain(args)...)
	}
	return q.r.QueryContext(ctx, query, plain(args)...)
}

func (q queries) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query = q.d.Rebind(query)
	if s := q.stmt(ctx, query, false); s != nil {
		return s.QueryRowContext(ctx, plain(args)...)
	}
	return q.r.QueryRowContext(ctx, query, plain(args)...)
}

// plain passes booleans as the integers the flag columns hold: SQLite stores them so anyway,
// PostgreSQL refuses a boolean for an INTEGER column.
func plain(args []any) []any {
	out := args
	for i, a := range args {
		if b, ok := a.(bool); ok {
			if &out[0] == &args[0] {
				out = append([]any(nil), args...)
			}
			out[i] = b2i(b)
		}
	}
	return out
}

// mustAffect turns an update of no row into NotFound.
func mustAffect(res sql.Result, err error, what string) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.NotFound("%s not found", what)
	}
	return nil
}

func notFound(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.NotFound(format, args...)
	}
	return err
}

// row is what scan functions read: *sql.Row or *sql.Rows.
type row interface{ Scan(...any) error }

// collect runs a query and answers each row it returns, read by scan.
func collect[T any](ctx context.Context, q queries, scan func(row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// cutPage keeps the first limit of out, which was queried with LIMIT limit+1, and answers
// the cursor of the next page ("" on the last page): the key of its last row.
func cutPage[T any](out []T, limit int, key func(T) string) ([]T, string) {
	if len(out) <= limit {
		return out, ""
	}
	out = out[:limit]
	return out, key(out[limit-1])
}

func pageLimit(p store.Page) int {
	switch {
	case p.Limit <= 0:
		return 50
	case p.Limit > 1000:
		return 1000
	}
	return p.Limit
}

func inList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// anys is xs as query arguments.
func anys[T any](xs []T) []any {
	args := make([]any, len(xs))
	for i, x := range xs {
		args[i] = x
	}
	return args
}
