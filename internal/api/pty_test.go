package api_test

import (
	"testing"

	"github.com/littlebigbrain/lbb/internal/testkit/ptytest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestPty drives a terminal through the WebSocket with the Go SDK, on the local driver
// (test/e2e runs the same on ns and gvisor).
func TestPty(t *testing.T) {
	s := newServer(t, nil)
	c, err := lbb.New(lbb.Options{BaseURL: s.url, APIKey: s.admin, Graph: "main"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(bg, lbb.CreateParams{ExpiresInSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	ptytest.Drive(t, c, sb.ID)
	ptytest.Flood(t, c, sb.ID, 20<<20)
	ptytest.Pause(t, c, sb.ID)
}
