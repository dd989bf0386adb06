package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/blobs/s3test"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/postgres"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
)

// TestTwoControlPlanes: two control planes, each with its own store connection, host and
// data directory, on one PostgreSQL database.
func TestTwoControlPlanes(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("OneKey", func(t *testing.T) { testTwoPlanesOneKey(t, srv.NewSchema(t)) })
	t.Run("OneCap", func(t *testing.T) { testTwoPlanesOneCap(t, srv.NewSchema(t)) })
	t.Run("FilesInOneBucket", func(t *testing.T) { testTwoPlanesFiles(t, srv.NewSchema(t)) })
}

// openPostgres opens the store at dsn, closed when the test ends.
func openPostgres(t *testing.T, dsn string) store.Store {
	t.Helper()
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// testTwoPlanesOneKey: retries of one Idempotency-Key hit both planes at once. The key runs
// once: one command record, one run on one of the two hosts, and every retry answers that
// command's result.
func testTwoPlanesOneKey(t *testing.T, dsn string) {
	planes := make([]*env, 2)
	for i := range planes {
		st := openPostgres(t, dsn)
		dir, r := t.TempDir(), controltest.New()
		o := control.Options{Store: st, Host: r.On(nil), Config: testConfig(dir, nil),
			Image: control.Image{ID: "img1", Versions: map[string]string{"python": "3.13.5"}}}
		if i == 0 {
			planes[i] = serve(t, dir, o)
			planes[i].runner = r
			continue
		}
		// A key made through one plane is a key of both: calls carry the first plane's.
		svc := control.New(o)
		t.Cleanup(func() { svc.Shutdown(ctx) })
		if _, err := svc.Bootstrap(ctx, dir); err != nil {
			t.Fatalf("second plane's bootstrap: %v", err)
		}
		planes[i] = &env{svc: svc, st: st, caller: planes[0].caller, dir: dir, runner: r}
	}

	for round := range 3 {
		key := fmt.Sprint("same-", round)
		const n = 12
		var wg sync.WaitGroup
		resps := make([]control.Response, n)
		errs := make([]error, n)
		for i := range n {
			p := planes[i%2]
			wg.Go(func() {
				resps[i], errs[i] = p.svc.Run(context.Background(), p.caller, run("sleep:300ms", "7"), key, "h")
			})
		}
		wg.Wait()
		first, replayed := "", 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d call %d (plane %d): %v", round, i, i%2, errs[i])
			}
			r := decodeResult(t, resps[i])
			if !r.OK || string(r.Result) != "7" {
				t.Fatalf("round %d call %d (plane %d): %s", round, i, i%2, resps[i].Body)
			}
			if first == "" {
				first = r.Command
			} else if r.Command != first {
				t.Fatalf("round %d: two commands for one key: %s and %s", round, first, r.Command)
			}
			if resps[i].Replayed {
				replayed++
			}
		}
		if replayed != n-1 {
			t.Fatalf("round %d: %d of %d calls replayed, want %d", round, replayed, n, n-1)
		}
	}
	if runs := planes[0].runner.Total() + planes[1].runner.Total(); runs != 3 {
		t.Fatalf("3 keys ran %d times over both planes (%d + %d)", runs, planes[0].runner.Total(), planes[1].runner.Total())
	}
	cmds, _, err := planes[1].st.ListCommands(ctx, "main", store.CommandFilter{}, store.Page{})
	if err != nil || len(cmds) != 3 {
		t.Fatalf("%d command records (%v), want 3", len(cmds), err)
	}
}

// testTwoPlanesOneCap: creates racing on both planes for a graph's last running slots
// (--max-running-per-graph 3) admit exactly 3: the count and the insert it admits are one
// transaction, and the two planes' transactions take turns.
func testTwoPlanesOneCap(t *testing.T, dsn string) {
	const limit, n = 3, 10
	planes := make([]*env3, 2)
	for i := range planes {
		dir := t.TempDir()
		drv := local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, "sandboxes")})
		planes[i] = setup3On(t, dir, openPostgres(t, dsn), drv, func(c *config.Config) { c.MaxRunningPerGraph = limit })
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		p := planes[i%2]
		wg.Go(func() { _, errs[i] = p.svc.CreateSandbox(ctx, p.caller, control.CreateRequest{}, "", "") })
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errdefs.CodeOf(err) != errdefs.CodeTooManySandboxes:
			t.Fatalf("create %d (plane %d): %v, want success or %s", i, i%2, err, errdefs.CodeTooManySandboxes)
		}
	}
	running, _, err := planes[0].st.CountLongLived(ctx, "main")
	if ok != limit || err != nil || running != limit {
		t.Fatalf("%d of %d creates admitted, %d running (%v); want %d", ok, n, running, err, limit)
	}
}

// testTwoPlanesFiles: with one bucket (--blobs s3://…, SeaweedFS on loopback) for both planes,
// a File uploaded through one is read through the other, and deleted through the other it
// is gone for both, its bytes too.
func testTwoPlanesFiles(t *testing.T, dsn string) {
	s3 := s3test.Start(t)
	bucket := s3.NewBucket(t)
	planes := make([]*env, 2)
	stores := make([]blobs.Store, 2)
	for i := range planes {
		dir := t.TempDir()
		bs, err := blobs.NewS3(ctx, bucket, blobs.S3Options{StageDir: filepath.Join(dir, "blobs"), Getenv: func(k string) string { return s3test.Env[k] }})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = bs
		planes[i] = serve(t, dir, control.Options{Store: openPostgres(t, dsn), Host: controltest.New().On(nil), Blobs: bs,
			Config: testConfig(dir, nil), Image: control.Image{ID: "img1"}})
	}
	a, b := planes[0], planes[1]
	resp, err := a.svc.UploadFile(ctx, a.caller, "notes.txt", strings.NewReader("written through plane A"), "up-1")
	if err != nil {
		t.Fatal(err)
	}
	var f store.File
	if err := json.Unmarshal(resp.Body, &f); err != nil {
		t.Fatal(err)
	}
	_, rc, err := b.svc.OpenGraphFile(ctx, "main", f.ID)
	if err != nil {
		t.Fatalf("plane B opening plane A's File: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "written through plane A" {
		t.Fatalf("plane B read %q, %v", got, err)
	}
	// The retry of the upload, through the other plane, answers the same File.
	again, err := b.svc.UploadFile(ctx, b.caller, "notes.txt", strings.NewReader("written through plane A"), "up-1")
	if err != nil || !again.Replayed {
		t.Fatalf("retry through plane B: replayed %v, %v", again.Replayed, err)
	}
	if _, err := b.svc.DeleteFile(ctx, "main", f.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.svc.OpenGraphFile(ctx, "main", f.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("plane A after plane B's delete: %v, want NotFound", err)
	}
	if _, err := stores[0].Stat(ctx, f.SHA256); !errdefs.IsNotFound(err) {
		t.Fatalf("the bytes of the deleted File: %v, want NotFound", err)
	}
}
