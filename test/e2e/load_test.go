//go:build linux

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/loadtest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestLoad sends 100 one-call runs at once: 100 records, 0 lost, 0 run twice.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	s := startServer(t, "--max-running-per-graph", "100", "--log-level", "warn")
	c, err := lbb.New(lbb.Options{BaseURL: s.url, APIKey: s.key, Graph: "main", MaxRetries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := loadtest.Run(ctx, loadtest.Options{Client: c, N: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.String())
	if !res.OK() {
		t.Fatal(res.String())
	}
}
