package control

import (
	"context"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Routes whose idempotency keys are kept. One-call runs use RouteCreateSandbox too: a key
// names one call, whichever route it was sent to, and the request hash tells them apart.
const (
	RouteExec       = "POST /v1/sandboxes/{id}/commands"
	RouteRunIn      = "POST /v1/sandboxes/{id}/run"
	RouteCode       = "POST /v1/sandboxes/{id}/code"
	RouteKeepFile   = "POST /v1/files"
	RouteImportFile = "PUT /v1/sandboxes/files/content"
)

// Response is a call's answer: what it did (idempotency.Done, Created or Accepted, which
// the API turns into HTTP) and its JSON body.
type Response = idempotency.Response

// keys does the service's calls under idempotency keys.
func (s *Service) keys() idempotency.Keys {
	return idempotency.Keys{Store: s.st, Now: s.now, MaxWait: s.cfg.MaxWait, Log: s.log}
}

// keyTaken reports whether an earlier call reserved key in graph.
func (s *Service) keyTaken(ctx context.Context, graph, key string) bool {
	if key == "" {
		return false
	}
	_, err := s.st.GetIdempotency(ctx, graph, key)
	return err == nil
}

// keyOfCommand answers the idempotency record of the call that started a command; ok is
// false when none did (a command started without a key) or on an error.
func keyOfCommand(ctx context.Context, q store.Queries, commandID string) (r store.Idempotency, ok bool, err error) {
	r, err = q.GetIdempotencyByCommand(ctx, commandID)
	if errdefs.IsNotFound(err) {
		return r, false, nil
	}
	return r, err == nil, err
}

// finishKey, in the transaction q, keeps resp (a run's without its result) as the answer of the idempotency record r and
// writes the call's audit entry with target, unless the entry is already taken (or there is
// none).
func (s *Service) finishKey(ctx context.Context, q store.Queries, r store.Idempotency, resp Response, at *time.Time, audit *PendingAudit, target string) error {
	if runAnswer(r) {
		// The command record keeps the result; a replay reads it back (storedAnswer).
		resp.Body = withoutResult(resp.Body)
	}
	idempotency.Finish(&r, resp, at)
	if err := q.UpdateIdempotency(ctx, r); err != nil {
		return err
	}
	if e, ok := audit.Take(); ok {
		e.Status, e.Target, e.At = int(resp.Outcome), target, s.now()
		return q.AppendAudit(ctx, e)
	}
	return nil
}
