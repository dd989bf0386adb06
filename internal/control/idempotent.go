package control

import "github.com/littlebigbrain/lbb/internal/idempotency"

// Routes whose idempotency keys are kept. One-call runs use RouteCreateSandbox too: a key
// names one call, whichever route it was sent to, and the request hash tells them apart.
const (
	RouteExec       = "POST /v1/sandboxes/{id}/commands"
	RouteRunIn      = "POST /v1/sandboxes/{id}/run"
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
