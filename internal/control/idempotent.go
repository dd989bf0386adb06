package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Routes whose idempotency keys are kept. One-call runs use RouteCreateSandbox too: a key
// names one call, whichever route it was sent to, and the request hash tells them apart.
const (
	RouteExec        = "POST /v1/sandboxes/{id}/commands"
	RouteRunIn       = "POST /v1/sandboxes/{id}/run"
	RouteKeepFile    = "POST /v1/files"
	RouteImportFile  = "PUT /v1/sandboxes/files/content"
	maxIdempotentKey = 255
)

// HashRequest identifies a request by its route, graph and what it asks (the canonical
// parts, joined), for calls whose body is not JSON.
func HashRequest(route, graph string, parts ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", route, graph)
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func checkKey(key string) error {
	if len(key) > maxIdempotentKey {
		return errdefs.InvalidArgument("Idempotency-Key is longer than %d bytes", maxIdempotentKey)
	}
	return nil
}

// idempotent does a call that runs no code at most once for (graph, key): the first call
// reserves the key and does it; a call with the same key and request gets the stored answer
// (waiting while the first is at work), one with another request 422. A call that fails
// keeps nothing, so that a retry with its key does the work. Without a key it just does it.
// do runs to its end even when the caller goes away, so that the key is finished.
func (s *Service) idempotent(ctx context.Context, c Caller, key, route, hash string, do func(ctx context.Context) (Response, error)) (Response, error) {
	work := func() (Response, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		return do(wctx)
	}
	if key == "" {
		return work()
	}
	if err := checkKey(key); err != nil {
		return Response{}, err
	}
	deadline := time.Now().Add(s.cfg.MaxWait)
	for {
		r, err := s.st.GetIdempotency(ctx, c.Graph, key)
		switch {
		case err == nil:
			if r.RequestHash != hash {
				return Response{}, errdefs.New(errdefs.ClassUnprocessable, errdefs.CodeIdempotencyKeyReused,
					"Idempotency-Key %q was used with a different request in graph %s", key, c.Graph)
			}
			if r.State == store.IdempotencyDone {
				return Response{Status: r.ResponseStatus, Body: r.ResponseBody, Replayed: true}, nil
			}
			if time.Now().After(deadline) {
				return Response{}, errdefs.Conflict("a call with Idempotency-Key %q is still at work; retry later", key)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return Response{}, ctx.Err()
			}
			continue
		case !errdefs.IsNotFound(err):
			return Response{}, err
		}
		err = s.st.CreateIdempotency(ctx, store.Idempotency{Graph: c.Graph, Key: key, Route: route, RequestHash: hash,
			State: store.IdempotencyRunning, CreatedAt: s.now()})
		if errdefs.IsConflict(err) {
			continue // another call took the key between our read and insert
		} else if err != nil {
			return Response{}, err
		}
		resp, err := work()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err != nil {
			if derr := s.st.DeleteIdempotency(fctx, c.Graph, key); derr != nil {
				s.log.Error("releasing an idempotency key", "graph", c.Graph, "err", derr)
			}
			return Response{}, err
		}
		r, err = s.st.GetIdempotency(fctx, c.Graph, key)
		if err == nil {
			now := s.now()
			r.State, r.ResponseStatus, r.ResponseBody, r.CompletedAt = store.IdempotencyDone, resp.Status, resp.Body, &now
			err = s.st.UpdateIdempotency(fctx, r)
		}
		if err != nil {
			s.log.Error("finishing an idempotency key", "graph", c.Graph, "err", err)
		}
		return resp, nil
	}
}

// storedAnswer answers the stored response of a finished call made with key (ok), 422 when
// that call was another request; nothing without a key or a finished call.
func (s *Service) storedAnswer(ctx context.Context, graph, key, hash string) (_ Response, ok bool, _ error) {
	if key == "" {
		return Response{}, false, nil
	}
	r, err := s.st.GetIdempotency(ctx, graph, key)
	if err != nil || r.State != store.IdempotencyDone {
		return Response{}, false, nil
	}
	if r.RequestHash != hash {
		return Response{}, false, errdefs.New(errdefs.ClassUnprocessable, errdefs.CodeIdempotencyKeyReused,
			"Idempotency-Key %q was used with a different request in graph %s", key, graph)
	}
	return Response{Status: r.ResponseStatus, Body: r.ResponseBody, Replayed: true}, true, nil
}

func jsonResponse(status int, v any) (Response, error) {
	b, err := marshal(v)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: status, Body: b}, nil
}
