// Package step makes an lbb call a workflow step that runs once, whatever durable engine
// runs the workflow (DBOS, Temporal, your own): the call's Idempotency-Key is derived from
// the workflow's id, its run and the step's id, which the engine keeps stable across
// retries and recovery, so a step retried after a worker crash gets the first attempt's
// command record back instead of running again. Each attempt calls with a grant of its own
// (POST /v1/grants): short-lived, its origin {workflow, run, step, attempt} stamped on every
// record, its budget counted by the server. The command record is the step's receipt.
//
// With DBOS:
//
//	out, err := dbos.RunAsStep(ctx, func(c context.Context) (*lbb.Run, error) {
//		wf, _ := dbos.GetWorkflowID(ctx)
//		return step.Run(c, client, step.Step{Workflow: wf, ID: "transform"}, lbb.RunParams{Code: code})
//	}, dbos.WithStepName("transform"))
//
// In a Temporal activity, the activity's info names the step:
//
//	info := activity.GetInfo(ctx)
//	s := step.Step{Workflow: info.WorkflowExecution.ID, Run: info.WorkflowExecution.RunID,
//		ID: info.ActivityID, Attempt: int(info.Attempt)}
//	cmd, err := step.Exec(ctx, client, s, sandboxID, lbb.ExecParams{Cmd: "make test"})
package step

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Step names one step of one run of a workflow.
type Step struct {
	// Workflow is the workflow's id as the engine keeps it (DBOS: dbos.GetWorkflowID).
	Workflow string
	// Run is the workflow's run, when one workflow id runs several times; the budget of
	// PUT /v1/budgets/{workflow}/{run} counts it. Empty: the workflow id.
	Run string
	// ID is the step's id within the run, stable across retries (a name, or the engine's
	// step number).
	ID string
	// Attempt is the engine's attempt number, stamped on the records; 0 is not sent.
	Attempt int
	// Budget is the attempt's grant's budget (nil: none; the workflow run's still counts).
	Budget *lbb.Budget
	// TTL is the grant's lifetime: 0 is the server's default (15 min), at most an hour.
	TTL time.Duration
	// Scopes are the grant's (nil: the server's default for a grant).
	Scopes []string
}

func (s Step) run() string {
	if s.Run == "" {
		return s.Workflow
	}
	return s.Run
}

// Key is the step's Idempotency-Key: the same for every attempt of the step.
func (s Step) Key() string {
	h := sha256.Sum256([]byte(s.Workflow + "\x00" + s.run() + "\x00" + s.ID))
	return "step-" + hex.EncodeToString(h[:16])
}

// Grant mints the attempt's grant and answers a client that calls with it.
func (s Step) Grant(ctx context.Context, c *lbb.Client) (*lbb.Client, *lbb.Grant, error) {
	if s.Workflow == "" || s.ID == "" {
		return nil, nil, errors.New("lbb step: Workflow and ID name the step")
	}
	req := lbb.GrantRequest{Name: "step " + s.ID, Scopes: s.Scopes, TTLSeconds: int64(s.TTL / time.Second),
		Origin: lbb.Origin{Workflow: s.Workflow, Run: s.run(), Step: s.ID}}
	if s.Attempt > 0 {
		req.Origin.Attempt = strconv.Itoa(s.Attempt)
	}
	if s.Budget != nil {
		req.Budget = *s.Budget
	}
	g, err := c.Grants.Mint(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return c.WithAPIKey(g.Token), g, nil
}

// Run runs code once for the step, in a sandbox of its own (a one-call run).
func Run(ctx context.Context, c *lbb.Client, s Step, p lbb.RunParams) (*lbb.Run, error) {
	gc, _, err := s.Grant(ctx, c)
	if err != nil {
		return nil, err
	}
	p.IdempotencyKey, p.Origin = s.Key(), nil
	return gc.Sandboxes.Run(ctx, p)
}

// RunIn runs code once for the step in a running sandbox, next to its files.
func RunIn(ctx context.Context, c *lbb.Client, s Step, sandboxID string, p lbb.RunParams) (*lbb.Run, error) {
	gc, _, err := s.Grant(ctx, c)
	if err != nil {
		return nil, err
	}
	p.IdempotencyKey = s.Key()
	return gc.Sandboxes.RunIn(ctx, sandboxID, p)
}

// Exec runs a process once for the step in a running sandbox and answers its record.
func Exec(ctx context.Context, c *lbb.Client, s Step, sandboxID string, p lbb.ExecParams) (*lbb.Command, error) {
	gc, _, err := s.Grant(ctx, c)
	if err != nil {
		return nil, err
	}
	p.IdempotencyKey = s.Key()
	return gc.Sandboxes.Exec(ctx, sandboxID, p)
}

// RunCode is the template step "Run code" (seed 000): code and a config, the step's input
// as run's input, once for the step in a sandbox of its own; it answers the result.
func RunCode(ctx context.Context, c *lbb.Client, s Step, code string, config, input any) (*lbb.Run, error) {
	return Run(ctx, c, s, lbb.RunParams{Code: code, Config: config, Input: input})
}
