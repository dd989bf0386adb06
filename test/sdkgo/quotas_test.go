package sdkgo_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// TestQuotasAndDeleteFile: the graph's quotas read back what it holds; a File past a quota
// is refused at once (no retry), a delete makes room; a large result is a File the answer
// names.
func TestQuotasAndDeleteFile(t *testing.T) {
	c, _ := server{tweak: func(cfg *config.Config) { cfg.Quotas.Files, cfg.MaxResultBytes = 2, 1024 },
		driver: func(stateDir string) runtime.Driver {
			return local.New(local.Options{AgentPath: agentBin, StateDir: stateDir})
		}}.start(t)
	ctx := context.Background()
	a, err := c.GraphFiles.Upload(ctx, "a.txt", strings.NewReader("aaa"))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("r", 2000)
	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "echo", Input: big})
	if err != nil || !run.ResultTruncated || run.ResultFile == "" || run.ResultBytes != int64(len(big)+2) {
		t.Fatalf("a large result: %+v %v", run, err)
	}
	rc, err := c.GraphFiles.Content(ctx, run.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != `"`+big+`"` {
		t.Fatalf("the result's File: %d bytes", len(got))
	}
	q, err := c.Quotas(ctx)
	if err != nil || q.Quotas.Files.Usage != 2 || q.Quotas.Files.Limit != 2 || q.Quotas.FileBytes.Usage != 3+int64(len(big)+2) || q.MaxResultBytes != 1024 {
		t.Fatalf("quotas: %+v %v", q, err)
	}
	t0 := time.Now()
	_, err = c.GraphFiles.Upload(ctx, "b.txt", strings.NewReader("b"))
	if !lbb.IsQuotaExceeded(err) || lbb.StatusOf(err) != 429 || lbb.CodeOf(err) != lbb.CodeQuotaExceeded {
		t.Fatalf("a third File: %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("a full quota was retried: %v", d)
	}
	gone, err := c.GraphFiles.Delete(ctx, a.ID)
	if err != nil || gone.ID != a.ID {
		t.Fatalf("delete: %+v %v", gone, err)
	}
	if _, err := c.GraphFiles.Delete(ctx, a.ID); !lbb.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	if _, err := c.GraphFiles.Upload(ctx, "b.txt", strings.NewReader("b")); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
