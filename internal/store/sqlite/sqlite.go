// Package sqlite opens lbb's embedded store: one SQLite file in WAL mode (modernc.org/sqlite,
// no cgo). Writes go through one connection, so they never meet SQLITE_BUSY inside the
// process; reads use a pool of their own.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/littlebigbrain/lbb/internal/store/sqlstore"
)

// Open opens (creating when missing) the store at path and migrates it.
func Open(ctx context.Context, path string) (*sqlstore.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// SQLite gives its -wal and -shm files the mode of the database file.
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	} else {
		f.Close()
	}
	dsn := func(extra string) string {
		q := url.Values{}
		// synchronous FULL: a commit (an idempotency key's reservation above all) survives a
		// power loss too, not only a crash of the process. It costs about 1 ms a commit.
		for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)"} {
			q.Add("_pragma", p)
		}
		if extra != "" {
			q.Add("_pragma", extra)
		}
		return "file:" + path + "?" + q.Encode()
	}
	w, err := sql.Open("sqlite", dsn("")+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn("query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	db := sqlstore.New(w, r, sqlstore.Dialect{Name: "sqlite", IsUnique: isUnique, Migrations: sqlstore.Migrations()})
	if err := db.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func isUnique(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}
