//go:build linux

package ns

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

func TestMain(m *testing.M) {
	MaybeInit()
	os.Exit(m.Run())
}

func TestSmoke(t *testing.T) {
	img := os.Getenv("SMOKE_IMAGE")
	agent := os.Getenv("SMOKE_AGENT")
	if img == "" {
		t.Skip("no SMOKE_IMAGE")
	}
	sd := t.TempDir()
	os.Chmod(sd, 0o711)
	os.Chmod(filepath.Dir(sd), 0o711)
	d := New(Config{StateDir: sd, AgentPath: agent, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err := runtime.CheckRequirements(d); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		id := fmt.Sprintf("sbx_smoke%d", i)
		t0 := time.Now()
		if err := d.Create(ctx, runtime.Spec{ID: id, Image: img}); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		sb, err := d.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		sb.Conn().SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 10)
		_, err = io.ReadFull(sb.Conn(), b)
		t3 := time.Now()
		t.Logf("create %v start %v first bytes %v (%v)", t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), err)
		if err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		t.Logf("destroy %v", time.Since(t3))
	}
}
