// Package temporal_test runs lbb as the step of Temporal (go.temporal.io/sdk, its in-process
// test suite; a module of its own so that neither lbb nor its Go SDK depends on the engine):
// an activity runs a command in a sandbox through sdk/go/step, with the workflow's id and
// the activity's id as the step's stable ids; its first attempt fails after lbb answered
// (a worker lost before Temporal recorded the result), Temporal retries it, and the retry
// answers the same command record: the command ran once.
package temporal_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/littlebigbrain/lbb/internal/api"
	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store/sqlite"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
	"github.com/littlebigbrain/lbb/sdk/go/step"
)

var agentBin string

func TestMain(m *testing.M) { testkit.Main(m, &agentBin) }

// serve runs the API in process on the local driver (real processes and files, no
// isolation, no root).
func serve(t *testing.T) *lbb.Client {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "lbb.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := config.Default()
	cfg.DataDir, cfg.ShutdownGrace = dir, 100*time.Millisecond
	bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	drv := local.New(local.Options{AgentPath: agentBin, StateDir: filepath.Join(dir, "sandboxes")})
	svc := control.New(control.Options{Store: st, Config: cfg, Image: control.Image{ID: "img"}, Blobs: bs,
		Host: controltest.New().On(hostagent.NewLocal(hostagent.Options{Driver: drv, Rootfs: "/", Blobs: bs, DataDir: dir}))})
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
	return c
}

type stepResult struct {
	Command string
	Attempt string
	Stdout  string
}

func TestActivityRunsOnceAcrossARetry(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	sb, err := c.Sandboxes.Create(ctx, lbb.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	var attempts []string
	appendLine := func(actx context.Context) (stepResult, error) {
		info := activity.GetInfo(actx)
		s := step.Step{Workflow: info.WorkflowExecution.ID, Run: info.WorkflowExecution.RunID, ID: info.ActivityID, Attempt: int(info.Attempt)}
		cmd, err := step.Exec(actx, c, s, sb.ID, lbb.ExecParams{Cmd: "echo ran >> count.txt; wc -l < count.txt"})
		if err != nil {
			return stepResult{}, err
		}
		attempts = append(attempts, cmd.ID)
		if info.Attempt == 1 {
			// lbb answered; the worker is lost before Temporal records the result.
			return stepResult{}, errors.New("worker lost")
		}
		return stepResult{Command: cmd.ID, Attempt: cmd.Origin.Attempt, Stdout: strings.TrimSpace(cmd.Stdout.Tail)}, nil
	}
	wf := func(wctx workflow.Context) (stepResult, error) {
		wctx = workflow.WithActivityOptions(wctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 3}})
		var r stepResult
		err := workflow.ExecuteActivity(wctx, appendLine).Get(wctx, &r)
		return r, err
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(appendLine)
	env.ExecuteWorkflow(wf)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var r stepResult
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 || attempts[0] != attempts[1] || r.Command != attempts[0] {
		t.Fatalf("two attempts answered commands %v, the workflow %s: want one command", attempts, r.Command)
	}
	rc, err := c.Files.Read(ctx, sb.ID, "count.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "ran\n" || r.Stdout != "1" || r.Attempt != "1" {
		t.Fatalf("the command ran more than once: count.txt %q, the record's stdout %q, attempt %q", b, r.Stdout, r.Attempt)
	}
}
