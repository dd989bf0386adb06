package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
	"github.com/littlebigbrain/lbb/internal/store/sqlstore"
	"github.com/littlebigbrain/lbb/internal/store/storetest"
)

func TestStore(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		db, err := Open(context.Background(), srv.NewSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}

// TestMigrations: SQLite's migrations, rewritten into PostgreSQL's dialect, apply to a real
// PostgreSQL, and applying them twice (a restart, or two control planes starting together)
// changes nothing.
func TestMigrations(t *testing.T) {
	pg, _ := fs.Glob(sqlstore.Migrations(), "*.sql")
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			db, err := Open(context.Background(), dsn)
			if err == nil {
				db.Close()
			}
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// lbb serve --store takes the URL form.
	if !IsURL(pgtest.URL(dsn)) {
		t.Fatalf("%q is not a URL", pgtest.URL(dsn))
	}
	db, err := Open(context.Background(), pgtest.URL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(pg) {
		t.Fatalf("schema_migrations has %d rows (%v), want %d", n, err, len(pg))
	}
	var public sql.NullString
	if err := raw.QueryRow(`SELECT to_regclass('public.schema_migrations')::text`).Scan(&public); err != nil || public.Valid {
		t.Fatalf("the URL's search_path was not followed: public.schema_migrations %v %v", public, err)
	}
}

// TestMigrationNumbersClash: as in SQLite, two migrations of one number fail the start.
func TestMigrationNumbersClash(t *testing.T) {
	srv := pgtest.Start(t)
	raw, err := sql.Open("pgx", srv.NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	clash := fstest.MapFS{
		"0001_a.sql": &fstest.MapFile{Data: []byte("CREATE TABLE a (x INTEGER);")},
		"0001_b.sql": &fstest.MapFile{Data: []byte("CREATE TABLE b (x INTEGER);")},
	}
	_, err = open(context.Background(), raw, clash)
	if err == nil || !strings.Contains(err.Error(), "same number") {
		t.Fatalf("Migrate with two migrations numbered 0001: %v, want a clash", err)
	}
}

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT 1`:        `SELECT 1`,
		`a = ? AND b = ?`: `a = $1 AND b = $2`,
		`a = '?' AND b = ? AND c LIKE 'x?y' OR ?`: `a = '?' AND b = $1 AND c LIKE 'x?y' OR $2`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestToPostgres(t *testing.T) {
	for in, want := range map[string]string{
		"\tresponse_body   BLOB,":                "\tresponse_body   BYTEA,",
		"x blob NOT NULL, y BLOBS, BLOB_ID TEXT": "x BYTEA NOT NULL, y BLOBS, BLOB_ID TEXT",
		"a TEXT, -- a BLOB here stays":           "a TEXT, -- a BLOB here stays",
		"b TEXT DEFAULT 'BLOB'":                  "b TEXT DEFAULT 'BLOB'",
		"c INTEGER NOT NULL":                     "c INTEGER NOT NULL",
	} {
		if got := toPostgres(in); got != want {
			t.Errorf("toPostgres(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAdoptionOneWinner: two control planes, each with its own connections to one database,
// adopt the same dead peers at once: each peer is adopted by exactly one of them.
func TestAdoptionOneWinner(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	var dbs [2]*sqlstore.DB
	for i := range dbs {
		db, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	ctx := context.Background()
	t0 := time.Now()
	const n = 20
	for i := range n {
		if err := dbs[0].RegisterControlPlane(ctx, fmt.Sprint("dead-", i), t0.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var wins [2]atomic.Int64
	var wg sync.WaitGroup
	for a := range dbs {
		wg.Go(func() {
			for i := range n {
				won, err := dbs[a].AdoptControlPlane(ctx, fmt.Sprint("dead-", i), fmt.Sprint("cp-", a), t0, t0)
				if err != nil {
					t.Error(err)
				}
				if won {
					wins[a].Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := wins[0].Load() + wins[1].Load(); got != n {
		t.Fatalf("%d + %d adoptions of %d dead control planes, want one each", wins[0].Load(), wins[1].Load(), n)
	}
	planes, err := dbs[1].ListControlPlanes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range planes {
		if p.ID != "" && p.AdoptedBy == "" {
			t.Fatalf("%s was adopted by nobody", p.ID)
		}
	}
	t.Logf("adoptions: cp-0 %d, cp-1 %d", wins[0].Load(), wins[1].Load())
}
