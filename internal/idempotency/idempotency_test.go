package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

func newKeys(t *testing.T) Keys {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return Keys{Store: db, Now: func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }, MaxWait: 10 * time.Second}
}

const route = "POST /v1/files"

func TestDoOncePerKey(t *testing.T) {
	k := newKeys(t)
	ctx := context.Background()
	var runs atomic.Int32
	release := make(chan struct{})
	do := func(ctx context.Context) (Response, error) {
		n := runs.Add(1)
		<-release
		return JSON(Created, map[string]any{"n": n})
	}
	hash := Hash(route, "main", "upload", "a.txt")
	const callers = 8
	var wg sync.WaitGroup
	resps := make([]Response, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = k.Do(ctx, "main", "key-1", route, hash, do)
		}()
	}
	time.Sleep(300 * time.Millisecond) // let every caller find the key taken
	close(release)
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times, want once", n)
	}
	fresh := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if resps[i].Outcome != Created || string(resps[i].Body) != `{"n":1}` {
			t.Errorf("caller %d: %+v", i, resps[i])
		}
		if !resps[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers were not replays, want 1", fresh)
	}

	// A later retry replays the stored answer without doing the work.
	resp, err := k.Do(ctx, "main", "key-1", route, hash, do)
	if err != nil || !resp.Replayed || resp.Outcome != Created || string(resp.Body) != `{"n":1}` || runs.Load() != 1 {
		t.Fatalf("retry: %+v %v (runs %d)", resp, err, runs.Load())
	}
	if resp, ok, err := k.Stored(ctx, "main", "key-1", hash); !ok || err != nil || !resp.Replayed || resp.Outcome != Created {
		t.Fatalf("Stored: %+v %v %v", resp, ok, err)
	}
	// The record holds the outcome's number: earlier records hold the same ones.
	r, err := k.Store.GetIdempotency(ctx, "main", "key-1")
	if err != nil || r.State != store.IdempotencyDone || r.ResponseStatus != 201 || r.Route != route || r.CompletedAt == nil {
		t.Fatalf("record %+v %v", r, err)
	}
	// The same key in another graph is another key.
	if resp, err := k.Do(ctx, "other", "key-1", route, Hash(route, "other", "upload", "a.txt"), func(ctx context.Context) (Response, error) {
		return JSON(Done, "other")
	}); err != nil || resp.Replayed || resp.Outcome != Done {
		t.Fatalf("other graph: %+v %v", resp, err)
	}
}

func TestDoReusedKey(t *testing.T) {
	k := newKeys(t)
	ctx := context.Background()
	ok := func(ctx context.Context) (Response, error) { return JSON(Created, "first") }
	if _, err := k.Do(ctx, "main", "key-1", route, Hash(route, "main", "a"), ok); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := k.Do(ctx, "main", "key-1", route, Hash(route, "main", "b"), func(ctx context.Context) (Response, error) {
		ran = true
		return JSON(Created, "second")
	})
	if ran || errdefs.CodeOf(err) != errdefs.CodeIdempotencyKeyReused || !errdefs.Is(err, errdefs.ClassUnprocessable) {
		t.Fatalf("reused key: ran=%v err=%v", ran, err)
	}
	if _, ok, err := k.Stored(ctx, "main", "key-1", Hash(route, "main", "b")); ok || errdefs.CodeOf(err) != errdefs.CodeIdempotencyKeyReused {
		t.Fatalf("Stored with another request: %v %v", ok, err)
	}
}

func TestDoFailureReleasesKey(t *testing.T) {
	k := newKeys(t)
	ctx := context.Background()
	hash := Hash(route, "main", "a")
	boom := errors.New("boom")
	if _, err := k.Do(ctx, "main", "key-1", route, hash, func(ctx context.Context) (Response, error) {
		return Response{}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed call: %v", err)
	}
	if _, err := k.Store.GetIdempotency(ctx, "main", "key-1"); !errdefs.IsNotFound(err) {
		t.Fatalf("the failed call kept its key: %v", err)
	}
	if _, ok, err := k.Stored(ctx, "main", "key-1", hash); ok || err != nil {
		t.Fatalf("Stored after a failure: %v %v", ok, err)
	}
	// A retry does the work, even with another request.
	resp, err := k.Do(ctx, "main", "key-1", route, Hash(route, "main", "b"), func(ctx context.Context) (Response, error) {
		return JSON(Done, "retried")
	})
	if err != nil || resp.Replayed || string(resp.Body) != `"retried"` {
		t.Fatalf("retry: %+v %v", resp, err)
	}
}

func TestDoStillAtWork(t *testing.T) {
	k := newKeys(t)
	k.MaxWait = 200 * time.Millisecond
	ctx := context.Background()
	hash := Hash(route, "main", "a")
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := k.Do(ctx, "main", "key-1", route, hash, func(ctx context.Context) (Response, error) {
			close(started)
			<-release
			return JSON(Created, "x")
		})
		done <- err
	}()
	<-started
	_, err := k.Do(ctx, "main", "key-1", route, hash, func(ctx context.Context) (Response, error) {
		t.Error("a second call did the work")
		return Response{}, nil
	})
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "still at work") {
		t.Fatalf("while at work: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The work outlives its caller, so that the key is finished.
func TestDoOutlivesCaller(t *testing.T) {
	k := newKeys(t)
	ctx, cancel := context.WithCancel(context.Background())
	hash := Hash(route, "main", "a")
	resp, err := k.Do(ctx, "main", "key-1", route, hash, func(wctx context.Context) (Response, error) {
		cancel()
		if wctx.Err() != nil {
			t.Error("the work's context ended with its caller")
		}
		return JSON(Created, "x")
	})
	if err != nil || resp.Outcome != Created {
		t.Fatalf("%+v %v", resp, err)
	}
	r, err := k.Store.GetIdempotency(context.Background(), "main", "key-1")
	if err != nil || r.State != store.IdempotencyDone {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestDoWithoutKey(t *testing.T) {
	k := newKeys(t)
	runs := 0
	for range 2 {
		resp, err := k.Do(context.Background(), "main", "", route, "", func(ctx context.Context) (Response, error) {
			runs++
			return JSON(Done, runs)
		})
		if err != nil || resp.Replayed {
			t.Fatalf("%+v %v", resp, err)
		}
	}
	if runs != 2 {
		t.Fatalf("without a key the work ran %d times, want 2", runs)
	}
}

func TestKeyChecks(t *testing.T) {
	long := strings.Repeat("k", MaxKey+1)
	for _, tc := range []struct {
		what string
		err  error
		code string
	}{
		{"Check no key", Check(""), ""},
		{"Check key", Check(strings.Repeat("k", MaxKey)), ""},
		{"Check long", Check(long), "invalid_request"},
		{"Require no key", Require(""), errdefs.CodeIdempotencyKeyRequired},
		{"Require long", Require(long), "invalid_request"},
		{"Require key", Require("k"), ""},
	} {
		if got := codeOf(tc.err); got != tc.code {
			t.Errorf("%s: %v (code %q), want code %q", tc.what, tc.err, got, tc.code)
		}
	}
	if _, err := (Keys{}).Do(context.Background(), "main", long, route, "", nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Do with a long key: %v", err)
	}
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return errdefs.CodeOf(err)
}

func TestReserveAnswerFinish(t *testing.T) {
	k := newKeys(t)
	ctx := context.Background()
	at := k.Now()
	r := Reservation("main", "key-1", route, "h1", at)
	r.CommandID = "cmd_1"
	if existing, err := Reserve(ctx, k.Store, r); existing != nil || err != nil {
		t.Fatalf("first reserve: %v %v", existing, err)
	}
	existing, err := Reserve(ctx, k.Store, Reservation("main", "key-1", route, "h2", at))
	if err != nil || existing == nil || existing.CommandID != "cmd_1" {
		t.Fatalf("second reserve: %+v %v", existing, err)
	}
	if _, done, err := Answer(*existing, "h1"); done || err != nil {
		t.Fatalf("running: done=%v %v", done, err)
	}
	if _, _, err := Answer(*existing, "h2"); errdefs.CodeOf(err) != errdefs.CodeIdempotencyKeyReused {
		t.Fatalf("another request: %v", err)
	}
	Finish(existing, Response{Outcome: Accepted, Body: json.RawMessage(`{"id":"cmd_1"}`)}, &at)
	if err := k.Store.UpdateIdempotency(ctx, *existing); err != nil {
		t.Fatal(err)
	}
	got, err := k.Store.GetIdempotency(ctx, "main", "key-1")
	if err != nil || got.ResponseStatus != 202 {
		t.Fatalf("%+v %v", got, err)
	}
	resp, done, err := Answer(got, "h1")
	if !done || err != nil || !resp.Replayed || resp.Outcome != Accepted || string(resp.Body) != `{"id":"cmd_1"}` {
		t.Fatalf("finished: %+v %v %v", resp, done, err)
	}
	if s := Stored(got); s.Replayed || s.Outcome != Accepted {
		t.Fatalf("Stored: %+v", s)
	}
}

// The hashes are stored with keys: they must not change, or a retry across an upgrade would
// be a different request.
func TestHashesStable(t *testing.T) {
	if h := Hash("POST /v1/files", "main", "sandbox", "sbx_1", "/w/a.txt"); h != "e6fc76fc55510a143f2cca795dfa4878897a3365ed65558a31abad70c6e169e3" {
		t.Errorf("Hash = %s", h)
	}
	if h := Hash("PUT /v1/sandboxes/files/content", "g"); h != "3b284341ed91681f3fdf6381478c7f18b4ea07fea3919e5e5f58952daaf63411" {
		t.Errorf("Hash without parts = %s", h)
	}
	h, err := HashJSON("POST /v1/sandboxes", "main", []byte(`{"run": {"code": "print(1)", "input": [1, 2.50]}, "wait_ms": 5, "a": null}`))
	if err != nil || h != "387571bd5208dad1542b1ad7377c2bc1fd618c03df08fb4adfce29d154ceb834" {
		t.Errorf("HashJSON = %s, %v", h, err)
	}
	if Hash("r", "g", "ab", "c") == Hash("r", "g", "a", "bc") {
		t.Error("parts collide")
	}
	if _, err := HashJSON("r", "g", []byte(`[1]`)); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a body that is not an object: %v", err)
	}
}

// FuzzHashJSON: the hash of a body does not depend on key order or spacing, nor on
// wait_ms.
func FuzzHashJSON(f *testing.F) {
	f.Add(`{"run": {"code": "x", "input": [1, 2, 3]}, "wait_ms": 5}`)
	f.Add(`{"a": {"b": {"c": 1.50}}, "z": null}`)
	f.Fuzz(func(t *testing.T, body string) {
		var v map[string]any
		d := json.NewDecoder(strings.NewReader(body))
		d.UseNumber()
		if d.Decode(&v) != nil || d.More() || v == nil { // null: the API's decode rejects it before
			return
		}
		h1, err := HashJSON("POST /v1/sandboxes", "main", []byte(body))
		if err != nil {
			return
		}
		v["wait_ms"] = 123
		re, _ := json.MarshalIndent(v, "", "   ")
		h2, err := HashJSON("POST /v1/sandboxes", "main", re)
		if err != nil {
			t.Fatalf("re-encoded body: %v", err)
		}
		if h1 != h2 {
			t.Fatalf("hash changed:\n%s\n%s", body, re)
		}
		if h3, _ := HashJSON("POST /v1/sandboxes", "other", []byte(body)); h3 == h1 {
			t.Fatal("the graph is not in the hash")
		}
		if h4, _ := HashJSON("POST /v1/sandboxes/sbx_1/commands", "main", []byte(body)); h4 == h1 {
			t.Fatal("the route is not in the hash")
		}
		v["fuzz"] = body
		re, _ = json.Marshal(v)
		if h5, _ := HashJSON("POST /v1/sandboxes", "main", re); h5 == h1 {
			t.Fatalf("a body with another field has the same hash:\n%s\n%s", body, re)
		}
	})
}
