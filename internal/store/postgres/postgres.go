// Package postgres opens lbb's store on PostgreSQL (github.com/jackc/pgx/v5 through
// database/sql), for several control planes on one database. The queries are sqlstore's, the
// same as SQLite's; so are the migrations (sqlstore.Migrations), put into PostgreSQL's
// dialect as they load (toPostgres).
//
// Several processes write one database, so what SQLite's one writer gives within a process
// is made explicit: every transaction of WithTx takes one transaction-scoped advisory lock
// first, so that a check and the write it admits (a cap's count and the insert, a key's read
// and its reservation) never interleave with another control plane's. A reservation of an
// Idempotency-Key is also a primary key: of two inserts of one key, the second waits for the
// first's commit and fails as a Conflict.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/littlebigbrain/lbb/internal/store/sqlstore"
)

// The advisory lock keys (any bigint; these spell "lbb" and a purpose).
const (
	writeLock   = 0x6c6262_0001 // every WithTx transaction
	migrateLock = 0x6c6262_0002 // Migrate, held by one process at a time
)

// IsURL reports whether a --store value names a PostgreSQL database.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database at dsn (a postgres:// URL or key=value string, see
// pgx.ParseConfig) and migrates it.
func Open(ctx context.Context, dsn string) (*sqlstore.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(8)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	st, err := open(ctx, db, sqlstore.Migrations())
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

func open(ctx context.Context, db *sql.DB, migs fs.FS) (*sqlstore.DB, error) {
	st := sqlstore.New(db, db, dialect(migs))
	// Two control planes starting together: one migrates, the other then finds it done.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return nil, fmt.Errorf("store: postgres: migration lock: %w", err)
	}
	err = st.Migrate(ctx)
	if _, uerr := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLock)); uerr != nil {
		err = errors.Join(err, uerr)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

func dialect(migs fs.FS) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:       "postgres",
		Rebind:     rebind,
		IsUnique:   isUnique,
		Migrations: migs,
		Rewrite:    toPostgres,
		TxLock:     "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(writeLock, 10) + ")",
	}
}

// sqliteOnly are the words of SQLite's dialect that the migrations use and PostgreSQL spells
// otherwise, as whole words outside string literals and comments: BLOB is BYTEA. The rest
// of the migrations (TEXT, INTEGER, BIGINT, BOOLEAN, REAL, ALTER TABLE … ADD COLUMN,
// CREATE INDEX) means the same in both. A migration that needs more than a word's rewrite
// (an AUTOINCREMENT, a type PostgreSQL lacks) adds its rule here; TestMigrations applies
// every migration to a real PostgreSQL.
var sqliteOnly = map[string]string{"BLOB": "BYTEA"}

var word = regexp.MustCompile(`(?i)\b[a-z_]+\b`)

// toPostgres rewrites one migration from SQLite's dialect to PostgreSQL's.
func toPostgres(sql string) string {
	lines := strings.Split(sql, "\n")
	for i, line := range lines {
		code, comment, _ := strings.Cut(line, "--")
		if strings.Contains(code, "'") {
			continue // a literal: left as written (none of the migrations has one today)
		}
		code = word.ReplaceAllStringFunc(code, func(w string) string {
			if r, ok := sqliteOnly[strings.ToUpper(w)]; ok {
				return r
			}
			return w
		})
		if strings.Contains(line, "--") {
			code += "--" + comment
		}
		lines[i] = code
	}
	return strings.Join(lines, "\n")
}

// rebind numbers the ? placeholders ($1, $2, …), leaving those inside string literals.
func rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isUnique(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505" // unique_violation
}
