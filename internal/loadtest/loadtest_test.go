package loadtest_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/loadtest"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// The check itself, against the API with the fake runner (which answers input as result,
// so the check's sum is not what it gets: it must report every run as failed); the e2e
// suite runs it against the real runtime.
func TestRunCounts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir, cfg.MaxRunningPerGraph, cfg.ShutdownGrace = dir, 5, 100*time.Millisecond
	r := controltest.New()
	svc := control.New(control.Options{Store: st, Host: r.On(nil), Config: cfg})
	secret, err := svc.Bootstrap(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(api.Options{Service: svc}))
	defer func() { hs.Close(); svc.Shutdown(ctx); st.Close() }()
	c, _ := lbb.New(lbb.Options{BaseURL: hs.URL, APIKey: secret, Graph: "main", MaxRetries: 1000})
	res, err := loadtest.Run(ctx, loadtest.Options{Client: c, N: 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 30 || res.RunTwice != 0 || res.Mismatched != 0 || res.Lost != 0 || r.Total() != 30 {
		t.Fatalf("%s (runs %d)", res, r.Total())
	}
	if res.OK() || res.Failed != 30 || !strings.Contains(res.String(), "FAIL") {
		t.Fatalf("wrong results passed: %s", res)
	}
}
