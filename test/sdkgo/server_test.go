// Package sdkgo_test runs the Go SDK (sdk/go, a module of its own) against the real API server
// and control plane in process, with the control plane's fake runner; Level 3 calls go to
// the local driver (real processes and files, no isolation), which needs no root. The
// end-to-end tests in test/e2e run the SDK against a real `lbb serve`.
package sdkgo_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

var agentBin string

func TestMain(m *testing.M) { testkit.Main(m, &agentBin) }

// server is what a test may change of the server it gets.
type server struct {
	tweak func(*config.Config)
	// driver, when set, serves Level 3 (sandboxes, files, snapshots) from the state
	// directory it is given.
	driver func(stateDir string) runtime.Driver
}

// start serves the API on a test HTTP server and returns a client of it, with the fake
// runner that runs its one-call runs.
func (o server) start(t *testing.T) (*lbb.Client, *controltest.Runner) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // last: after the server and the service
	cfg := config.Default()
	cfg.DataDir, cfg.ShutdownGrace = dir, 100*time.Millisecond
	if o.tweak != nil {
		o.tweak(&cfg)
	}
	r := controltest.New()
	opts := control.Options{Store: st, Host: r.On(nil), Config: cfg, Image: control.Image{ID: "img"}}
	if o.driver != nil {
		bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		opts.Blobs = bs
		opts.Host = r.On(hostagent.NewLocal(hostagent.Options{Driver: o.driver(filepath.Join(dir, "sandboxes")), Rootfs: "/", Blobs: bs, DataDir: dir}))
	}
	svc := control.New(opts)
	secret, err := svc.Bootstrap(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(api.Options{Service: svc}))
	t.Cleanup(func() { hs.Close(); svc.Shutdown(ctx) })
	c, err := lbb.New(lbb.Options{BaseURL: hs.URL, APIKey: secret, Graph: "main"})
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// newClient serves Levels 1 and 2 alone.
func newClient(t *testing.T, tweak func(*config.Config)) (*lbb.Client, *controltest.Runner) {
	t.Helper()
	return server{tweak: tweak}.start(t)
}

// newLevel3Client serves Level 3 on the local driver.
func newLevel3Client(t *testing.T) *lbb.Client {
	t.Helper()
	c, _ := server{driver: func(stateDir string) runtime.Driver {
		return local.New(local.Options{AgentPath: agentBin, StateDir: stateDir})
	}}.start(t)
	return c
}
