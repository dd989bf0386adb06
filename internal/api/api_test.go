package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

var bg = context.Background()

type server struct {
	t      testing.TB
	url    string
	svc    *control.Service
	st     store.Store
	runner *controltest.Runner
	api    *api.Server
	admin  string
}

func newServer(t testing.TB, tweak func(*config.Config)) *server {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(bg, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir, cfg.ShutdownGrace = dir, 100*time.Millisecond
	if tweak != nil {
		tweak(&cfg)
	}
	reg := prometheus.NewRegistry()
	r := controltest.New()
	bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	// The local driver, with a fake freezer and checkpoint (pause, snapshot and fork).
	drv := controltest.NewCheckpointing(agentBin, filepath.Join(dir, "sandboxes"))
	svc := control.New(control.Options{Store: st, Host: r.On(hostagent.NewLocal(hostagent.Options{Driver: drv, Rootfs: "/", Blobs: bs, DataDir: dir})), Blobs: bs,
		Config: cfg, Registerer: reg,
		Image: control.Image{ID: "img1", Versions: map[string]string{"python": "3.13.5"}}})
	admin, err := svc.Bootstrap(bg, dir)
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Options{Service: svc, Registry: reg})
	hs := httptest.NewServer(a)
	t.Cleanup(func() {
		hs.Close()
		svc.Shutdown(bg)
		st.Close()
	})
	return &server{t: t, url: hs.URL, svc: svc, st: st, runner: r, api: a, admin: admin}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer is not a JSON object: %s", r.body)
	}
	return m
}

func (r reply) errCode(t *testing.T) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (s *server) do(method, path, key string, hdr map[string]string, body string) reply {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (s *server) key(graphs []string, scopes []string) string {
	s.t.Helper()
	k, err := s.svc.CreateKey(bg, "", control.KeyRequest{Graphs: graphs, Scopes: scopes})
	if err != nil {
		s.t.Fatal(err)
	}
	return k.Secret
}

const sumBody = `{"run": {"code": "def run(input, config):\n    return sum(input)", "input": [1, 2, 3]}, "wait_ms": 30000}`

func TestSeedCall(t *testing.T) {
	s := newServer(t, nil)
	hdr := map[string]string{"Idempotency-Key": "sum-a", "Content-Type": "application/json"}
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, hdr, sumBody)
	if r.status != 200 || r.header.Get("Request-Id") == "" || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	// Server-Timing names the phases of the run (the test server's runner claims nothing ahead).
	if st := r.header.Get("Server-Timing"); !regexp.MustCompile(`^auth;dur=[\d.]+, plan;dur=[\d.]+, reserve;dur=[\d.]+, .*record;dur=[\d.]+$`).MatchString(st) {
		t.Errorf("Server-Timing %q", st)
	}
	m := r.json(t)
	for _, k := range []string{"ok", "result", "command", "sandbox", "status", "exit_code", "duration_ms", "stdout", "stderr"} {
		if _, ok := m[k]; !ok {
			t.Errorf("answer lacks %s: %s", k, r.body)
		}
	}
	// Same body, keys reordered and spaced, a different wait_ms: the same request.
	again := s.do("POST", "/v1/sandboxes?graph=main", s.admin, hdr,
		`{"wait_ms": 5, "run": {"input": [1,2,3], "code": "def run(input, config):\n    return sum(input)"}}`)
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
		t.Fatalf("replay: %d %v %s", again.status, again.header, again.body)
	}
	other := s.do("POST", "/v1/sandboxes?graph=main", s.admin, hdr, `{"run": {"code": "x", "input": [1]}}`)
	if other.status != 422 || other.json(t)["error"].(map[string]any)["code"] != "idempotency_key_reused" {
		t.Fatalf("different body: %d %s", other.status, other.body)
	}
}

func TestErrors(t *testing.T) {
	s := newServer(t, nil)
	hdr := map[string]string{"Idempotency-Key": "e"}
	for _, tc := range []struct {
		name, method, path, key string
		hdr                     map[string]string
		body                    string
		status                  int
		code                    string
	}{
		{"no key", "POST", "/v1/sandboxes?graph=main", "", hdr, sumBody, 401, "unauthorized"},
		{"bad key", "POST", "/v1/sandboxes?graph=main", "lbb_sk_nope", hdr, sumBody, 401, "unauthorized"},
		{"no idempotency key", "POST", "/v1/sandboxes?graph=main", s.admin, nil, sumBody, 400, "idempotency_key_required"},
		{"bad JSON", "POST", "/v1/sandboxes?graph=main", s.admin, hdr, `{"run": `, 400, "invalid_request"},
		{"unknown field", "POST", "/v1/sandboxes?graph=main", s.admin, hdr, `{"run": {"code": "x"}, "colour": 1}`, 400, "invalid_request"},
		{"no graph", "POST", "/v1/sandboxes", s.admin, hdr, sumBody, 400, "invalid_request"},
		{"unknown graph", "GET", "/v1/sandboxes?graph=nope", s.admin, nil, "", 404, "not_found"},
		{"unknown route", "GET", "/v1/nope", s.admin, nil, "", 404, "not_found"},
		{"wrong method", "PATCH", "/v1/sandboxes?graph=main", s.admin, nil, "", 405, "method_not_allowed"},
		{"unknown command", "GET", "/v1/commands/cmd_01aaaaaaaaaaaaaaaaaaaaaaaa?graph=main", s.admin, nil, "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.key, tc.hdr, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			e := r.json(t)["error"].(map[string]any)
			if e["code"] != tc.code || e["request_id"] != r.header.Get("Request-Id") || e["message"] == "" {
				t.Fatalf("error %v, want code %s", e, tc.code)
			}
		})
	}
}

func TestCrossGraph(t *testing.T) {
	s := newServer(t, nil)
	r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, map[string]string{"Idempotency-Key": "x"}, sumBody)
	m := r.json(t)
	other := s.key([]string{"other"}, nil)
	for _, path := range []string{
		"/v1/commands/" + m["command"].(string) + "?graph=other",
		"/v1/sandboxes/" + m["sandbox"].(string) + "?graph=other",
		"/v1/sandboxes?graph=main",
		"/v1/commands/" + m["command"].(string) + "?graph=main",
	} {
		if r := s.do("GET", path, other, nil, ""); r.status != 404 {
			t.Errorf("%s with another graph's key: %d %s", path, r.status, r.body)
		}
	}
	l := s.do("GET", "/v1/commands?graph=other", other, nil, "").json(t)
	if len(l["data"].([]any)) != 0 {
		t.Fatalf("another graph lists main's commands: %v", l)
	}
	if r := s.do("GET", "/v1/commands/"+m["command"].(string)+"?graph=main", s.admin, nil, ""); r.status != 200 {
		t.Fatalf("own graph: %d", r.status)
	}
}

func TestAuditAndMetrics(t *testing.T) {
	s := newServer(t, nil)
	s.do("POST", "/v1/sandboxes?graph=main", s.admin, map[string]string{"Idempotency-Key": "a"}, sumBody)
	s.do("POST", "/v1/sandboxes/templates?graph=main", s.admin, nil, `{"name": "t", "code": "x"}`)
	s.do("POST", "/v1/sandboxes?graph=main", s.admin, nil, sumBody) // 400, audited too
	l := s.do("GET", "/v1/audit?graph=main", s.admin, nil, "").json(t)
	var routes []string
	for _, e := range l["data"].([]any) {
		e := e.(map[string]any)
		if !strings.HasPrefix(e["key"].(string), "key_") {
			t.Fatalf("audit entry without its key: %v", e)
		}
		routes = append(routes, fmt.Sprintf("%s %v", e["route"], e["status"]))
		// The run's entry is written with the run's end (one commit): it still names its command
		// and its request.
		if e["route"] == "POST /v1/sandboxes" && e["status"] == 200.0 {
			if !strings.HasPrefix(fmt.Sprint(e["target"]), "cmd_") || !strings.HasPrefix(fmt.Sprint(e["request_id"]), "req_") {
				t.Fatalf("run audit entry: %v", e)
			}
		}
	}
	sort.Strings(routes)
	want := []string{"POST /v1/sandboxes 200", "POST /v1/sandboxes 400", "POST /v1/sandboxes/templates 201"}
	if strings.Join(routes, ",") != strings.Join(want, ",") {
		t.Fatalf("audit %v, want %v", routes, want)
	}
	m := string(s.do("GET", "/metrics", s.admin, nil, "").body)
	for _, want := range []string{`lbb_runs_total{status="succeeded"} 1`, `lbb_http_requests_total{code="200",method="POST",route="POST /v1/sandboxes"} 1`,
		"lbb_sandboxes_running 0", "lbb_run_duration_seconds_bucket"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// BenchmarkRunOverhead measures the control plane and API alone (the fake runner runs
// nothing): one one-call run over HTTP, with its reservation, records and audit entry.
func BenchmarkRunOverhead(b *testing.B) {
	s := newServer(b, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := s.do("POST", "/v1/sandboxes?graph=main", s.admin, map[string]string{"Idempotency-Key": fmt.Sprint("bench-", i)}, sumBody)
		if r.status != 200 {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}
