// Package storetest is the one suite every store.Store implementation passes: SQLite now,
// PostgreSQL later, with the same cases.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Run runs the suite; open returns a fresh, migrated, empty store for each case.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Graphs", testGraphs},
		{"Keys", testKeys},
		{"Sandboxes", testSandboxes},
		{"Commands", testCommands},
		{"Templates", testTemplates},
		{"TemplatesConcurrent", testTemplatesConcurrent},
		{"Idempotency", testIdempotency},
		{"Audit", testAudit},
		{"Tx", testTx},
		{"Retention", testRetention},
		{"Pagination", testPagination},
		{"Files", testFiles},
		{"SandboxLabels", testSandboxLabels},
		{"IdempotencyDelete", testIdempotencyDelete},
		{"Snapshots", testSnapshots},
		{"Previews", testPreviews},
		{"PausedAndForked", testPausedAndForked},
		{"GraphUsage", testGraphUsage},
		{"DeleteFile", testDeleteFile},
		{"DeleteFileConcurrent", testDeleteFileConcurrent},
		{"TemplatesNamingFile", testTemplatesNamingFile},
		{"TemplateLayers", testTemplateLayers},
		{"TruncatedResult", testTruncatedResult},
		{"Egress", testEgress},
		{"Budgets", testBudgets},
		{"Sessions", testSessions},
		{"CheckpointArchives", testCheckpointArchives},
		{"Hosts", testHosts},
		{"Holders", testHolders},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

var ctx = context.Background()

// now is truncated to the store's precision.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func ptr[T any](v T) *T { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantClass(t *testing.T, err error, class errdefs.Class) {
	t.Helper()
	if err == nil || errdefs.ClassOf(err) != class {
		t.Fatalf("err = %v, want class %v", err, class)
	}
}

// getInGraph checks that get answers want in graph main, and not found in graph other.
func getInGraph[T any](t *testing.T, get func(ctx context.Context, graph, id string) (T, error), id string, want T) {
	t.Helper()
	got, err := get(ctx, "main", id)
	must(t, err)
	equal(t, got, want)
	_, err = get(ctx, "other", id)
	wantClass(t, err, errdefs.ClassNotFound)
}

func equal(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("got  %s\nwant %s", g, w)
	}
}

func testGraphs(t *testing.T, s store.Store) {
	at := now()
	must(t, s.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: at}))
	must(t, s.CreateGraph(ctx, store.Graph{Name: "other", CreatedAt: at}))
	wantClass(t, s.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: at}), errdefs.ClassConflict)
	g, err := s.GetGraph(ctx, "main")
	must(t, err)
	equal(t, g, store.Graph{Name: "main", CreatedAt: at})
	_, err = s.GetGraph(ctx, "nope")
	wantClass(t, err, errdefs.ClassNotFound)
	gs, err := s.ListGraphs(ctx)
	must(t, err)
	if len(gs) != 2 || gs[0].Name != "main" || gs[1].Name != "other" {
		t.Fatalf("ListGraphs = %+v", gs)
	}
}

func testKeys(t *testing.T, s store.Store) {
	k := store.Key{ID: ids.New(ids.Key), Name: "admin", Hash: "h1", Prefix: "lbb_sk_ab", Graphs: []string{"*"},
		Scopes: []string{store.ScopeAdmin}, CreatedAt: now()}
	must(t, s.CreateKey(ctx, k))
	dup := k
	dup.ID = ids.New(ids.Key)
	wantClass(t, s.CreateKey(ctx, dup), errdefs.ClassConflict)
	got, err := s.GetKeyByHash(ctx, "h1")
	must(t, err)
	equal(t, got, k)
	got, err = s.GetKey(ctx, k.ID)
	must(t, err)
	equal(t, got, k)
	_, err = s.GetKeyByHash(ctx, "nope")
	wantClass(t, err, errdefs.ClassNotFound)
	at := now()
	must(t, s.RevokeKey(ctx, k.ID, at))
	must(t, s.RevokeKey(ctx, k.ID, at.Add(time.Hour))) // twice is fine and keeps the first time
	got, _ = s.GetKey(ctx, k.ID)
	if got.RevokedAt == nil || !got.RevokedAt.Equal(at) {
		t.Fatalf("RevokedAt = %v, want %v", got.RevokedAt, at)
	}
	wantClass(t, s.RevokeKey(ctx, "key_nope", at), errdefs.ClassNotFound)
	if !k.HasGraph("anything") || !k.HasScope(store.ScopeSandboxesWrite) {
		t.Fatal("an admin key for * should have every graph and scope")
	}
	narrow := store.Key{Graphs: []string{"main"}, Scopes: []string{store.ScopeSandboxesRead}}
	if narrow.HasGraph("other") || narrow.HasScope(store.ScopeSandboxesWrite) || !narrow.HasScope(store.ScopeSandboxesRead) {
		t.Fatal("narrow key has too much")
	}
}

func newSandbox(graph string) store.Sandbox {
	return store.Sandbox{ID: ids.New(ids.Sandbox), Graph: graph, Status: store.SandboxStarting, OneCall: true,
		Base: "lbb/python", Limits: store.Limits{MemoryMiB: 512, CPUs: 1, Pids: 256, DiskMiB: 1024},
		EnvNames: []string{"TOKEN"}, Origin: store.Origin{Key: "key_1", Workflow: "wf"}, CreatedAt: now(), Host: "a"}
}

func testSandboxes(t *testing.T, s store.Store) {
	a := newSandbox("main")
	a.Template = &store.TemplateRef{ID: "sbt_1", Name: "normalize", Version: 3}
	a.Metadata = map[string]string{"team": "x"}
	a.Isolation = "gvisor"
	must(t, s.CreateSandbox(ctx, a))
	wantClass(t, s.CreateSandbox(ctx, a), errdefs.ClassConflict)
	getInGraph(t, s.GetSandbox, a.ID, a)

	b := newSandbox("main")
	b.Status = store.SandboxRunning
	must(t, s.CreateSandbox(ctx, b))
	c := newSandbox("other")
	must(t, s.CreateSandbox(ctx, c))
	running, held, err := s.CountSandboxes(ctx, "main")
	must(t, err)
	if running != 2 || held != 2 {
		t.Fatalf("running in main = %d, held %d, want 2 and 2", running, held)
	}
	// Both are one-call runs' sandboxes: no long-lived one counts.
	if running, held, err := s.CountLongLived(ctx, "main"); err != nil || running != 0 || held != 0 {
		t.Fatalf("long-lived in main = %d running, %d held (%v), want 0 and 0", running, held, err)
	}

	a.Status, a.EndReason, a.StartedAt, a.EndedAt = store.SandboxDestroyed, store.EndRunFinished, ptr(now()), ptr(now())
	a.Usage = store.Usage{VCPUMs: 12.5, GiBMs: 3}
	must(t, s.UpdateSandbox(ctx, a))
	got, _ := s.GetSandbox(ctx, "main", a.ID)
	equal(t, got, a)
	wrong := a
	wrong.Graph = "other"
	wantClass(t, s.UpdateSandbox(ctx, wrong), errdefs.ClassNotFound)

	list, _, err := s.ListSandboxes(ctx, "main", store.SandboxFilter{}, store.Page{})
	must(t, err)
	if len(list) != 2 || list[0].ID != b.ID || list[1].ID != a.ID {
		t.Fatalf("ListSandboxes = %v", list)
	}
	list, _, _ = s.ListSandboxes(ctx, "main", store.SandboxFilter{Status: store.SandboxRunning}, store.Page{})
	if len(list) != 1 || list[0].ID != b.ID {
		t.Fatalf("filtered ListSandboxes = %v", list)
	}
	byStatus, err := s.ListSandboxesByStatus(ctx, store.SandboxStarting, store.SandboxRunning)
	must(t, err)
	if len(byStatus) != 2 {
		t.Fatalf("ListSandboxesByStatus = %d sandboxes, want 2", len(byStatus))
	}
}

func testCommands(t *testing.T, s store.Store) {
	sb := newSandbox("main")
	must(t, s.CreateSandbox(ctx, sb))
	c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindRun, Language: "python",
		Code: "def run(i, c): return i", Input: json.RawMessage(`[1,2,3]`), Config: json.RawMessage(`{"unit":"cm"}`),
		Template: &store.TemplateRef{ID: "sbt_1", Name: "n", Version: 2}, EnvNames: []string{"A"}, TimeoutMs: 60000,
		Status: store.CommandRunning, IdempotencyKey: "sum-a", Origin: store.Origin{Key: "key_1"}, CreatedAt: now(), StartedAt: ptr(now())}
	must(t, s.CreateCommand(ctx, c))
	wantClass(t, s.CreateCommand(ctx, c), errdefs.ClassConflict)
	orphan := c
	orphan.ID, orphan.SandboxID = ids.New(ids.Command), "sbx_nope"
	wantClass(t, s.CreateCommand(ctx, orphan), errdefs.ClassNotFound)
	getInGraph(t, s.GetCommand, c.ID, c)

	c.Status, c.OK, c.Result, c.ExitCode = store.CommandSucceeded, true, json.RawMessage(`6`), ptr(0)
	c.Stdout = store.Output{Head: "hi\n", Tail: "", Bytes: 3}
	c.Stderr = store.Output{Head: "warn", Tail: "ing", Bytes: 70000}
	c.FinishedAt, c.DurationMs = ptr(now()), 9
	must(t, s.UpdateCommand(ctx, c))
	got, _ := s.GetCommand(ctx, "main", c.ID)
	equal(t, got, c)

	p := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindProcess,
		Argv: []string{"python", "x.py"}, Cwd: "/workspace", StdinBytes: 12, Status: store.CommandQueued, CreatedAt: now()}
	must(t, s.CreateCommand(ctx, p))
	got, _ = s.GetCommand(ctx, "main", p.ID)
	equal(t, got, p)

	list, _, err := s.ListCommands(ctx, "main", store.CommandFilter{SandboxID: sb.ID}, store.Page{})
	must(t, err)
	if len(list) != 2 || list[0].ID != p.ID {
		t.Fatalf("ListCommands = %v", list)
	}
	list, _, _ = s.ListCommands(ctx, "other", store.CommandFilter{}, store.Page{})
	if len(list) != 0 {
		t.Fatalf("another graph sees %d commands", len(list))
	}
	byStatus, err := s.ListCommandsByStatus(ctx, store.CommandQueued, store.CommandRunning)
	must(t, err)
	if len(byStatus) != 1 || byStatus[0].ID != p.ID {
		t.Fatalf("ListCommandsByStatus = %v", byStatus)
	}
}

func testTemplates(t *testing.T, s store.Store) {
	id := ids.New(ids.Template)
	v1, err := s.CreateTemplateVersion(ctx, store.Template{ID: id, Graph: "main", Name: "normalize", Base: "lbb/python",
		Code: "v1", Limits: store.Limits{MemoryMiB: 2048}, Isolation: "gvisor", TimeoutMs: 60000, Config: json.RawMessage(`{"unit":"cm"}`),
		Files: []store.TemplateFile{{File: "fil_1", Path: "data/units.csv"}}, CreatedAt: now(), CreatedBy: "key_1"})
	must(t, err)
	if v1.Version != 1 || v1.ID != id {
		t.Fatalf("first version = %d %s", v1.Version, v1.ID)
	}
	v2, err := s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "normalize", Base: "lbb/python", Code: "v2", CreatedAt: now()})
	must(t, err)
	if v2.Version != 2 || v2.ID != id {
		t.Fatalf("second version = %d %s, want 2 %s", v2.Version, v2.ID, id)
	}
	other, err := s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "other", Name: "normalize", Base: "lbb/node", Code: "o1", CreatedAt: now()})
	must(t, err)
	if other.Version != 1 || other.ID == id {
		t.Fatalf("another graph's template = %d %s", other.Version, other.ID)
	}
	got, err := s.GetTemplate(ctx, "main", "normalize", 0)
	must(t, err)
	equal(t, got, v2)
	got, err = s.GetTemplate(ctx, "main", "normalize", 1)
	must(t, err)
	equal(t, got, v1)
	_, err = s.GetTemplate(ctx, "main", "normalize", 3)
	wantClass(t, err, errdefs.ClassNotFound)
	_, err = s.GetTemplate(ctx, "main", "nope", 0)
	wantClass(t, err, errdefs.ClassNotFound)

	_, err = s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "alpha", Base: "lbb/shell", CreatedAt: now()})
	must(t, err)
	list, _, err := s.ListTemplates(ctx, "main", store.Page{})
	must(t, err)
	if len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "normalize" || list[1].Version != 2 {
		t.Fatalf("ListTemplates = %+v", list)
	}
	vs, err := s.ListTemplateVersions(ctx, "main", "normalize")
	must(t, err)
	if len(vs) != 2 || vs[0].Version != 2 || vs[1].Version != 1 {
		t.Fatalf("ListTemplateVersions = %+v", vs)
	}
	_, err = s.ListTemplateVersions(ctx, "main", "nope")
	wantClass(t, err, errdefs.ClassNotFound)
}

func testTemplatesConcurrent(t *testing.T, s store.Store) {
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "race", Base: "lbb/python", CreatedAt: now()})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	vs, err := s.ListTemplateVersions(ctx, "main", "race")
	must(t, err)
	if len(vs) != n || vs[0].Version != n {
		t.Fatalf("%d versions, newest %d; want %d", len(vs), vs[0].Version, n)
	}
	for _, v := range vs {
		if v.ID != vs[0].ID {
			t.Fatalf("versions have different ids: %s and %s", v.ID, vs[0].ID)
		}
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	r := store.Idempotency{Graph: "main", Key: "sum-a", Route: "POST /v1/sandboxes", RequestHash: "abc",
		State: store.IdempotencyRunning, CommandID: "cmd_1", SandboxID: "sbx_1", CreatedAt: now()}
	must(t, s.CreateIdempotency(ctx, r))
	wantClass(t, s.CreateIdempotency(ctx, r), errdefs.ClassConflict)
	other := r
	other.Graph = "other"
	must(t, s.CreateIdempotency(ctx, other)) // keys are per graph
	got, err := s.GetIdempotency(ctx, "main", "sum-a")
	must(t, err)
	if got.ResponseBody == nil {
		got.ResponseBody = r.ResponseBody
	}
	equal(t, got, r)
	r.State, r.ResponseStatus, r.ResponseBody, r.CompletedAt = store.IdempotencyDone, 200, []byte(`{"ok":true}`), ptr(now())
	must(t, s.UpdateIdempotency(ctx, r))
	got, err = s.GetIdempotencyByCommand(ctx, "cmd_1")
	must(t, err)
	if got.Graph != "main" {
		got, _ = s.GetIdempotency(ctx, "main", "sum-a")
	}
	equal(t, got, r)
	_, err = s.GetIdempotency(ctx, "main", "nope")
	wantClass(t, err, errdefs.ClassNotFound)
}

func testAudit(t *testing.T, s store.Store) {
	for i, g := range []string{"main", "other", "main"} {
		must(t, s.AppendAudit(ctx, store.AuditEntry{ID: ids.New(ids.Audit), Graph: g, KeyID: "key_1", Method: "POST",
			Route: "POST /v1/sandboxes", Path: "/v1/sandboxes", Target: fmt.Sprintf("sbx_%d", i), Status: 200, RequestID: "req_1", At: now()}))
	}
	all, _, err := s.ListAudit(ctx, "", store.Page{})
	must(t, err)
	if len(all) != 3 || all[0].Target != "sbx_2" {
		t.Fatalf("ListAudit = %+v", all)
	}
	main, _, _ := s.ListAudit(ctx, "main", store.Page{})
	if len(main) != 2 {
		t.Fatalf("ListAudit(main) = %d entries", len(main))
	}
}

func testTx(t *testing.T, s store.Store) {
	boom := errors.New("boom")
	sb := newSandbox("main")
	err := s.WithTx(ctx, func(q store.Queries) error {
		if err := q.CreateSandbox(ctx, sb); err != nil {
			return err
		}
		if _, err := q.GetSandbox(ctx, "main", sb.ID); err != nil {
			return fmt.Errorf("a transaction must see its own writes: %w", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithTx = %v, want boom", err)
	}
	_, err = s.GetSandbox(ctx, "main", sb.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	must(t, s.WithTx(ctx, func(q store.Queries) error { return q.CreateSandbox(ctx, sb) }))
	_, err = s.GetSandbox(ctx, "main", sb.ID)
	must(t, err)
}

func testRetention(t *testing.T, s store.Store) {
	old := now().Add(-48 * time.Hour)
	mk := func(oneCall bool, ended *time.Time) (store.Sandbox, store.Command) {
		sb := newSandbox("main")
		sb.OneCall, sb.EndedAt, sb.Status = oneCall, ended, store.SandboxDestroyed
		must(t, s.CreateSandbox(ctx, sb))
		c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindRun, Status: store.CommandSucceeded,
			Stdout: store.Output{Head: "out", Bytes: 3}, Stderr: store.Output{Tail: "err", Bytes: 3}, CreatedAt: old, FinishedAt: ended}
		must(t, s.CreateCommand(ctx, c))
		return sb, c
	}
	oldSb, oldCmd := mk(true, &old)
	_, liveCmd := mk(false, &old) // not a one-call run: output kept with the sandbox
	newSb, newCmd := mk(true, ptr(now()))

	expired, err := s.ExpireRunOutput(ctx, now().Add(-time.Hour), 100)
	must(t, err)
	equal(t, expired, []string{oldCmd.ID})
	got, _ := s.GetCommand(ctx, "main", oldCmd.ID)
	if got.Stdout.Head != "" || got.Stderr.Tail != "" || !got.Stdout.Expired || got.Stdout.Bytes != 3 {
		t.Fatalf("expired output = %+v %+v", got.Stdout, got.Stderr)
	}
	got, _ = s.GetCommand(ctx, "main", liveCmd.ID)
	if got.Stdout.Head != "out" {
		t.Fatal("output of a command outside a one-call run expired")
	}

	n, err := s.DeleteEndedSandboxes(ctx, now().Add(-time.Hour), 100)
	must(t, err)
	if n != 2 {
		t.Fatalf("deleted %d sandboxes, want 2", n)
	}
	_, err = s.GetSandbox(ctx, "main", oldSb.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	_, err = s.GetCommand(ctx, "main", oldCmd.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	_, err = s.GetSandbox(ctx, "main", newSb.ID)
	must(t, err)
	_, err = s.GetCommand(ctx, "main", newCmd.ID)
	must(t, err)
}

func testPagination(t *testing.T, s store.Store) {
	var want []string
	for range 7 {
		sb := newSandbox("main")
		must(t, s.CreateSandbox(ctx, sb))
		want = append([]string{sb.ID}, want...)
	}
	got, pages := pageThrough(t, s, store.SandboxFilter{}, 3)
	equal(t, got, want)
	if pages != 3 {
		t.Fatalf("%d pages, want 3", pages)
	}
}

// pageThrough lists the sandboxes of graph main that f matches, limit a page, following
// the cursors to the end: their ids and the number of pages.
func pageThrough(t *testing.T, s store.Store, f store.SandboxFilter, limit int) (got []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		list, next, err := s.ListSandboxes(ctx, "main", f, store.Page{Limit: limit, Cursor: cursor})
		must(t, err)
		pages++
		for _, sb := range list {
			got = append(got, sb.ID)
		}
		if next == "" {
			return got, pages
		}
		cursor = next
	}
}

func testFiles(t *testing.T, s store.Store) {
	at := now()
	a := store.File{ID: ids.New(ids.File), Graph: "main", SHA256: "aa", Size: 3, Name: "a.txt",
		Origin: store.FileOrigin{Kind: store.FileFromSandbox, Sandbox: "sbx_1", Path: "out/a.txt", Key: "key_1"}, CreatedAt: at}
	b := store.File{ID: ids.New(ids.File), Graph: "main", SHA256: "aa", Size: 3, Origin: store.FileOrigin{Kind: store.FileFromUpload}, CreatedAt: at}
	c := store.File{ID: ids.New(ids.File), Graph: "other", SHA256: "cc", Size: 1, CreatedAt: at}
	for _, f := range []store.File{a, b, c} {
		must(t, s.CreateFile(ctx, f))
	}
	wantClass(t, s.CreateFile(ctx, a), errdefs.ClassConflict)
	getInGraph(t, s.GetFile, a.ID, a)
	got, err := s.GetFileBySHA256(ctx, "main", "aa")
	must(t, err)
	equal(t, got.ID, b.ID) // the newest
	_, err = s.GetFileBySHA256(ctx, "main", "cc")
	wantClass(t, err, errdefs.ClassNotFound)
	page, next, err := s.ListFiles(ctx, "main", store.Page{Limit: 1})
	must(t, err)
	equal(t, len(page), 1)
	equal(t, page[0].ID, b.ID)
	page, next, err = s.ListFiles(ctx, "main", store.Page{Limit: 1, Cursor: next})
	must(t, err)
	equal(t, page[0].ID, a.ID)
	equal(t, next, "")
}

func testSandboxLabels(t *testing.T, s store.Store) {
	at := now()
	var want []string
	for i := 0; i < 700; i++ {
		md := map[string]string{"team": "b"}
		if i%100 == 0 {
			md = map[string]string{"team": "a", "i": fmt.Sprint(i)}
		}
		sb := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxRunning, Base: "lbb/python", Metadata: md, CreatedAt: at}
		must(t, s.CreateSandbox(ctx, sb))
		if i%100 == 0 {
			want = append([]string{sb.ID}, want...)
		}
	}
	got, _ := pageThrough(t, s, store.SandboxFilter{Labels: map[string]string{"team": "a"}}, 3)
	equal(t, got, want)
	page, _, err := s.ListSandboxes(ctx, "main", store.SandboxFilter{Labels: map[string]string{"team": "a", "i": "300"}}, store.Page{})
	must(t, err)
	equal(t, len(page), 1)
	page, _, err = s.ListSandboxes(ctx, "main", store.SandboxFilter{Status: store.SandboxStopped, Labels: map[string]string{"team": "a"}}, store.Page{})
	must(t, err)
	equal(t, len(page), 0)
}

func testIdempotencyDelete(t *testing.T, s store.Store) {
	at := now()
	r := store.Idempotency{Graph: "main", Key: "k", Route: "POST /v1/files", RequestHash: "h", State: store.IdempotencyRunning, CreatedAt: at}
	must(t, s.CreateIdempotency(ctx, r))
	running, err := s.ListIdempotencyByState(ctx, store.IdempotencyRunning)
	must(t, err)
	equal(t, len(running), 1)
	must(t, s.DeleteIdempotency(ctx, "main", "k"))
	wantClass(t, s.DeleteIdempotency(ctx, "main", "k"), errdefs.ClassNotFound)
	_, err = s.GetIdempotency(ctx, "main", "k")
	wantClass(t, err, errdefs.ClassNotFound)
	must(t, s.CreateIdempotency(ctx, r))
}

func testPreviews(t *testing.T, s store.Store) {
	sb := newSandbox("main")
	must(t, s.CreateSandbox(ctx, sb))
	t0 := now()
	mk := func(exp time.Time) store.Preview {
		p := store.Preview{ID: ids.New(ids.Preview), Graph: "main", SandboxID: sb.ID, Port: 8000, ExpiresAt: exp, CreatedAt: t0,
			Origin: store.Origin{Key: "key_1"}}
		must(t, s.CreatePreview(ctx, p))
		return p
	}
	old, live := mk(t0.Add(-48*time.Hour)), mk(t0.Add(time.Hour))
	got, err := s.GetPreview(ctx, live.ID)
	if err != nil || got.SandboxID != sb.ID || got.Port != 8000 || !got.ExpiresAt.Equal(live.ExpiresAt) || got.Origin.Key != "key_1" {
		t.Fatalf("get: %+v %v", got, err)
	}
	l, _, err := s.ListPreviews(ctx, "main", sb.ID, store.Page{})
	if err != nil || len(l) != 2 || l[0].ID != live.ID {
		t.Fatalf("list: %+v %v", l, err)
	}
	if l, _, _ := s.ListPreviews(ctx, "other", sb.ID, store.Page{}); len(l) != 0 {
		t.Fatalf("another graph lists %+v", l)
	}
	if n, err := s.DeleteExpiredPreviews(ctx, t0.Add(-24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("delete expired: %d %v", n, err)
	}
	if _, err := s.GetPreview(ctx, old.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("expired preview: %v", err)
	}
	if err := s.DeletePreview(ctx, "other", live.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("delete of another graph: %v", err)
	}
	must(t, s.DeletePreview(ctx, "main", live.ID))
	if _, err := s.GetPreview(ctx, live.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("deleted preview: %v", err)
	}
}

func testSnapshots(t *testing.T, s store.Store) {
	sb := newSandbox("main")
	sb.OneCall, sb.Status = false, store.SandboxRunning
	must(t, s.CreateSandbox(ctx, sb))
	other := newSandbox("main")
	other.OneCall, other.Status = false, store.SandboxRunning
	must(t, s.CreateSandbox(ctx, other))
	mk := func(sandboxID string, md map[string]string) store.Snapshot {
		sn := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: "main", SandboxID: sandboxID, Isolation: "gvisor", Memory: true,
			SizeBytes: 1 << 20, CreatedAt: now(), DurationMs: 152.25, Metadata: md}
		must(t, s.CreateSnapshot(ctx, sn))
		return sn
	}
	a := mk(sb.ID, map[string]string{"step": "1"})
	b := mk(sb.ID, nil)
	c := mk(other.ID, nil)
	wantClass(t, s.CreateSnapshot(ctx, a), errdefs.ClassConflict)
	getInGraph(t, s.GetSnapshot, a.ID, a)

	list, next, err := s.ListSnapshots(ctx, "main", sb.ID, store.Page{Limit: 1})
	must(t, err)
	if len(list) != 1 || list[0].ID != b.ID || next != b.ID {
		t.Fatalf("first page = %v, next %q", list, next)
	}
	list, next, err = s.ListSnapshots(ctx, "main", sb.ID, store.Page{Limit: 1, Cursor: next})
	must(t, err)
	if len(list) != 1 || list[0].ID != a.ID || next != "" {
		t.Fatalf("second page = %v, next %q", list, next)
	}
	if list, _, _ := s.ListSnapshots(ctx, "other", sb.ID, store.Page{}); len(list) != 0 {
		t.Fatalf("another graph lists main's snapshots: %v", list)
	}

	// A sandbox that ends leaves its snapshots to be swept; a running one keeps them.
	ended, err := s.ListEndedSnapshots(ctx, 10)
	must(t, err)
	equal(t, len(ended), 0)
	other.Status, other.EndedAt = store.SandboxDestroyed, ptr(now())
	must(t, s.UpdateSandbox(ctx, other))
	ended, err = s.ListEndedSnapshots(ctx, 10)
	must(t, err)
	if len(ended) != 1 || ended[0].ID != c.ID {
		t.Fatalf("ended snapshots = %v, want %s", ended, c.ID)
	}
	// …as does one whose record the janitor removed.
	orphan := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: "main", SandboxID: ids.New(ids.Sandbox), Isolation: "gvisor", CreatedAt: now()}
	must(t, s.CreateSnapshot(ctx, orphan))
	ended, _ = s.ListEndedSnapshots(ctx, 10)
	equal(t, len(ended), 2)

	must(t, s.DeleteSnapshot(ctx, "main", a.ID))
	wantClass(t, s.DeleteSnapshot(ctx, "main", a.ID), errdefs.ClassNotFound)
	wantClass(t, s.DeleteSnapshot(ctx, "other", b.ID), errdefs.ClassNotFound)
	_, err = s.GetSnapshot(ctx, "main", a.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	list, _, _ = s.ListSnapshots(ctx, "main", sb.ID, store.Page{})
	if len(list) != 1 || list[0].ID != b.ID {
		t.Fatalf("after delete = %v", list)
	}
}

func testPausedAndForked(t *testing.T, s store.Store) {
	sb := newSandbox("main")
	sb.OneCall, sb.Status = false, store.SandboxRunning
	sb.ForkedFrom = &store.ForkedFrom{Sandbox: ids.New(ids.Sandbox), Snapshot: ids.New(ids.Snapshot)}
	must(t, s.CreateSandbox(ctx, sb))
	got, err := s.GetSandbox(ctx, "main", sb.ID)
	must(t, err)
	equal(t, got, sb)
	sb.Status, sb.PausedAt, sb.PauseMode = store.SandboxPaused, ptr(now()), store.PauseCheckpoint
	must(t, s.UpdateSandbox(ctx, sb))
	got, _ = s.GetSandbox(ctx, "main", sb.ID)
	equal(t, got, sb)
	if running, held, _ := s.CountSandboxes(ctx, "main"); running != 0 || held != 1 {
		t.Fatalf("a paused sandbox: %d running, %d held; want 0 and 1", running, held)
	}
	paused, err := s.ListSandboxesByStatus(ctx, store.SandboxPaused)
	must(t, err)
	if len(paused) != 1 || paused[0].PauseMode != store.PauseCheckpoint {
		t.Fatalf("paused = %+v", paused)
	}
	sb.Status, sb.PausedAt, sb.PauseMode = store.SandboxRunning, nil, ""
	must(t, s.UpdateSandbox(ctx, sb))
	got, _ = s.GetSandbox(ctx, "main", sb.ID)
	equal(t, got, sb)
}

func testGraphUsage(t *testing.T, s store.Store) {
	mk := func(graph, status, mode string, diskMiB, checkpoint int64) {
		sb := newSandbox(graph)
		sb.OneCall, sb.Status, sb.PauseMode, sb.Limits.DiskMiB, sb.CheckpointBytes = false, status, mode, diskMiB, checkpoint
		if status == store.SandboxDestroyed {
			sb.EndedAt = ptr(now())
		}
		must(t, s.CreateSandbox(ctx, sb))
	}
	mk("main", store.SandboxRunning, "", 1024, 0)
	mk("main", store.SandboxStarting, "", 1024, 0)
	mk("main", store.SandboxStopped, "", 100, 0)
	mk("main", store.SandboxStopped, "", 200, 0)
	mk("main", store.SandboxPaused, store.PauseCheckpoint, 1024, 5000)
	mk("main", store.SandboxPaused, store.PauseFreeze, 1024, 0)
	mk("main", store.SandboxDestroyed, "", 1024, 0)
	mk("other", store.SandboxStopped, "", 1024, 0)
	// A one-call run's sandbox counts toward no cap of the graph's.
	oneCall := newSandbox("main")
	oneCall.OneCall, oneCall.Status = true, store.SandboxRunning
	must(t, s.CreateSandbox(ctx, oneCall))
	for i, size := range []int64{10, 20} {
		must(t, s.CreateFile(ctx, store.File{ID: ids.New(ids.File), Graph: "main", SHA256: fmt.Sprint("f", i), Size: size, CreatedAt: now()}))
	}
	must(t, s.CreateFile(ctx, store.File{ID: ids.New(ids.File), Graph: "other", SHA256: "f0", Size: 10, CreatedAt: now()}))
	must(t, s.CreateSnapshot(ctx, store.Snapshot{ID: ids.New(ids.Snapshot), Graph: "main", SandboxID: "sbx_1", Isolation: "gvisor", SizeBytes: 7, CreatedAt: now()}))
	got, err := s.GraphUsage(ctx, "main")
	must(t, err)
	equal(t, got, store.GraphUsage{Running: 2, Sandboxes: 6, Stopped: 2, StoppedDiskBytes: 300 << 20, Checkpoints: 1, CheckpointBytes: 5000,
		Files: 2, FileBytes: 30, Snapshots: 1, SnapshotBytes: 7})
	running, held, err := s.CountSandboxes(ctx, "main")
	must(t, err)
	if running != 3 || held != 7 { // every sandbox, the one-call run's too
		t.Fatalf("CountSandboxes = %d running, %d held; want 3 and 7", running, held)
	}
	if running, held, err := s.CountLongLived(ctx, "main"); err != nil || running != 2 || held != 6 {
		t.Fatalf("CountLongLived = %d running, %d held (%v); want 2 and 6", running, held, err)
	}
	got, err = s.GraphUsage(ctx, "none")
	must(t, err)
	equal(t, got, store.GraphUsage{})
}

// testDeleteFile: a blob is named while any File of any graph names it; the last DeleteFile
// says so.
func testDeleteFile(t *testing.T, s store.Store) {
	a := store.File{ID: ids.New(ids.File), Graph: "main", SHA256: "aa", Size: 3, CreatedAt: now()}
	b := store.File{ID: ids.New(ids.File), Graph: "other", SHA256: "aa", Size: 3, CreatedAt: now()}
	must(t, s.CreateFile(ctx, a))
	must(t, s.CreateFile(ctx, b))
	_, _, err := s.DeleteFile(ctx, "other", a.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	got, last, err := s.DeleteFile(ctx, "main", a.ID)
	must(t, err)
	equal(t, got, a)
	equal(t, last, false)
	named, err := s.BlobNamed(ctx, "aa")
	must(t, err)
	equal(t, named, true)
	_, err = s.GetFile(ctx, "main", a.ID)
	wantClass(t, err, errdefs.ClassNotFound)
	var lastInTx bool
	must(t, s.WithTx(ctx, func(q store.Queries) error {
		_, lastInTx, err = q.DeleteFile(ctx, "other", b.ID)
		return err
	}))
	equal(t, lastInTx, true)
	named, err = s.BlobNamed(ctx, "aa")
	must(t, err)
	equal(t, named, false)
	// The bytes may be named again.
	must(t, s.CreateFile(ctx, store.File{ID: ids.New(ids.File), Graph: "main", SHA256: "aa", Size: 3, CreatedAt: now()}))
	named, _ = s.BlobNamed(ctx, "aa")
	equal(t, named, true)
}

// testDeleteFileConcurrent: files of the same bytes created while the last one is deleted
// leave either the new Files and a named blob, or nothing named — never a File whose blob
// a DeleteFile called last.
func testDeleteFileConcurrent(t *testing.T, s store.Store) {
	for round := 0; round < 20; round++ {
		sha := fmt.Sprint("race", round)
		old := store.File{ID: ids.New(ids.File), Graph: "main", SHA256: sha, Size: 1, CreatedAt: now()}
		must(t, s.CreateFile(ctx, old))
		var wg sync.WaitGroup
		var last bool
		var derr, cerr error
		fresh := store.File{ID: ids.New(ids.File), Graph: "other", SHA256: sha, Size: 1, CreatedAt: now()}
		wg.Add(2)
		go func() {
			defer wg.Done()
			derr = s.WithTx(ctx, func(q store.Queries) error {
				var err error
				_, last, err = q.DeleteFile(ctx, "main", old.ID)
				return err
			})
		}()
		go func() { defer wg.Done(); cerr = s.CreateFile(ctx, fresh) }()
		wg.Wait()
		must(t, derr)
		must(t, cerr)
		named, err := s.BlobNamed(ctx, sha)
		must(t, err)
		if !named {
			t.Fatalf("round %d: a File names %s but the store says nothing does", round, sha)
		}
		if last {
			// The delete ran first, alone: the new File came after, and names the bytes again.
			if _, err := s.GetFile(ctx, "other", fresh.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func testTemplatesNamingFile(t *testing.T, s store.Store) {
	id := ids.New(ids.Template)
	tpl := store.Template{ID: id, Graph: "main", Name: "a", Base: "lbb/python", CreatedAt: now(),
		Files: []store.TemplateFile{{File: "fil_1", Path: "x"}, {File: "abcd", Path: "y"}}}
	_, err := s.CreateTemplateVersion(ctx, tpl)
	must(t, err)
	tpl.Files = nil
	_, err = s.CreateTemplateVersion(ctx, tpl)
	must(t, err)
	other := tpl
	other.Graph, other.Files = "other", []store.TemplateFile{{File: "fil_1", Path: "x"}}
	_, err = s.CreateTemplateVersion(ctx, other)
	must(t, err)
	got, err := s.TemplatesNamingFile(ctx, "main", "fil_1", "ABCD")
	must(t, err)
	equal(t, got, []store.TemplateRef{{ID: id, Name: "a", Version: 1}})
	got, err = s.TemplatesNamingFile(ctx, "main", "fil_2", "fil_")
	must(t, err)
	equal(t, len(got), 0)
}

func testTruncatedResult(t *testing.T, s store.Store) {
	sb := newSandbox("main")
	must(t, s.CreateSandbox(ctx, sb))
	c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindRun, Status: store.CommandRunning, CreatedAt: now()}
	must(t, s.CreateCommand(ctx, c))
	c.Status, c.ResultTruncated, c.ResultBytes, c.ResultFile = store.CommandSucceeded, true, 5<<20, "fil_1"
	must(t, s.UpdateCommand(ctx, c))
	got, err := s.GetCommand(ctx, "main", c.ID)
	must(t, err)
	equal(t, got, c)
}

// testEgress: a sandbox's egress, its grant and git clone, what its egress carried, a
// command's, a template's, a derived key and its cap on runs, an audit entry's actor.
func testEgress(t *testing.T, s store.Store) {
	must(t, s.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: now()}))
	exp := now().Add(time.Hour)
	k := store.Key{ID: ids.New(ids.Key), Name: "grant", Hash: "hg", Prefix: "lbb_sk_gr", Graphs: []string{"main"},
		Scopes: []string{store.ScopeSandboxesRead}, CreatedAt: now(), Parent: "key_parent", Sandbox: "sbx_1", ExpiresAt: &exp, MaxRuns: 2}
	must(t, s.CreateKey(ctx, k))
	got, err := s.GetKey(ctx, k.ID)
	must(t, err)
	equal(t, got, k)
	for i, want := range []bool{true, true, false, false} {
		ok, err := s.CountKeyRun(ctx, k.ID)
		must(t, err)
		if ok != want {
			t.Fatalf("run %d: counted %v, want %v", i+1, ok, want)
		}
	}
	if got, _ := s.GetKey(ctx, k.ID); got.Runs != 2 {
		t.Fatalf("runs %d, want 2", got.Runs)
	}

	sb := newSandbox("main")
	sb.Egress = &store.Egress{Mode: store.EgressAllowlist, Allow: []string{"example.org", "*.pkgs.example.org:443"}, QuotaBytes: 1 << 20}
	sb.API = &store.APIGrant{Scopes: []string{store.ScopeSandboxesRead}, MaxRuns: 3, Key: k.ID}
	sb.Git = &store.GitClone{URL: "https://example.org/r.git", Branch: "main", Depth: 1}
	must(t, s.CreateSandbox(ctx, sb))
	getInGraph(t, s.GetSandbox, sb.ID, sb)
	sb.Usage.Egress = &store.EgressUsage{BytesOut: 10, BytesIn: 20, Connections: 1, Refused: 1, QuotaExceeded: true,
		Destinations: []store.EgressDestination{{Host: "example.org", Port: 443, Connections: 1}, {Host: "x.test", Port: 80, Refused: 1}}}
	must(t, s.UpdateSandbox(ctx, sb))
	getInGraph(t, s.GetSandbox, sb.ID, sb)

	c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindProcess, Argv: []string{"curl"},
		Status: store.CommandRunning, Origin: store.Origin{Key: "key_1"}, CreatedAt: now()}
	must(t, s.CreateCommand(ctx, c))
	c.Status, c.Egress = store.CommandSucceeded, &store.EgressUsage{BytesIn: 5, Connections: 1}
	must(t, s.UpdateCommand(ctx, c))
	getInGraph(t, s.GetCommand, c.ID, c)

	tpl, err := s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "net", Base: "lbb/python",
		Egress: &store.Egress{Mode: store.EgressPublic, QuotaBytes: 5}, CreatedAt: now()})
	must(t, err)
	gotT, err := s.GetTemplate(ctx, "main", "net", 0)
	must(t, err)
	equal(t, gotT, tpl)

	e := store.AuditEntry{ID: ids.New(ids.Audit), Graph: "main", KeyID: k.ID, Method: "GET", Route: "GET /v1/sandboxes",
		Path: "/v1/sandboxes", Actor: sb.ID, Status: 200, RequestID: "req_1", At: now()}
	must(t, s.AppendAudit(ctx, e))
	list, _, err := s.ListAudit(ctx, "main", store.Page{})
	must(t, err)
	if len(list) != 1 || list[0].Actor != sb.ID {
		t.Fatalf("audit: %+v", list)
	}
}

// testTemplateLayers: a version keeps its recipe, layer and build; the build changes in place;
// TemplateLayers lists the layers any graph's versions name; a sandbox keeps its layer.
func testTemplateLayers(t *testing.T, s store.Store) {
	img := &store.ImageRecipe{Pip: []string{"polars"}, Run: []string{"echo hi"}, Files: []store.TemplateFile{{File: "fil_1", Path: "/opt/a"}}}
	v1, err := s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "pk", Base: "lbb/python",
		Image: img, Layer: "layer1", Build: &store.TemplateBuild{Status: store.BuildBuilding, StartedAt: now()}, CreatedAt: now()})
	must(t, err)
	_, err = s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "other", Name: "pk", Base: "lbb/python",
		Image: img, Layer: "layer2", CreatedAt: now()})
	must(t, err)
	_, err = s.CreateTemplateVersion(ctx, store.Template{ID: ids.New(ids.Template), Graph: "main", Name: "plain", Base: "lbb/python", CreatedAt: now()})
	must(t, err)
	got, err := s.GetTemplate(ctx, "main", "pk", 1)
	must(t, err)
	equal(t, got, v1)
	fin := now()
	b := store.TemplateBuild{Status: store.BuildFailed, Step: "run[0]", Error: "exited 1", Resolved: map[string]string{"pip polars": "1.2"},
		StartedAt: v1.Build.StartedAt, FinishedAt: &fin, DurationMs: 5}
	must(t, s.SetTemplateBuild(ctx, v1.ID, 1, b))
	got, err = s.GetTemplate(ctx, "main", "pk", 1)
	must(t, err)
	equal(t, *got.Build, b)
	wantClass(t, s.SetTemplateBuild(ctx, v1.ID, 9, b), errdefs.ClassNotFound)
	layers, err := s.TemplateLayers(ctx)
	must(t, err)
	sort.Strings(layers)
	if strings.Join(layers, ",") != "layer1,layer2" {
		t.Fatalf("TemplateLayers = %v", layers)
	}
	sb := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxRunning, Base: "lbb/python", Layer: "layer1", CreatedAt: now()}
	must(t, s.CreateSandbox(ctx, sb))
	gotSb, err := s.GetSandbox(ctx, "main", sb.ID)
	must(t, err)
	if gotSb.Layer != "layer1" {
		t.Fatalf("sandbox layer = %q", gotSb.Layer)
	}
}

// A session names one sandbox of a graph that has not ended; the name is free again once it
// has. A stopped sandbox's workspace archive keeps its blob named.
func testSessions(t *testing.T, s store.Store) {
	a := newSandbox("main")
	a.OneCall, a.Status, a.Session, a.Size = false, store.SandboxRunning, "work-1", "standard-2"
	a.Metadata = map[string]string{"team": "x"}
	must(t, s.CreateSandbox(ctx, a))
	bySession(t, s, "work-1", a)
	if _, err := s.GetSandboxBySession(ctx, "main", "work-2"); !errdefs.IsNotFound(err) {
		t.Fatalf("an unknown session: %v", err)
	}
	// Another graph may use the name; this one may not, twice.
	o := newSandbox("other")
	o.OneCall, o.Session = false, "work-1"
	must(t, s.CreateSandbox(ctx, o))
	dup := newSandbox("main")
	dup.OneCall, dup.Session = false, "work-1"
	wantClass(t, s.CreateSandbox(ctx, dup), errdefs.ClassConflict)

	sha := strings.Repeat("5e", 32)
	if named, err := s.BlobNamed(ctx, sha); err != nil || named {
		t.Fatalf("an archive no sandbox names: %v %v", named, err)
	}
	a.Status, a.EndReason = store.SandboxStopped, store.EndStopped
	a.Workspace = &store.WorkspaceArchive{SHA256: sha, Bytes: 12345, DiskBytes: 1 << 30, ArchivedAt: now()}
	must(t, s.UpdateSandbox(ctx, a))
	bySession(t, s, "work-1", a)
	if named, err := s.BlobNamed(ctx, sha); err != nil || !named {
		t.Fatalf("a stopped sandbox's archive: named %v %v", named, err)
	}

	// Destroyed: its archive and its name are free.
	a.Status, a.EndReason, a.EndedAt = store.SandboxDestroyed, store.EndDeleted, ptr(now())
	must(t, s.UpdateSandbox(ctx, a))
	if named, err := s.BlobNamed(ctx, sha); err != nil || named {
		t.Fatalf("a destroyed sandbox's archive: named %v %v", named, err)
	}
	if _, err := s.GetSandboxBySession(ctx, "main", "work-1"); !errdefs.IsNotFound(err) {
		t.Fatalf("a destroyed sandbox's session: %v", err)
	}
	must(t, s.CreateSandbox(ctx, dup))
	bySession(t, s, "work-1", dup)
	// The list of a session holds its sandboxes, the ended one too, newest first.
	got, _, err := s.ListSandboxes(ctx, "main", store.SandboxFilter{Session: "work-1"}, store.Page{})
	must(t, err)
	if len(got) != 2 || got[0].ID != dup.ID || got[1].ID != a.ID {
		t.Fatalf("the sandboxes of session work-1: %v", got)
	}
	if got, _, err := s.ListSandboxes(ctx, "main", store.SandboxFilter{Session: "work-1", Labels: map[string]string{"team": "x"}}, store.Page{}); err != nil || len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("the sandboxes of session work-1 labelled team=x: %v %v", got, err)
	}
}

// testCheckpointArchives: a paused sandbox's checkpoint archive and a snapshot's are kept on
// their records and name their blobs while the records do.
func testCheckpointArchives(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := newSandbox("main")
	a.OneCall, a.Status, a.PauseMode = false, store.SandboxPaused, store.PauseCheckpoint
	cp := &store.WorkspaceArchive{SHA256: strings.Repeat("c1", 32), Bytes: 10, DiskBytes: 20, ArchivedAt: now()}
	a.Checkpoint = cp
	must(t, s.CreateSandbox(ctx, a))
	got, err := s.GetSandbox(ctx, "main", a.ID)
	must(t, err)
	if got.Checkpoint == nil || *got.Checkpoint != *cp {
		t.Fatalf("the checkpoint archive: %+v", got.Checkpoint)
	}
	if named, err := s.BlobNamed(ctx, cp.SHA256); err != nil || !named {
		t.Fatalf("a paused sandbox's checkpoint: named %v %v", named, err)
	}
	a.Status, a.PauseMode, a.Checkpoint = store.SandboxRunning, "", nil
	must(t, s.UpdateSandbox(ctx, a))
	if named, err := s.BlobNamed(ctx, cp.SHA256); err != nil || named {
		t.Fatalf("a resumed sandbox's checkpoint: named %v %v", named, err)
	}

	ar := &store.WorkspaceArchive{SHA256: strings.Repeat("5a", 32), Bytes: 30, DiskBytes: 40, ArchivedAt: now()}
	sn := store.Snapshot{ID: ids.New(ids.Snapshot), Graph: "main", SandboxID: a.ID, Isolation: "gvisor", Memory: true, CreatedAt: now(), Archive: ar}
	must(t, s.CreateSnapshot(ctx, sn))
	gs, err := s.GetSnapshot(ctx, "main", sn.ID)
	must(t, err)
	if gs.Archive == nil || *gs.Archive != *ar {
		t.Fatalf("the snapshot's archive: %+v", gs.Archive)
	}
	if named, err := s.BlobNamed(ctx, ar.SHA256); err != nil || !named {
		t.Fatalf("a snapshot's archive: named %v %v", named, err)
	}
	must(t, s.DeleteSnapshot(ctx, "main", sn.ID))
	if named, err := s.BlobNamed(ctx, ar.SHA256); err != nil || named {
		t.Fatalf("a deleted snapshot's archive: named %v %v", named, err)
	}
}

func bySession(t *testing.T, s store.Store, session string, want store.Sandbox) {
	t.Helper()
	got, err := s.GetSandboxBySession(ctx, want.Graph, session)
	must(t, err)
	equal(t, got, want)
}

func testHosts(t *testing.T, s store.Store) {
	t0 := now()
	h := store.Host{ID: "a", URL: "http://127.0.0.1:1", State: store.HostUp, Capacity: json.RawMessage(`{"cpus":2}`), LastHeartbeat: t0, RegisteredAt: t0}
	must(t, s.PutHost(ctx, h))
	h.State, h.LastHeartbeat = store.HostLost, t0.Add(time.Second)
	must(t, s.PutHost(ctx, h))
	must(t, s.PutHost(ctx, store.Host{ID: "b", URL: "http://127.0.0.1:2", State: store.HostUp, LastHeartbeat: t0, RegisteredAt: t0}))
	hosts, err := s.ListHosts(ctx)
	must(t, err)
	if len(hosts) != 2 {
		t.Fatalf("hosts = %+v, want 2", hosts)
	}
	equal(t, hosts[0], h)
	// A joining host's token hash stays when the fleet records its state without it.
	must(t, s.PutHost(ctx, store.Host{ID: "c", State: store.HostAdded, RegisteredAt: t0, LastHeartbeat: t0, TokenHash: "abc"}))
	must(t, s.PutHost(ctx, store.Host{ID: "c", URL: "http://127.0.0.1:3", State: store.HostUp, RegisteredAt: t0, LastHeartbeat: t0}))
	must(t, s.PutHost(ctx, store.Host{ID: "c", State: store.HostUp, RegisteredAt: t0, LastHeartbeat: t0})) // keeps the URL
	hosts, err = s.ListHosts(ctx)
	must(t, err)
	if len(hosts) != 3 || hosts[2].TokenHash != "abc" || hosts[2].URL != "http://127.0.0.1:3" {
		t.Fatalf("host c = %+v, want its token hash kept", hosts[2:])
	}
	must(t, s.DeleteHost(ctx, "c"))
	must(t, s.DeleteHost(ctx, "c"))

	must(t, s.PutPlacement(ctx, store.Placement{ID: "sb1", Host: "a", Kind: store.PlacedSandbox, PlacedAt: t0}))
	must(t, s.PutPlacement(ctx, store.Placement{ID: "sn1", Host: "a", Kind: store.PlacedSnapshot, PlacedAt: t0}))
	must(t, s.PutPlacement(ctx, store.Placement{ID: "sb2", Host: "a", Kind: store.PlacedSandbox, PlacedAt: t0}))
	must(t, s.PutPlacement(ctx, store.Placement{ID: "sb2", Host: "b", Kind: store.PlacedSandbox, PlacedAt: t0}))
	p, err := s.GetPlacement(ctx, "sb2")
	must(t, err)
	equal(t, p, store.Placement{ID: "sb2", Host: "b", Kind: store.PlacedSandbox, PlacedAt: t0})
	onA, err := s.ListPlacements(ctx, "a")
	must(t, err)
	all, err := s.ListPlacements(ctx, "")
	must(t, err)
	if len(onA) != 2 || len(all) != 3 {
		t.Fatalf("placements on a %+v, all %+v", onA, all)
	}
	must(t, s.DeletePlacement(ctx, "sb1"))
	must(t, s.DeletePlacement(ctx, "sb1"))
	_, err = s.GetPlacement(ctx, "sb1")
	wantClass(t, err, errdefs.ClassNotFound)
}

// testHolders: a store opened for a control plane (SetHolder) stamps the sandboxes, commands
// and reservations it inserts; control planes heartbeat, one adopts a dead one once, takes
// over the adoptions it had not finished, and its finish moves the records to the adopter.
func testHolders(t *testing.T, s store.Store) {
	hs, ok := s.(interface{ SetHolder(string) })
	if !ok {
		t.Skip("the store cannot be opened for a control plane")
	}
	defer hs.SetHolder("")
	t0 := now()
	// Before holders (and with no holder): the holder "", a control plane dead from the start.
	old := newSandbox("main")
	must(t, s.CreateSandbox(ctx, old))
	hs.SetHolder("cp-a")
	sb := newSandbox("main")
	must(t, s.CreateSandbox(ctx, sb))
	c := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindProcess,
		Argv: []string{"true"}, Status: store.CommandRunning, CreatedAt: t0}
	must(t, s.CreateCommand(ctx, c))
	must(t, s.WithTx(ctx, func(q store.Queries) error { // in a transaction too
		return q.CreateIdempotency(ctx, store.Idempotency{Graph: "main", Key: "k1", Route: "POST /v1/run", RequestHash: "h",
			State: store.IdempotencyRunning, CreatedAt: t0})
	}))
	held := func(holder string) (sandboxes, commands, keys int) {
		t.Helper()
		sbs, err := s.ListSandboxesHeld(ctx, holder, store.SandboxStarting, store.SandboxRunning)
		must(t, err)
		cmds, err := s.ListCommandsHeld(ctx, holder, store.CommandRunning)
		must(t, err)
		rs, err := s.ListIdempotencyHeld(ctx, holder, store.IdempotencyRunning)
		must(t, err)
		return len(sbs), len(cmds), len(rs)
	}
	if a, b, c := held("cp-a"); a != 1 || b != 1 || c != 1 {
		t.Fatalf("cp-a holds %d sandboxes, %d commands, %d keys; want 1 each", a, b, c)
	}
	if a, b, c := held(""); a != 1 || b != 0 || c != 0 {
		t.Fatalf("the holder \"\" holds %d sandboxes, %d commands, %d keys; want 1, 0, 0", a, b, c)
	}

	planes, err := s.ListControlPlanes(ctx)
	must(t, err)
	if len(planes) != 1 || planes[0].ID != "" || planes[0].AdoptedBy != "" {
		t.Fatalf("control planes before any = %+v, want the row of \"\"", planes)
	}
	must(t, s.RegisterControlPlane(ctx, "cp-a", t0))
	must(t, s.RegisterControlPlane(ctx, "cp-b", t0))
	if ok, err := s.Heartbeat(ctx, "cp-a", t0.Add(time.Second)); err != nil || !ok {
		t.Fatalf("Heartbeat(cp-a) = %v %v", ok, err)
	}
	// Alive (heartbeat not before deadBefore): nobody adopts it.
	if won, err := s.AdoptControlPlane(ctx, "cp-a", "cp-b", t0.Add(time.Second), t0); err != nil || won {
		t.Fatalf("adopting a live control plane = %v %v", won, err)
	}
	if won, err := s.AdoptControlPlane(ctx, "cp-a", "cp-b", t0.Add(2*time.Second), t0); err != nil || !won {
		t.Fatalf("adopting a dead control plane = %v %v", won, err)
	}
	if won, err := s.AdoptControlPlane(ctx, "cp-a", "cp-c", t0.Add(2*time.Second), t0); err != nil || won {
		t.Fatalf("adopting it again = %v %v", won, err)
	}
	if ok, err := s.Heartbeat(ctx, "cp-a", t0.Add(3*time.Second)); err != nil || ok {
		t.Fatalf("the heartbeat of an adopted control plane = %v %v, want refused", ok, err)
	}
	must(t, s.FinishAdoption(ctx, "cp-a", t0.Add(3*time.Second)))
	if a, b, c := held("cp-b"); a != 1 || b != 1 || c != 1 {
		t.Fatalf("the adopter holds %d sandboxes, %d commands, %d keys; want 1 each", a, b, c)
	}
	if a, b, c := held("cp-a"); a+b+c != 0 {
		t.Fatalf("the adopted one still holds %d, %d, %d", a, b, c)
	}
	p, err := s.GetControlPlane(ctx, "cp-a")
	must(t, err)
	if p.AdoptedBy != "cp-b" || p.AdoptedAt == nil || p.RecoveredAt == nil {
		t.Fatalf("cp-a = %+v, want adopted by cp-b and recovered", p)
	}
	// A new life of cp-a: not adopted any more.
	must(t, s.RegisterControlPlane(ctx, "cp-a", t0.Add(4*time.Second)))
	if ok, err := s.Heartbeat(ctx, "cp-a", t0.Add(5*time.Second)); err != nil || !ok {
		t.Fatalf("Heartbeat of a new life = %v %v", ok, err)
	}

	// A start adopts its previous life (beating from then on, so that no peer takes it), and
	// a control plane that dies before it finishes is adopted with the adoptions it had not
	// finished ("" here).
	if won, err := s.AdoptControlPlane(ctx, "", "cp-b", t0, t0.Add(5*time.Second)); err != nil || !won {
		t.Fatalf("adopting the holder \"\" = %v %v", won, err)
	}
	if won, err := s.AdoptControlPlane(ctx, "cp-b", "cp-b", t0.Add(time.Hour), t0.Add(5*time.Second)); err != nil || !won {
		t.Fatalf("adopting its own previous life = %v %v", won, err)
	}
	if won, err := s.AdoptControlPlane(ctx, "cp-b", "cp-a", t0.Add(5*time.Second), t0.Add(6*time.Second)); err != nil || won {
		t.Fatalf("a peer adopting a start that beats = %v %v", won, err)
	}
	if won, err := s.AdoptControlPlane(ctx, "cp-b", "cp-a", t0.Add(6*time.Second), t0.Add(6*time.Second)); err != nil || !won {
		t.Fatalf("a peer adopting a start that died = %v %v", won, err)
	}
	p, err = s.GetControlPlane(ctx, "")
	must(t, err)
	if p.AdoptedBy != "cp-a" || p.RecoveredAt != nil {
		t.Fatalf("the holder \"\" = %+v, want its adoption taken over by cp-a", p)
	}
	must(t, s.FinishAdoption(ctx, "", t0.Add(7*time.Second)))
	must(t, s.FinishAdoption(ctx, "cp-b", t0.Add(7*time.Second)))
	if a, b, c := held("cp-a"); a != 2 || b != 1 || c != 1 {
		t.Fatalf("cp-a holds %d sandboxes, %d commands, %d keys; want 2, 1, 1", a, b, c)
	}
}
