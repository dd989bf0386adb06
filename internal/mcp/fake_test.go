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

// fakeAPI is the little of the lbb API the unit tests need: sandboxes to get, list, create and
// delete, and one-call runs whose result is the sum of the input. The real API is tested in
// e2e_test.go against lbb serve.
type fakeAPI struct {
	key string

	mu        sync.Mutex
	sandboxes map[string]map[string]any
	n         int
	deletes   int
	idem      map[string]int // Idempotency-Key → how often it came
	stdout    string         // what a run prints
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{key: "lbb_test_key", sandboxes: map[string]map[string]any{}, idem: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) addSandbox(status string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := fmt.Sprintf("sbx_fake%d", f.n)
	f.sandboxes[id] = map[string]any{"id": id, "graph": "main", "status": status, "base": "lbb/python",
		"created_at": time.Now().UTC().Format(time.RFC3339), "limits": map[string]any{"memory_mib": 512, "cpus": 1}}
	return id
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
	path := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes")
	switch {
	case r.Method == "GET" && path == "":
		var data []any
		for _, sb := range f.sandboxes {
			data = append(data, sb)
		}
		reply(map[string]any{"data": data})
	case r.Method == "POST" && path == "":
		var body struct {
			Run *struct {
				Input []float64 `json:"input"`
			} `json:"run"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		if body.Run == nil {
			apiError(w, http.StatusBadRequest, "invalid_argument", "the fake makes only runs")
			return
		}
		sum := 0.0
		for _, v := range body.Run.Input {
			sum += v
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
