//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCodeInterpreterWarm: a sandbox of lbb/code-interpreter is a warm slot whose Python
// context's kernel already runs (the pool's code-interpreter key): its first cell answers
// without waiting for a kernel to start, and state lives on in that context. A create the
// pool has no such slot for still gets its context, started with the sandbox.
func TestCodeInterpreterWarm(t *testing.T) {
	s := startServer(t, "--pool-min", "1", "--pool-max", "1")
	waitFor(t, 3*time.Minute, "a ready code-interpreter slot", func() bool {
		return s.metric(t, "lbb_pool_ready", "key", "code-interpreter") >= 1
	})
	warm0 := s.metric(t, "lbb_pool_claims_total", "key", "code-interpreter", "path", "warm")
	n := 0
	firstCell := func(t *testing.T) (string, time.Duration) {
		t.Helper()
		n++
		t0 := time.Now()
		r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprint("ci-", n)}, `{"base": "lbb/code-interpreter"}`)
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		sb := r.obj(t)["id"].(string)
		t.Cleanup(func() { s.call("DELETE", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "") })
		r = s.call("POST", "/v1/sandboxes/"+sb+"/code?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprint("ci-cell-", n)}, `{"code": "x = 20\nx + 22"}`)
		took := time.Since(t0)
		if r.status != 200 || !strings.Contains(string(r.body), `"text/plain":"42"`) || !strings.Contains(string(r.body), `"execution_count":1`) {
			t.Fatalf("first cell: %d %s", r.status, r.body)
		}
		r = s.call("POST", "/v1/sandboxes/"+sb+"/code?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprint("ci-cell2-", n)}, `{"code": "x"}`)
		if r.status != 200 || !strings.Contains(string(r.body), `"text/plain":"20"`) {
			t.Fatalf("second cell: %d %s", r.status, r.body)
		}
		if r := s.call("GET", "/v1/sandboxes/"+sb+"/contexts?graph=main", "", nil, ""); r.status != 200 || strings.Count(string(r.body), `"id":"ctx_`) != 1 {
			t.Fatalf("contexts: %d %s", r.status, r.body)
		}
		return sb, took
	}
	sb, warm := firstCell(t)
	if got := s.metric(t, "lbb_pool_claims_total", "key", "code-interpreter", "path", "warm"); got != warm0+1 {
		t.Fatalf("warm code-interpreter claims: %v, want %v", got, warm0+1)
	}
	// The kernel it came with ends with the sandbox's processes like one it started: after
	// a stop and resume the next cell starts a fresh one and says so.
	for _, op := range []string{"stop", "resume"} {
		if r := s.call("POST", "/v1/sandboxes/"+sb+"/"+op+"?graph=main", "", nil, ""); r.status != 200 {
			t.Fatalf("%s: %d %s", op, r.status, r.body)
		}
	}
	if r := s.call("POST", "/v1/sandboxes/"+sb+"/code?graph=main", "", map[string]string{"Idempotency-Key": "ci-after-resume"}, `{"code": "1"}`); r.status != 200 ||
		!strings.Contains(string(r.body), `"context_restarted":true`) {
		t.Fatalf("after stop and resume: %d %s", r.status, r.body)
	}
	// The pool's one slot is taken: the next create waits for no kernel slot.
	_, cold := firstCell(t)
	t.Logf("create lbb/code-interpreter + first cell: %s with a warm kernel, %s without", warm, cold)
}
