package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlstore"
	"github.com/littlebigbrain/lbb/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		db, err := Open(context.Background(), filepath.Join(t.TempDir(), "lbb.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}

func TestMigrateTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lbb.db")
	for range 2 {
		db, err := Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
}

// TestMigrateBlobs: migration 0005 registers the blobs the Files of an older store name, so
// that the start's sweep of blobs no File names keeps them.
func TestMigrateBlobs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lbb.db")
	w, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	upTo4 := fstest.MapFS{}
	for _, name := range []string{"0001_init.sql", "0002_files.sql", "0003_isolation.sql", "0004_snapshots.sql"} {
		b, err := fs.ReadFile(sqlstore.Migrations(), name)
		if err != nil {
			t.Fatal(err)
		}
		upTo4[name] = &fstest.MapFile{Data: b}
	}
	if err := sqlstore.New(w, w, sqlstore.Dialect{Name: "sqlite", IsUnique: isUnique, Migrations: upTo4}).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i, sha := range []string{"aa", "aa", "bb"} {
		if _, err := w.Exec(`INSERT INTO files (id, graph, sha256, size, created_at) VALUES (?, 'main', ?, 3, 1)`, fmt.Sprint("fil_", i), sha); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for sha, want := range map[string]bool{"aa": true, "bb": true, "cc": false} {
		if named, err := db.BlobNamed(ctx, sha); err != nil || named != want {
			t.Errorf("blob %s named: %v %v, want %v", sha, named, err, want)
		}
	}
	if _, last, err := db.DeleteFile(ctx, "main", "fil_0"); err != nil || last {
		t.Fatalf("delete one of two: last %v %v", last, err)
	}
	if _, last, err := db.DeleteFile(ctx, "main", "fil_1"); err != nil || !last {
		t.Fatalf("delete the other: last %v %v", last, err)
	}
}

// TestMigrationNumbersClash: two migrations of one number (two branches that each took the
// next one) fail the start instead of applying one of them.
func TestMigrationNumbersClash(t *testing.T) {
	w, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	clash := fstest.MapFS{
		"0001_a.sql": &fstest.MapFile{Data: []byte("CREATE TABLE a (x INTEGER);")},
		"0001_b.sql": &fstest.MapFile{Data: []byte("CREATE TABLE b (x INTEGER);")},
	}
	err = sqlstore.New(w, w, sqlstore.Dialect{Name: "sqlite", IsUnique: isUnique, Migrations: clash}).Migrate(context.Background())
	if err == nil || !strings.Contains(err.Error(), "same number") {
		t.Fatalf("Migrate with two migrations numbered 0001: %v, want a clash", err)
	}
}
