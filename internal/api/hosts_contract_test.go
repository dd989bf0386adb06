package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
)

// idleHost is a host agent that answers its heartbeats and holds nothing.
type idleHost struct{ hostagent.Host }

func (idleHost) Info(context.Context) (hostagent.Info, error) {
	return hostagent.Info{Default: "ns", Offered: []string{"ns"}, Boot: "1", Capacity: hostagent.Capacity{CPUs: 2}}, nil
}

func (idleHost) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	ch := make(chan hostagent.Event)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

// hostsContract checks POST /v1/hosts/register on a control plane that hosts join (a fleet
// with Dial), and on one that lists them (s, whose host agent is no fleet).
func hostsContract(t *testing.T, d doc, s *server, seen map[string]bool) {
	const reg = "/v1/hosts/register"
	check := checker(t, d, s, seen)
	body := `{"id": "h1", "url": "http://127.0.0.1:7702"}`
	check("registerHost", reg, 404, "POST", reg, "", map[string]string{"Authorization": "Bearer lbbh_h1.x"}, body)

	dir := t.TempDir()
	st, err := sqlite.Open(bg, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f, err := fleet.New(bg, fleet.Options{Store: st, Heartbeat: 50 * time.Millisecond,
		Dial: func(id, url string) (hostagent.Host, error) { return idleHost{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := config.Default()
	cfg.DataDir = dir
	svc := control.New(control.Options{Store: st, Host: f, Config: cfg, Image: control.Image{ID: "img1"}})
	hs := httptest.NewServer(api.New(api.Options{Service: svc}))
	defer hs.Close()
	j := &server{t: t, url: hs.URL, svc: svc, st: st}
	check = checker(t, d, j, seen)

	token := fleet.HostToken("secret", "h1")
	now := time.Now().UTC()
	if err := st.PutHost(bg, store.Host{ID: "h1", State: store.HostAdded, TokenHash: fleet.HashToken(token), RegisteredAt: now, LastHeartbeat: now}); err != nil {
		t.Fatal(err)
	}
	r := check("registerHost", reg, 401, "POST", reg, fleet.HostToken("other", "h1"), nil, body)
	if code := r.json(t)["error"].(map[string]any)["code"]; code != fleet.CodeHostToken {
		t.Fatalf("a wrong token: code %v, want %s", code, fleet.CodeHostToken)
	}
	check("registerHost", reg, 400, "POST", reg, token, nil, `{"id": "h1", "url": "127.0.0.1:7702"}`)
	if a := check("registerHost", reg, 200, "POST", reg, token, nil, body).json(t); a["id"] != "h1" {
		t.Fatalf("registered: %v", a)
	}
	hosts, err := st.ListHosts(bg)
	if err != nil || len(hosts) != 1 || hosts[0].URL != "http://127.0.0.1:7702" {
		t.Fatalf("hosts after the registration: %+v %v", hosts, err)
	}
}
