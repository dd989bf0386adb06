package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI is the little of the lbb API the unit tests need: sandboxes to get, list, create,
// pause and delete, one-call runs whose result is the sum of the input, and snapshots and forks
// of gvisor sandboxes (records only). The real API is tested in e2e_test.go against lbb serve.
type fakeAPI struct {
	key string

	mu        sync.Mutex
	sandboxes map[string]map[string]any
	n         int
	deletes   int
	idem      map[string]int // Idempotency-Key → how often it came
	stdout    string         // what a run prints
	bodies    []map[string]any

	snapshots       map[string]map[string]any
	snapshotDeletes int
	busy            map[string]bool // sandboxes with a command running
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{key: "lbb_test_key", sandboxes: map[string]map[string]any{}, idem: map[string]int{},
		snapshots: map[string]map[string]any{}, busy: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) addSandbox(status string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newSandbox(status, "ns")
}

// newSandbox adds a sandbox record; the caller holds f.mu.
func (f *fakeAPI) newSandbox(status, isolation string) string {
	f.n++
	id := fmt.Sprintf("sbx_fake%d", f.n)
	f.sandboxes[id] = map[string]any{"id": id, "graph": "main", "status": status, "base": "lbb/python", "isolation": isolation,
		"created_at": time.Now().UTC().Format(time.RFC3339), "limits": map[string]any{"memory_mib": 512, "cpus": 1}}
	return id
}

// newSnapshot adds a snapshot of sandbox sb; the caller holds f.mu.
func (f *fakeAPI) newSnapshot(sb string, md any) string {
	f.n++
	id := fmt.Sprintf("snp_fake%d", f.n)
	f.snapshots[id] = map[string]any{"id": id, "graph": "main", "sandbox": sb, "isolation": "gvisor", "memory": true,
		"size_bytes": 3 << 20, "created_at": time.Now().UTC().Format(time.RFC3339), "duration_ms": 152.3, "metadata": md}
	return id
}

func (f *fakeAPI) hasSnapshot(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots[id] != nil
}

func (f *fakeAPI) lastBody() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		return nil
	}
	return f.bodies[len(f.bodies)-1]
}

func (f *fakeAPI) status(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		return sb["status"].(string)
	}
	return ""
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg, "request_id": "req_fake"}})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		apiError(w, http.StatusUnauthorized, "unauthorized", "unknown API key")
		return
	}
	if g := r.URL.Query().Get("graph"); g != "main" {
		apiError(w, http.StatusForbidden, "forbidden", "the key may not use graph "+g)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		f.idem[k]++
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	var body map[string]any
	if r.Method == "POST" {
		json.NewDecoder(r.Body).Decode(&body)
		f.bodies = append(f.bodies, body)
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/snapshots/"); ok {
		snap := f.snapshots[id]
		if snap == nil {
			apiError(w, http.StatusNotFound, "not_found", "no snapshot "+id)
			return
		}
		if r.Method == "DELETE" {
			f.snapshotDeletes++
			delete(f.snapshots, id)
		}
		reply(snap)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes")
	if id, action, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/"); ok {
		f.sandboxAction(w, r.Method, id, action, body, reply)
		return
	}
	switch {
	case r.Method == "GET" && path == "":
		var data []any
		for _, sb := range f.sandboxes {
			data = append(data, sb)
		}
		reply(map[string]any{"data": data})
	case r.Method == "POST" && path == "":
		run, _ := body["run"].(map[string]any)
		if run == nil {
			iso, _ := body["isolation"].(string)
			reply(f.sandboxes[f.newSandbox("running", cmp(iso, "ns"))])
			return
		}
		sum := 0.0
		input, _ := run["input"].([]any)
		for _, v := range input {
			n, _ := v.(float64)
			sum += n
		}
		reply(map[string]any{"ok": true, "result": sum, "command": "cmd_fake", "sandbox": "sbx_run", "status": "succeeded",
			"exit_code": 0, "duration_ms": 9, "stdout": map[string]any{"head": f.stdout, "tail": f.stdout, "bytes": len(f.stdout)}})
	case r.Method == "GET" || r.Method == "DELETE":
		sb := f.sandboxes[strings.TrimPrefix(path, "/")]
		if sb == nil {
			apiError(w, http.StatusNotFound, "not_found", "no sandbox "+strings.TrimPrefix(path, "/"))
			return
		}
		if r.Method == "DELETE" {
			f.deletes++
			sb["status"] = "destroyed"
			sb["end_reason"] = "deleted"
		}
		reply(sb)
	default:
		apiError(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
	}
}

// sandboxAction serves /v1/sandboxes/{id}/{action}; the caller holds f.mu.
func (f *fakeAPI) sandboxAction(w http.ResponseWriter, method, id, action string, body map[string]any, reply func(any)) {
	sb := f.sandboxes[id]
	if sb == nil {
		apiError(w, http.StatusNotFound, "not_found", "no sandbox "+id)
		return
	}
	if method == "GET" && action == "snapshots" {
		list := []any{}
		for _, snap := range f.snapshots {
			if snap["sandbox"] == id {
				list = append(list, snap)
			}
		}
		reply(map[string]any{"snapshots": list})
		return
	}
	if method != "POST" {
		apiError(w, http.StatusNotFound, "not_found", "no route "+method+" "+action)
		return
	}
	memory := action == "snapshot" || action == "fork"
	switch {
	case action == "pause" && sb["status"] == "paused":
		reply(sb)
		return
	case sb["status"] != "running":
		apiError(w, http.StatusConflict, "conflict", fmt.Sprintf("sandbox %s is %s; only a running sandbox can %s", id, sb["status"], action))
		return
	case f.busy[id]:
		apiError(w, http.StatusConflict, "commands_running", fmt.Sprintf("sandbox %s has 1 command(s) running; wait for them or kill them, then %s", id, action))
		return
	case memory && sb["isolation"] != "gvisor":
		apiError(w, http.StatusConflict, "not_supported", fmt.Sprintf(`memory snapshots need isolation "gvisor"; sandbox %s runs on %q`, id, sb["isolation"]))
		return
	}
	switch action {
	case "pause":
		sb["status"], sb["paused_at"] = "paused", time.Now().UTC().Format(time.RFC3339)
		reply(sb)
	case "snapshot":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		reply(f.snapshots[f.newSnapshot(id, body["metadata"])])
	case "fork":
		snap, _ := body["snapshot"].(string)
		if snap == "" {
			snap = f.newSnapshot(id, nil)
		} else if f.snapshots[snap] == nil || f.snapshots[snap]["sandbox"] != id {
			apiError(w, http.StatusNotFound, "not_found", "sandbox "+id+" has no snapshot "+snap)
			return
		}
		fork := f.sandboxes[f.newSandbox("running", "gvisor")]
		fork["forked_from"] = map[string]any{"sandbox": id, "snapshot": snap}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		reply(fork)
	default:
		apiError(w, http.StatusNotFound, "not_found", "no route POST "+action)
	}
}
