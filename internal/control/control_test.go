package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api/errhttp"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

var ctx = context.Background()

type env struct {
	svc    *control.Service
	st     store.Store
	runner *controltest.Runner
	caller control.Caller
	dir    string
}

func setup(t *testing.T, tweak func(*config.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	return setupOn(t, dir, openStore(t, dir), controltest.New(), tweak)
}

func setupOn(t *testing.T, dir string, st store.Store, r *controltest.Runner, tweak func(*config.Config)) *env {
	t.Helper()
	e := serve(t, dir, control.Options{Store: st, Host: r.On(nil), Config: testConfig(dir, tweak),
		Image: control.Image{ID: "img1", Versions: map[string]string{"python": "3.13.5", "node": "24.1.0"}}})
	e.runner = r
	return e
}

// openStore opens a SQLite store in dir, closed when the test ends.
func openStore(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// testConfig is the default config on dir with a short shutdown grace; tweak adjusts it.
func testConfig(dir string, tweak func(*config.Config)) config.Config {
	cfg := config.Default()
	cfg.DataDir, cfg.ShutdownGrace = dir, 200*time.Millisecond
	if tweak != nil {
		tweak(&cfg)
	}
	return cfg
}

// serve starts a service on o over dir, shut down when the test ends, and calls it as the
// admin in graph main (a restarted service's admin key is the one it saved).
func serve(t *testing.T, dir string, o control.Options) *env {
	t.Helper()
	svc := control.New(o)
	t.Cleanup(func() { svc.Shutdown(ctx) })
	secret, err := svc.Bootstrap(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if secret == "" {
		b, err := os.ReadFile(filepath.Join(dir, control.AdminKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		secret = strings.TrimSpace(string(b))
	}
	k, err := svc.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	return &env{svc: svc, st: o.Store, caller: control.Caller{Graph: "main", Key: k}, dir: dir}
}

func run(code string, input string) control.CreateRequest {
	return control.CreateRequest{Run: &control.RunBody{Code: code, Input: json.RawMessage(input)}}
}

func decodeResult(t *testing.T, resp control.Response) control.RunResult {
	t.Helper()
	var r control.RunResult
	if err := json.Unmarshal(resp.Body, &r); err != nil {
		t.Fatalf("decoding %s: %v", resp.Body, err)
	}
	return r
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if errdefs.CodeOf(err) != code {
		t.Fatalf("err = %v (code %s), want code %s", err, errdefs.CodeOf(err), code)
	}
}

func TestRunAndReplay(t *testing.T) {
	e := setup(t, nil)
	resp, err := e.svc.Run(ctx, e.caller, run("def run(i, c): return i", "[1,2,3]"), "k1", "h1")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResult(t, resp)
	if resp.Outcome != idempotency.Done || resp.Replayed || !r.OK || string(r.Result) != "[1,2,3]" || r.Status != store.CommandSucceeded {
		t.Fatalf("first call: %d replayed=%v %s", resp.Outcome, resp.Replayed, resp.Body)
	}
	again, err := e.svc.Run(ctx, e.caller, run("def run(i, c): return i", "[1,2,3]"), "k1", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || string(again.Body) != string(resp.Body) || again.Outcome != idempotency.Done {
		t.Fatalf("replay: %d replayed=%v %s", again.Outcome, again.Replayed, again.Body)
	}
	_, err = e.svc.Run(ctx, e.caller, run("other", "1"), "k1", "h2")
	wantCode(t, err, errdefs.CodeIdempotencyKeyReused)
	if errhttp.Status(err) != 422 {
		t.Fatalf("reused key: status %d", errhttp.Status(err))
	}
	if n := e.runner.Runs(r.Command); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	// The same key in another graph is another key.
	if _, err := e.svc.CreateKey(ctx, "", control.KeyRequest{Graphs: []string{"other"}}); err != nil {
		t.Fatal(err)
	}
	other := e.caller
	other.Graph = "other"
	resp2, err := e.svc.Run(ctx, other, run("x", "1"), "k1", "h1")
	if err != nil || resp2.Replayed {
		t.Fatalf("other graph: %v replayed=%v", err, resp2.Replayed)
	}
	// Records: one sandbox ended run_finished, one command, the idempotency key on both.
	cmd, err := e.st.GetCommand(ctx, "main", r.Command)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.st.GetSandbox(ctx, "main", r.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.IdempotencyKey != "k1" || cmd.Origin.Key != e.caller.Key.ID || string(cmd.Config) != "{}" {
		t.Fatalf("command record: %+v", cmd)
	}
	if sb.Status != store.SandboxDestroyed || sb.EndReason != store.EndRunFinished || sb.EndedAt == nil || !sb.OneCall || sb.Image != "img1" {
		t.Fatalf("sandbox record: %+v", sb)
	}
	if _, err := e.st.GetCommand(ctx, "other", r.Command); !errdefs.IsNotFound(err) {
		t.Fatalf("another graph reads the command: %v", err)
	}
}

func TestRunValidation(t *testing.T) {
	e := setup(t, nil)
	big := int64(1 << 20)
	for _, tc := range []struct {
		name string
		req  control.CreateRequest
		key  string
		code string
	}{
		{"no key", run("x", "1"), "", errdefs.CodeIdempotencyKeyRequired},
		{"no run", control.CreateRequest{}, "k", "invalid_request"},
		{"no code", control.CreateRequest{Run: &control.RunBody{}}, "k", "invalid_request"},
		{"code and template", control.CreateRequest{Run: &control.RunBody{Code: "x", Template: "t"}}, "k", "invalid_request"},
		{"bad base", control.CreateRequest{Run: &control.RunBody{Code: "x", Base: "lbb/cobol"}}, "k", "invalid_request"},
		{"bad input", control.CreateRequest{Run: &control.RunBody{Code: "x", Input: json.RawMessage("{")}}, "k", "invalid_request"},
		{"memory over cap", control.CreateRequest{Run: &control.RunBody{Code: "x"}, Limits: &store.Limits{MemoryMiB: big}}, "k", errdefs.CodeLimitExceeded},
		{"timeout over cap", control.CreateRequest{Run: &control.RunBody{Code: "x"}, TimeoutMs: 1e9}, "k", errdefs.CodeLimitExceeded},
		{"no template", control.CreateRequest{Run: &control.RunBody{Template: "nope"}}, "k", "not_found"},
		{"bad pin", control.CreateRequest{Run: &control.RunBody{Template: "t@x"}}, "k", "invalid_request"},
		{"bad env", control.CreateRequest{Run: &control.RunBody{Code: "x", Env: map[string]string{"1A": "v"}}}, "k", "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Run(ctx, e.caller, tc.req, tc.key, "h")
			wantCode(t, err, tc.code)
		})
	}
	if e.runner.Total() != 0 {
		t.Fatalf("invalid requests ran %d times", e.runner.Total())
	}
}

func TestOutcomes(t *testing.T) {
	e := setup(t, nil)
	for i, tc := range []struct{ code, status string }{
		{"raise", store.CommandFailed}, {"oom", store.CommandOOM}, {"timeout", store.CommandTimedOut},
	} {
		resp, err := e.svc.Run(ctx, e.caller, run(tc.code, "null"), fmt.Sprint("o", i), "h")
		if err != nil {
			t.Fatal(err)
		}
		r := decodeResult(t, resp)
		if r.OK || r.Status != tc.status {
			t.Fatalf("%s: ok=%v status=%s", tc.code, r.OK, r.Status)
		}
		if tc.code == "raise" && !strings.Contains(r.Stderr.Head, "Traceback") {
			t.Fatalf("raise: stderr %q", r.Stderr.Head)
		}
	}
}

func TestEnvMasked(t *testing.T) {
	e := setup(t, nil)
	req := run("echo-env", "null")
	req.Run.Env = map[string]string{"TOKEN": "s3cr3t-token"}
	resp, err := e.svc.Run(ctx, e.caller, req, "env", "h")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(resp.Body), "s3cr3t") {
		t.Fatalf("secret in the answer: %s", resp.Body)
	}
	r := decodeResult(t, resp)
	cmd, _ := e.st.GetCommand(ctx, "main", r.Command)
	b, _ := json.Marshal(cmd)
	if strings.Contains(string(b), "s3cr3t") || len(cmd.EnvNames) != 1 || cmd.EnvNames[0] != "TOKEN" {
		t.Fatalf("command record: %s", b)
	}
}

func TestConcurrentSameKey(t *testing.T) {
	e := setup(t, nil)
	const n = 10
	var wg sync.WaitGroup
	resps := make([]control.Response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			resps[i], errs[i] = e.svc.Run(ctx, e.caller, run("sleep:200ms", "7"), "same", "h")
		})
	}
	wg.Wait()
	first := ""
	replayed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		r := decodeResult(t, resps[i])
		if !r.OK || string(r.Result) != "7" {
			t.Fatalf("call %d: %s", i, resps[i].Body)
		}
		if first == "" {
			first = r.Command
		} else if r.Command != first {
			t.Fatalf("two commands for one key: %s and %s", first, r.Command)
		}
		if resps[i].Replayed {
			replayed++
		}
	}
	if e.runner.Total() != 1 || replayed != n-1 {
		t.Fatalf("runs %d, replayed %d", e.runner.Total(), replayed)
	}
	cmds, _, _ := e.st.ListCommands(ctx, "main", store.CommandFilter{}, store.Page{})
	if len(cmds) != 1 {
		t.Fatalf("%d command records", len(cmds))
	}
}

func TestWaitAnd202(t *testing.T) {
	e := setup(t, nil)
	req := run("sleep:300ms", "1")
	zero := int64(0)
	req.WaitMs = &zero
	resp, err := e.svc.Run(ctx, e.caller, req, "w", "h")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResult(t, resp)
	if resp.Outcome != idempotency.Accepted || r.Status != store.CommandRunning {
		t.Fatalf("want 202 running, got %d %s", resp.Outcome, resp.Body)
	}
	cmd, err := e.svc.GetCommand(ctx, "main", r.Command, 5*time.Second)
	if err != nil || cmd.Status != store.CommandSucceeded {
		t.Fatalf("after waiting: %v %+v", err, cmd)
	}
	again, err := e.svc.Run(ctx, e.caller, req, "w", "h")
	if err != nil || again.Outcome != idempotency.Done || !again.Replayed {
		t.Fatalf("replay after the end: %v %d %v", err, again.Outcome, again.Replayed)
	}
}

// TestRunAdmission: one-call runs do not count toward the graph's running cap; past the
// host's run slots they wait in the queue (a call that does not wait answers 202 and the
// run goes on once a slot frees), and past the queue's bound one is refused with 429
// too_many_runs, reserving nothing.
func TestRunAdmission(t *testing.T) {
	e := setup(t, func(c *config.Config) { c.MaxRunningPerGraph, c.RunSlots, c.RunQueue = 1, 2, 1 })
	zero := int64(0)
	for i := range 2 {
		req := run("block", "1")
		req.WaitMs = &zero
		if _, err := e.svc.Run(ctx, e.caller, req, fmt.Sprint("b", i), "h"); err != nil {
			t.Fatal(err)
		}
	}
	queued := run("x", "1")
	queued.WaitMs = &zero
	resp, err := e.svc.Run(ctx, e.caller, queued, "q", "h")
	if err != nil || resp.Outcome != idempotency.Accepted {
		t.Fatalf("a run past the slots: %v %d; want it queued (202)", err, resp.Outcome)
	}
	_, err = e.svc.Run(ctx, e.caller, run("x", "1"), "b3", "h")
	wantCode(t, err, errdefs.CodeTooManyRuns)
	if errhttp.Status(err) != 429 {
		t.Fatalf("status %d", errhttp.Status(err))
	}
	e.runner.Release()
	for i, key := range []string{"b0", "b1", "q"} {
		req := run("block", "1")
		if key == "q" {
			req = run("x", "1")
		}
		resp, err := e.svc.Run(ctx, e.caller, req, key, "h")
		if err != nil || decodeResult(t, resp).Status != store.CommandSucceeded {
			t.Fatalf("run %d (%s): %v %s", i, key, err, resp.Body)
		}
	}
	// A 429 reserved nothing: the key runs now.
	if _, err := e.svc.Run(ctx, e.caller, run("x", "1"), "b3", "h"); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownEndsRuns(t *testing.T) {
	e := setup(t, nil)
	zero := int64(0)
	req := run("block", "1")
	req.WaitMs = &zero
	resp, err := e.svc.Run(ctx, e.caller, req, "s", "h")
	if err != nil {
		t.Fatal(err)
	}
	id := decodeResult(t, resp).Command
	quick, err := e.svc.Run(ctx, e.caller, func() control.CreateRequest { r := run("sleep:50ms", "1"); r.WaitMs = &zero; return r }(), "q", "h")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cmd, _ := e.st.GetCommand(ctx, "main", id)
	sb, _ := e.st.GetSandbox(ctx, "main", cmd.SandboxID)
	if cmd.Status != store.CommandKilled || sb.EndReason != store.EndServerShutdown || sb.EndedAt == nil {
		t.Fatalf("after shutdown: command %s, sandbox %s %s", cmd.Status, sb.Status, sb.EndReason)
	}
	q, _ := e.st.GetCommand(ctx, "main", decodeResult(t, quick).Command)
	if q.Status != store.CommandSucceeded {
		t.Fatalf("a run shorter than the grace period ended %s", q.Status)
	}
	_, err = e.svc.Run(ctx, e.caller, run("x", "1"), "late", "h")
	if errhttp.Status(err) != 503 {
		t.Fatalf("a run after shutdown: %v", err)
	}
}

// TestRecover writes what a crash leaves: records still running, an idempotency key still
// reserved and a sandbox still held by the runtime.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	now := time.Now().UTC().Truncate(time.Millisecond)
	sb := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxRunning, OneCall: true, Base: "lbb/python", CreatedAt: now}
	cmd := store.Command{ID: ids.New(ids.Command), Graph: "main", SandboxID: sb.ID, Kind: store.KindRun, Code: "x", Status: store.CommandRunning, CreatedAt: now, StartedAt: &now}
	stray := store.Sandbox{ID: ids.New(ids.Sandbox), Graph: "main", Status: store.SandboxStarting, Base: "lbb/python", CreatedAt: now}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateGraph(ctx, store.Graph{Name: "main", CreatedAt: now}))
	must(st.CreateSandbox(ctx, sb))
	must(st.CreateSandbox(ctx, stray))
	must(st.CreateCommand(ctx, cmd))
	must(st.CreateIdempotency(ctx, store.Idempotency{Graph: "main", Key: "crash", Route: control.RouteCreateSandbox, RequestHash: "h",
		State: store.IdempotencyRunning, CommandID: cmd.ID, SandboxID: sb.ID, CreatedAt: now}))
	r := controltest.New()
	r.Held = []string{sb.ID, "sbx_unknown"}
	e := setupOn(t, dir, st, r, nil)
	rec, err := e.svc.Recover(ctx)
	must(err)
	if len(rec.Lost) != 1 || rec.Lost[0] != cmd.ID || len(rec.Reaped) != 2 || len(rec.Sandboxes) != 1 || rec.Sandboxes[0] != stray.ID {
		t.Fatalf("recovered %+v", rec)
	}
	got, _ := st.GetCommand(ctx, "main", cmd.ID)
	gotSb, _ := st.GetSandbox(ctx, "main", sb.ID)
	if got.Status != store.CommandLost || got.FinishedAt == nil || gotSb.Status != store.SandboxDestroyed || gotSb.EndReason != store.EndLost {
		t.Fatalf("after recover: command %s, sandbox %s %s", got.Status, gotSb.Status, gotSb.EndReason)
	}
	resp, err := e.svc.Run(ctx, e.caller, run("x", "1"), "crash", "h")
	must(err)
	res := decodeResult(t, resp)
	if !resp.Replayed || res.Status != store.CommandLost || res.Command != cmd.ID || r.Total() != 0 {
		t.Fatalf("retry after the crash: replayed=%v status=%s runs=%d", resp.Replayed, res.Status, r.Total())
	}
}

func TestTemplates(t *testing.T) {
	e := setup(t, nil)
	mk := func(code, config string) control.SavedTemplate {
		t.Helper()
		tpl, err := e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "normalize", Code: code,
			Config: json.RawMessage(config), Limits: &store.Limits{MemoryMiB: 1024}, TimeoutMs: 5000})
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	v1 := mk("v1", `{"unit":"cm","deep":{"a":1,"b":2}}`)
	v2 := mk("v2", `{"unit":"mm","deep":{"a":1,"b":2}}`)
	if v1.Version != 1 || v2.Version != 2 || v1.ID != v2.ID || v1.Base != "lbb/python" || v1.Existing || v2.Existing {
		t.Fatalf("versions: %+v %+v", v1, v2)
	}
	// The same as the newest (its config's keys in another order) is the newest, no new version.
	if again := mk("v2", `{"deep":{"b":2,"a":1},"unit":"mm"}`); again.Version != 2 || !again.Existing || again.CreatedAt != v2.CreatedAt {
		t.Fatalf("saved the same again: %+v", again)
	}
	// What an older version holds is a new version: the newest is what was saved last.
	if back := mk("v1", `{"unit":"cm","deep":{"a":1,"b":2}}`); back.Version != 3 || back.Existing {
		t.Fatalf("saved v1's again: %+v", back)
	}
	for _, tc := range []struct {
		ref, code string
		version   int
	}{{"normalize@2", "v2", 2}, {"normalize@1", "v1", 1}} {
		req := control.CreateRequest{Run: &control.RunBody{Template: tc.ref, Config: json.RawMessage(`{"deep":{"b":3},"x":true}`)}}
		resp, err := e.svc.Run(ctx, e.caller, req, "t-"+tc.ref, "h")
		if err != nil {
			t.Fatal(err)
		}
		r := decodeResult(t, resp)
		if r.Template == nil || r.Template.Version != tc.version || r.Template.ID != v1.ID || r.Limits.MemoryMiB != 1024 || r.TimeoutMs != 5000 {
			t.Fatalf("%s: %s", tc.ref, resp.Body)
		}
		cmd, _ := e.st.GetCommand(ctx, "main", r.Command)
		if cmd.Code != tc.code || cmd.Template.Version != tc.version {
			t.Fatalf("%s: ran %q version %d", tc.ref, cmd.Code, cmd.Template.Version)
		}
		var cfg map[string]any
		json.Unmarshal(cmd.Config, &cfg)
		deep := cfg["deep"].(map[string]any)
		if deep["a"] != 1.0 || deep["b"] != 3.0 || cfg["x"] != true || cfg["unit"] == nil {
			t.Fatalf("%s: merged config %s", tc.ref, cmd.Config)
		}
	}
	for _, bad := range []control.TemplateRequest{
		{Name: "Bad Name"}, {Name: "x", Base: "lbb/cobol"}, {Name: "x", Config: json.RawMessage(`[1]`)},
		{Name: "x", Files: []store.TemplateFile{{File: "fil_1", Path: "../etc/passwd"}}},
		{Name: "x", Limits: &store.Limits{MemoryMiB: 1 << 30}},
	} {
		if _, err := e.svc.CreateTemplate(ctx, e.caller, bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%+v: err %v", bad, err)
		}
	}
	bases := e.svc.Bases()
	if len(bases) != 4 || bases[0].Name != "lbb/python" || bases[0].Versions["python"] != "3.13.5" || bases[1].Versions["node"] != "24.1.0" {
		t.Fatalf("bases: %+v", bases)
	}
}

func TestSweep(t *testing.T) {
	e := setup(t, func(c *config.Config) { c.OutputRetention, c.SandboxRetention = time.Hour, 2*time.Hour })
	resp, err := e.svc.Run(ctx, e.caller, run("echo-env", "1"), "sw", "h")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResult(t, resp)
	// Nothing is old enough yet.
	sw, err := e.svc.Sweep(ctx)
	if err != nil || sw.OutputExpired != 0 || sw.Sandboxes != 0 {
		t.Fatalf("early sweep: %+v %v", sw, err)
	}
	// Age the records.
	cmd, _ := e.st.GetCommand(ctx, "main", r.Command)
	sb, _ := e.st.GetSandbox(ctx, "main", r.Sandbox)
	old := time.Now().Add(-90 * time.Minute).UTC().Truncate(time.Millisecond)
	cmd.FinishedAt, sb.EndedAt = &old, &old
	cmd.Stdout = store.Output{Head: "out", Bytes: 3}
	e.st.UpdateCommand(ctx, cmd)
	e.st.UpdateSandbox(ctx, sb)
	sw, err = e.svc.Sweep(ctx)
	if err != nil || sw.OutputExpired != 1 || sw.Sandboxes != 0 {
		t.Fatalf("output sweep: %+v %v", sw, err)
	}
	cmd, _ = e.st.GetCommand(ctx, "main", r.Command)
	if cmd.Stdout.Head != "" || !cmd.Stdout.Expired {
		t.Fatalf("output kept: %+v", cmd.Stdout)
	}
	again, err := e.svc.Run(ctx, e.caller, run("echo-env", "1"), "sw", "h")
	if err != nil || !strings.Contains(string(again.Body), `"expired":true`) {
		t.Fatalf("replayed answer keeps output: %v %s", err, again.Body)
	}
	older := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Millisecond)
	sb.EndedAt = &older
	e.st.UpdateSandbox(ctx, sb)
	sw, err = e.svc.Sweep(ctx)
	if err != nil || sw.Sandboxes != 1 {
		t.Fatalf("sandbox sweep: %+v %v", sw, err)
	}
	if _, err := e.st.GetCommand(ctx, "main", r.Command); !errdefs.IsNotFound(err) {
		t.Fatalf("command kept: %v", err)
	}
	// The key still never runs twice.
	again, err = e.svc.Run(ctx, e.caller, run("echo-env", "1"), "sw", "h")
	if err != nil || !again.Replayed || e.runner.Total() != 1 {
		t.Fatalf("after retention: %v replayed=%v runs=%d", err, again.Replayed, e.runner.Total())
	}
}

func TestKeys(t *testing.T) {
	e := setup(t, nil)
	k, err := e.svc.CreateKey(ctx, e.caller.Key.ID, control.KeyRequest{Name: "ci", Graphs: []string{"team"}, Scopes: []string{store.ScopeSandboxesRead}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.Authenticate(ctx, k.Secret)
	if err != nil || got.ID != k.ID {
		t.Fatalf("authenticate: %v", err)
	}
	if err := e.svc.Authorize(ctx, got, "team", store.ScopeSandboxesRead); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Authorize(ctx, got, "team", store.ScopeSandboxesWrite); errhttp.Status(err) != 403 {
		t.Fatalf("missing scope: %v", err)
	}
	if err := e.svc.Authorize(ctx, got, "main", store.ScopeSandboxesRead); !errdefs.IsNotFound(err) {
		t.Fatalf("another graph: %v", err)
	}
	if err := e.svc.Authorize(ctx, e.caller.Key, "nope", ""); !errdefs.IsNotFound(err) {
		t.Fatalf("a missing graph: %v", err)
	}
	if _, err := e.svc.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Authenticate(ctx, k.Secret); errhttp.Status(err) != 401 {
		t.Fatalf("revoked key: %v", err)
	}
	if _, err := e.svc.Authenticate(ctx, "lbb_sk_nope"); errhttp.Status(err) != 401 {
		t.Fatalf("unknown key: %v", err)
	}
	// A second bootstrap keeps the saved admin key.
	secret, err := e.svc.Bootstrap(ctx, e.dir)
	if err != nil || secret != "" {
		t.Fatalf("second bootstrap: %q %v", secret, err)
	}
}
