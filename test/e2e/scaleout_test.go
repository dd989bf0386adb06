//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestTwoServersOneDatabase: two `lbb serve` processes, each with its own data directory and
// sandboxes, on one PostgreSQL database (--store). Retries of one Idempotency-Key hit both at
// once: one sandbox runs it, every retry answers its result; a record written through one
// server is read through the other.
func TestTwoServersOneDatabase(t *testing.T) {
	requireEnv(t)
	store := postgresSchema(t)
	a := startServer(t, "--store", store)
	b := startServer(t, "--store", store)
	servers := []*server{a, b}

	body := `{"run": {"code": "import time\ndef run(input, config):\n    time.sleep(1)\n    return input * 2", "input": 21}, "wait_ms": 60000}`
	const n = 8
	type answer struct {
		status int
		m      map[string]any
		err    error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		s := servers[i%2]
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.url+"/v1/sandboxes?graph=main", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.key)
			req.Header.Set("Idempotency-Key", "two-servers")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers[i].status = resp.StatusCode
			answers[i].err = json.Unmarshal(b, &answers[i].m)
			if answers[i].err != nil {
				answers[i].err = fmt.Errorf("%w: %s", answers[i].err, b)
			}
		})
	}
	wg.Wait()
	var cmd string
	for i, an := range answers {
		if an.err != nil || an.status != 200 || an.m["ok"] != true || an.m["result"] != 42.0 {
			t.Fatalf("call %d (server %d): %d %v %v", i, i%2, an.status, an.m, an.err)
		}
		if c := an.m["command"].(string); cmd == "" {
			cmd = c
		} else if c != cmd {
			t.Fatalf("one key ran twice: commands %s and %s", cmd, c)
		}
	}
	for i, s := range servers {
		l := s.call("GET", "/v1/sandboxes?graph=main", "", nil, "").obj(t)
		if n := len(l["data"].([]any)); n != 1 {
			t.Fatalf("server %d lists %d sandboxes, want the one that ran: %v", i, n, l)
		}
		c := s.call("GET", "/v1/commands/"+cmd+"?graph=main", "", nil, "").obj(t)
		if c["status"] != "succeeded" || c["idempotency_key"] != "two-servers" {
			t.Fatalf("server %d: command record %v", i, c)
		}
	}
}
