package sqlstore

import (
	"context"
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/littlebigbrain/lbb/internal/store"
)

// A query is prepared once per pool, also when first run in a transaction that holds the
// writer's only connection, and answers the same as its text does.
func TestPreparedStatements(t *testing.T) {
	ctx := context.Background()
	w, err := sql.Open("sqlite", "file:"+t.TempDir()+"/db")
	if err != nil {
		t.Fatal(err)
	}
	w.SetMaxOpenConns(1)
	db := New(w, w, Dialect{Name: "sqlite"})
	defer db.Close()
	if _, err := w.ExecContext(ctx, `CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	const ins, sel = `INSERT INTO t (k, v) VALUES (?, ?)`, `SELECT v FROM t WHERE k = ?`
	for i, k := range []string{"a", "b", "c"} {
		if err := db.WithTx(ctx, func(sq store.Queries) error {
			q := sq.(queries)
			if _, err := q.exec(ctx, ins, k, i); err != nil {
				return err
			}
			var v int
			if err := q.queryRow(ctx, sel, k).Scan(&v); err != nil || v != i {
				t.Errorf("in a transaction, %s: %d, %v", k, v, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := len(db.ws.m); got != 2 {
			t.Errorf("after transaction %d: %d statements prepared, want 2", i, got)
		}
	}
	var v int
	if err := db.queryRow(ctx, sel, "c").Scan(&v); err != nil || v != 2 {
		t.Errorf("out of a transaction: %d, %v", v, err)
	}
	if got := len(db.ws.m); got != 2 {
		t.Errorf("%d statements prepared, want 2", got)
	}
}
