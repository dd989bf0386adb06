package control_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

var agentBin string

func TestMain(m *testing.M) { testkit.Main(m, &agentBin) }

type env3 struct {
	*env
	drv runtime.Driver
}

// setup3 is a service with long-lived sandboxes on the local driver (real processes and
// files, no isolation, no root).
func setup3(t *testing.T, tweak func(*config.Config)) *env3 {
	t.Helper()
	dir := t.TempDir()
	return setup3On(t, dir, openStore(t, dir), local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, "sandboxes")}), tweak)
}

// setup3On is a service on drv over dir and st, its host agent in process; tweak adjusts
// its config.
func setup3On(t *testing.T, dir string, st store.Store, drv runtime.Driver, tweak func(*config.Config)) *env3 {
	t.Helper()
	bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	h := controltest.New().On(hostagent.NewLocal(hostagent.Options{Driver: drv, Rootfs: "/", Blobs: bs, DataDir: dir}))
	e := serve(t, dir, control.Options{Store: st, Host: h, Blobs: bs, Config: testConfig(dir, tweak), Image: control.Image{ID: "img1"}})
	return &env3{env: e, drv: drv}
}

func (e *env) create(t *testing.T, req control.CreateRequest) store.Sandbox {
	t.Helper()
	resp, err := e.svc.CreateSandbox(ctx, e.caller, req, "", "")
	return created(t, "create", resp, err)
}

// created is the sandbox a call answers that made one.
func created(t *testing.T, what string, resp control.Response, err error) store.Sandbox {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var sb store.Sandbox
	if err := json.Unmarshal(resp.Body, &sb); err != nil || resp.Outcome != idempotency.Created {
		t.Fatalf("%s: %d %s %v", what, resp.Outcome, resp.Body, err)
	}
	return sb
}

func (e *env3) exec(t *testing.T, sb string, req control.ExecRequest, key string) (store.Command, idempotency.Outcome) {
	t.Helper()
	resp, err := e.svc.Exec(ctx, e.caller, sb, req, key, "hash-"+key)
	if err != nil {
		t.Fatal(err)
	}
	var c store.Command
	if err := json.Unmarshal(resp.Body, &c); err != nil {
		t.Fatal(err)
	}
	return c, resp.Outcome
}

func ms(n int64) *int64 { return &n }

// TestRecoverLongLived: after a crash, a long-lived sandbox that was running is stopped
// with its disk kept and resumes; its running command is lost; one whose expiry passed is
// destroyed; one cut off while starting failed; a key of a call that ran no code is released.
func TestRecoverLongLived(t *testing.T) {
	e := setup3(t, nil)
	now := time.Now().UTC().Truncate(time.Millisecond)
	later, earlier := now.Add(10*time.Minute), now.Add(-time.Minute)
	mk := func(status string, exp time.Time, create bool) store.Sandbox {
		sb := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: status, Base: "lbb/python", Limits: store.Limits{MemoryMiB: 64},
			CreatedAt: now, ExpiresAt: &exp}
		if err := e.st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if create {
			if err := e.drv.Create(ctx, runtime.Spec{ID: sb.ID, Image: "/"}); err != nil {
				t.Fatal(err)
			}
		}
		return sb
	}
	running := mk(store.SandboxRunning, later, true)
	expired := mk(store.SandboxRunning, earlier, true)
	starting := mk(store.SandboxStarting, later, true)
	stopped := mk(store.SandboxStopped, later, true)
	stoppedExpired := mk(store.SandboxStopped, earlier, true)
	cmd := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: running.ID, Kind: store.KindProcess, Argv: []string{"sleep", "60"},
		Status: store.CommandRunning, CreatedAt: now, StartedAt: &now}
	if err := e.st.CreateCommand(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Idempotency{
		{Graph: "main", Key: "exec-1", Route: control.RouteExec, RequestHash: "h", State: store.IdempotencyRunning, CommandID: cmd.ID, SandboxID: running.ID, CreatedAt: now},
		{Graph: "main", Key: "keep-1", Route: control.RouteKeepFile, RequestHash: "h", State: store.IdempotencyRunning, CreatedAt: now},
	} {
		if err := e.st.CreateIdempotency(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := e.svc.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Stopped) != 1 || len(rec.Expired) != 2 || len(rec.Lost) != 1 || rec.Released != 1 {
		t.Fatalf("recovered: %+v", rec)
	}
	want := map[string][2]string{
		running.ID: {store.SandboxStopped, store.EndServerRestart}, expired.ID: {store.SandboxDestroyed, store.EndExpired},
		starting.ID: {store.SandboxFailed, store.EndLost}, stopped.ID: {store.SandboxStopped, ""}, stoppedExpired.ID: {store.SandboxDestroyed, store.EndExpired},
	}
	for id, w := range want {
		sb, _ := e.st.GetSandbox(ctx, "main", id)
		if sb.Status != w[0] || sb.EndReason != w[1] {
			t.Errorf("%s: %s/%s, want %s/%s", id, sb.Status, sb.EndReason, w[0], w[1])
		}
	}
	if held, _ := e.drv.List(ctx); len(held) != 2 {
		t.Errorf("the driver holds %v; want the two stopped sandboxes", held)
	}
	// The command is lost, and its key answers that, as a command record.
	resp, err := e.svc.Exec(ctx, e.caller, running.ID, control.ExecRequest{Argv: []string{"sleep", "60"}}, "exec-1", "h")
	if err != nil {
		t.Fatal(err)
	}
	var c store.Command
	json.Unmarshal(resp.Body, &c)
	if !resp.Replayed || c.ID != cmd.ID || c.Status != store.CommandLost {
		t.Fatalf("replay of the lost command: %s", resp.Body)
	}
	if _, err := e.st.GetIdempotency(ctx, "main", "keep-1"); !errdefs.IsNotFound(err) {
		t.Fatalf("the key of a call cut off: %v", err)
	}
	// The stopped sandbox resumes.
	sb, err := e.svc.ResumeSandbox(ctx, "main", running.ID)
	if err != nil || sb.Status != store.SandboxRunning || sb.EndReason != "" {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	if out, _ := e.exec(t, running.ID, control.ExecRequest{Argv: []string{"echo", "back"}, WaitMs: ms(30000)}, "exec-2"); out.Stdout.Tail != "back\n" {
		t.Fatalf("exec after resume: %+v", out)
	}
	if _, err := e.svc.ResumeSandbox(ctx, "main", expired.ID); !errdefs.IsConflict(err) {
		t.Fatalf("resume of an expired sandbox: %v", err)
	}
}

// TestExpiry: a sandbox ends at its expiry, commands and all.
func TestExpiry(t *testing.T) {
	e := setup3(t, nil)
	sb := e.create(t, control.CreateRequest{ExpiresInSeconds: 1})
	c, status := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"sleep", "60"}, WaitMs: ms(0)}, "bg")
	if status != idempotency.Accepted {
		t.Fatalf("%d %+v", status, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.st.GetSandbox(ctx, "main", sb.ID)
		if got.Status == store.SandboxDestroyed {
			if got.EndReason != store.EndExpired || got.EndedAt == nil {
				t.Fatalf("%+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not expired: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, _ := e.st.GetCommand(ctx, "main", c.ID); got.Status != store.CommandKilled || !strings.Contains(got.Error, "expired") {
		t.Fatalf("its command: %+v", got)
	}
}

// TestLevel3Validation: what a create or an exec refuses before anything starts.
func TestLevel3Validation(t *testing.T) {
	e := setup3(t, func(c *config.Config) { c.MaxRunningPerGraph = 1 })
	for _, tc := range []struct {
		req  control.CreateRequest
		code string
	}{
		{control.CreateRequest{ExpiresInSeconds: 99999}, errdefs.CodeLimitExceeded},
		{control.CreateRequest{ExpiresInSeconds: -1}, "invalid_request"},
		{control.CreateRequest{Base: "lbb/cobol"}, "invalid_request"},
		{control.CreateRequest{Template: "nope"}, "not_found"},
		{control.CreateRequest{Env: map[string]string{"1X": "y"}}, "invalid_request"},
		{control.CreateRequest{TimeoutMs: 5}, "invalid_request"},
		{control.CreateRequest{Limits: &store.Limits{MemoryMiB: 1 << 20}}, errdefs.CodeLimitExceeded},
	} {
		_, err := e.svc.CreateSandbox(ctx, e.caller, tc.req, "", "")
		wantCode(t, err, tc.code)
	}
	sb := e.create(t, control.CreateRequest{})
	_, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "", "")
	wantCode(t, err, errdefs.CodeTooManySandboxes)
	for _, tc := range []struct {
		req  control.ExecRequest
		key  string
		code string
	}{
		{control.ExecRequest{Argv: []string{"true"}}, "", errdefs.CodeIdempotencyKeyRequired},
		{control.ExecRequest{}, "k1", "invalid_request"},
		{control.ExecRequest{Argv: []string{"true"}, TimeoutMs: int64(2 * time.Hour / time.Millisecond)}, "k2", errdefs.CodeLimitExceeded},
		{control.ExecRequest{Argv: []string{"cat"}, Stdin: new(string), StdinBase64: "eA=="}, "k3", "invalid_request"},
		{control.ExecRequest{Argv: []string{"cat"}, StdinBase64: "%%%"}, "k4", "invalid_request"},
	} {
		_, err := e.svc.Exec(ctx, e.caller, sb.ID, tc.req, tc.key, "h")
		wantCode(t, err, tc.code)
	}
	// A command that cannot start fails, with no exit code.
	c, _ := e.exec(t, sb.ID, control.ExecRequest{Argv: []string{"/no/such/program"}, WaitMs: ms(30000)}, "k5")
	if c.Status != store.CommandFailed || c.ExitCode != nil || c.Error == "" {
		t.Fatalf("%+v", c)
	}
	// Another graph's sandbox is not found.
	other := control.Caller{Graph: "other", Key: e.caller.Key}
	if _, err := e.svc.Exec(ctx, other, sb.ID, control.ExecRequest{Argv: []string{"true"}}, "k6", "h"); !errdefs.IsNotFound(err) {
		t.Fatalf("cross-graph: %v", err)
	}
	if _, err := e.svc.StopSandbox(ctx, "other", sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("cross-graph stop: %v", err)
	}
}

// TestCreateOneCommit: a create's record, its key's answer and its audit entry are written
// together; the key replays the same sandbox, and the entry is there once, with the
// sandbox as its target and the answer's status.
func TestCreateOneCommit(t *testing.T) {
	e := setup3(t, nil)
	for i, key := range []string{"create-k", ""} {
		pa := control.NewPendingAudit(store.AuditEntry{ID: ids.New(ids.Audit), Graph: e.caller.Graph, Method: "POST", Route: "POST /v1/sandboxes"})
		actx := control.WithPendingAudit(ctx, pa)
		resp, err := e.svc.CreateSandbox(actx, e.caller, control.CreateRequest{}, key, "h")
		sb := created(t, "create", resp, err)
		if _, ok := pa.Take(); ok {
			t.Fatalf("create %d: the audit entry was left to the API edge", i)
		}
		if key != "" {
			r, err := e.st.GetIdempotency(ctx, e.caller.Graph, key)
			if err != nil || r.State != store.IdempotencyDone || r.ResponseStatus != 201 || !strings.Contains(string(r.ResponseBody), sb.ID) {
				t.Fatalf("the key after create: %+v %v", r, err)
			}
			again, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, key, "h")
			if got := created(t, "create again", again, err); got.ID != sb.ID {
				t.Fatalf("replay: %s, want %s", got.ID, sb.ID)
			}
		}
		entries, _, err := e.st.ListAudit(ctx, e.caller.Graph, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range entries {
			if a.Target == sb.ID {
				n++
				if a.Status != 201 || a.Route != "POST /v1/sandboxes" {
					t.Fatalf("audit entry: %+v", a)
				}
			}
		}
		if n != 1 {
			t.Fatalf("create %d: %d audit entries for %s, want 1", i, n, sb.ID)
		}
	}
}

// TestCreateSameKeyConcurrent: creates with one key at the same time make one sandbox. The
// key is written with the record (no reservation before the start): a call whose commit
// loses destroys the sandbox it started and answers the winner's, as a replay.
func TestCreateSameKeyConcurrent(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testCreateSameKey(t, setup3(t, nil)) })
	t.Run("PostgreSQL", func(t *testing.T) {
		srv := pgtest.Start(t)
		dir := t.TempDir()
		drv := local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, "sandboxes")})
		testCreateSameKey(t, setup3On(t, dir, openPostgres(t, srv.NewSchema(t)), drv, nil))
	})
}

func testCreateSameKey(t *testing.T, e *env3) {
	const n = 4
	var wg sync.WaitGroup
	resps := make([]control.Response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			resps[i], errs[i] = e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "same-create", "h")
		})
	}
	wg.Wait()
	var id string
	replayed := 0
	for i := range n {
		sb := created(t, "create", resps[i], errs[i])
		if id == "" {
			id = sb.ID
		} else if sb.ID != id {
			t.Fatalf("two sandboxes for one key: %s and %s", id, sb.ID)
		}
		if resps[i].Replayed {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Errorf("%d of %d answers were replays, want %d", replayed, n, n-1)
	}
	if list, _, err := e.st.ListSandboxes(ctx, "main", store.SandboxFilter{}, store.Page{}); err != nil || len(list) != 1 {
		t.Fatalf("records: %d %v", len(list), err)
	}
	if live, err := e.drv.List(ctx); err != nil || len(live) != 1 || live[0] != id {
		t.Fatalf("the driver holds %v (%v), want only %s", live, err, id)
	}
	// Another request under the same key is refused, as before.
	if _, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "same-create", "other"); errdefs.CodeOf(err) != errdefs.CodeIdempotencyKeyReused {
		t.Fatalf("another request under the key: %v", err)
	}
}
