// Package idempotency makes a retried call safe: a call sent with an Idempotency-Key is
// done at most once for its (graph, key), and a retry of it gets the stored answer.
//
// A key's life has three steps, each a function here: Reserve writes its durable record
// before any work starts; Answer replays what a finished record holds (or rejects a
// different request sent with the key); Finish stores the answer. Keys.Do runs the three
// for a call that runs no code; one-call runs and commands reserve in the transaction that
// writes their records and finish in the one that records their end, with the same steps.
//
// The package knows nothing of HTTP: an answer's Outcome says what the call did, and the API
// turns it into a status.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"log/slog"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Outcome is what a call did. Its numbers are what a finished key stores (the record's
// ResponseStatus) and what its audit entry records; they are the HTTP statuses earlier
// versions stored, so that a key finished before keeps replaying the same answer. Only the
// API maps an Outcome to HTTP.
type Outcome int

// The outcomes. Never renumber them: stored records hold these numbers.
const (
	// Done: the call did its work; the body is the result.
	Done Outcome = 200
	// Created: the call made a record (a sandbox, a File, a snapshot); the body is it.
	Created Outcome = 201
	// Accepted: the call started work that is still going (a command past its wait); the
	// body is the record as it stands.
	Accepted Outcome = 202
)

// Response is a call's answer: what it did and its JSON body. Replayed says it is the
// stored answer of an earlier call with the same key.
type Response struct {
	Outcome  Outcome
	Body     json.RawMessage
	Replayed bool
}

// JSON answers v as the body of a call with outcome o.
func JSON(o Outcome, v any) (Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Response{}, err
	}
	return Response{Outcome: o, Body: b}, nil
}

// MaxKey is the longest key, in bytes.
const MaxKey = 255

// ErrKeyRequired: a call that runs code was sent without a key.
var ErrKeyRequired = errdefs.New(errdefs.ClassInvalidArgument, errdefs.CodeIdempotencyKeyRequired,
	"a call that runs code needs an Idempotency-Key header: a fresh random value for each new call (e.g. "+
		"-H \"Idempotency-Key: $(cat /proc/sys/kernel/random/uuid)\"), the same value on a retry of that call, so that the code runs at most once; the SDKs and the CLI send one for you")

// Check rejects a key longer than MaxKey. No key ("") is fine: the call is then just done.
func Check(key string) error {
	if len(key) > MaxKey {
		return errdefs.InvalidArgument("Idempotency-Key is longer than %d bytes", MaxKey)
	}
	return nil
}

// Require is Check for calls that run code, which need a key.
func Require(key string) error {
	if key == "" {
		return ErrKeyRequired
	}
	return Check(key)
}

func reused(graph, key string) error {
	return errdefs.New(errdefs.ClassUnprocessable, errdefs.CodeIdempotencyKeyReused,
		"Idempotency-Key %q was used with a different request in graph %s", key, graph)
}

func stillAtWork(key string) error {
	return errdefs.Conflict("a call with Idempotency-Key %q is still at work; retry later", key)
}

// Hash identifies a request by its route, graph and what it asks, for calls whose body is
// not JSON: each part is framed by its length, so that no two lists of parts collide.
func Hash(route, graph string, parts ...string) string {
	h := newHash(route, graph)
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// HashJSON identifies a request by its route, graph and the canonical JSON of its body (keys
// sorted, whitespace dropped), without wait_ms, which says how long the caller waits, not
// what it asks. The body must be a JSON object.
func HashJSON(route, graph string, body []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return "", errdefs.InvalidArgument("the body is not a JSON object: %v", err)
	}
	delete(v, "wait_ms")
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	h := newHash(route, graph)
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// newHash starts a request hash. Stored keys hold these hashes: changing how a request is
// hashed makes every retry across the change a different request.
func newHash(route, graph string) hash.Hash {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", route, graph)
	return h
}

// Store is what keys need of the record store; store.Store and a transaction's
// store.Queries have it.
type Store interface {
	CreateIdempotency(ctx context.Context, r store.Idempotency) error
	GetIdempotency(ctx context.Context, graph, key string) (store.Idempotency, error)
	UpdateIdempotency(ctx context.Context, r store.Idempotency) error
	DeleteIdempotency(ctx context.Context, graph, key string) error
}

// Reservation is the record that reserves key for a request with hash, made at.
func Reservation(graph, key, route, hash string, at time.Time) store.Idempotency {
	return store.Idempotency{Graph: graph, Key: key, Route: route, RequestHash: hash,
		State: store.IdempotencyRunning, CreatedAt: at}
}

// Reserve writes r unless its key is taken, in which case it answers the record that took
// it. A Conflict error says another call took the key between the read and the write: call
// again to read its record.
func Reserve(ctx context.Context, st Store, r store.Idempotency) (existing *store.Idempotency, err error) {
	got, err := st.GetIdempotency(ctx, r.Graph, r.Key)
	if err == nil {
		return &got, nil
	}
	if !errdefs.IsNotFound(err) {
		return nil, err
	}
	return nil, st.CreateIdempotency(ctx, r)
}

// Answer replays r for a request with hash: the stored answer when r is finished (done),
// nothing while its call is at work, the reused error when r was made for another request.
func Answer(r store.Idempotency, hash string) (_ Response, done bool, _ error) {
	if r.RequestHash != hash {
		return Response{}, false, reused(r.Graph, r.Key)
	}
	if r.State != store.IdempotencyDone {
		return Response{}, false, nil
	}
	resp := Stored(r)
	resp.Replayed = true
	return resp, true, nil
}

// Stored is the answer a finished record holds.
func Stored(r store.Idempotency) Response {
	return Response{Outcome: Outcome(r.ResponseStatus), Body: r.ResponseBody}
}

// Finish marks r done with answer resp at.
func Finish(r *store.Idempotency, resp Response, at *time.Time) {
	r.State, r.ResponseStatus, r.ResponseBody, r.CompletedAt = store.IdempotencyDone, int(resp.Outcome), resp.Body, at
}

// Keys does calls under keys kept in a store.
type Keys struct {
	Store Store
	// Now is the clock the records' times are read from.
	Now func() time.Time
	// MaxWait is how long a call waits for an earlier one with its key to finish.
	MaxWait time.Duration
	Log     *slog.Logger
}

// pollEvery is how often a call waiting for an earlier one with its key reads its record.
const pollEvery = 100 * time.Millisecond

// workTimeout bounds a call's work once begun, since it outlives its caller.
const workTimeout = 10 * time.Minute

// Do does a call that runs no code at most once for (graph, key): the first call reserves
// the key and does it; a call with the same key and request gets the stored answer (waiting
// up to MaxWait while the first is at work), one with another request the reused error. A
// call that fails keeps nothing, so that a retry with its key does the work. Without a key
// it just does it. do runs to its end even when the caller goes away, so that the key is
// finished. do may finish the key itself, in the transaction that records its work (one
// commit instead of two): a key do left finished is kept as it is.
func (k Keys) Do(ctx context.Context, graph, key, route, hash string, do func(ctx context.Context) (Response, error)) (Response, error) {
	work := func() (Response, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), workTimeout)
		defer cancel()
		return do(wctx)
	}
	if key == "" {
		return work()
	}
	if err := Check(key); err != nil {
		return Response{}, err
	}
	deadline := time.Now().Add(k.MaxWait)
	for {
		existing, err := Reserve(ctx, k.Store, Reservation(graph, key, route, hash, k.Now()))
		if errdefs.IsConflict(err) {
			continue // another call took the key between our read and write
		} else if err != nil {
			return Response{}, err
		}
		if existing != nil {
			resp, done, err := Answer(*existing, hash)
			if done || err != nil {
				return resp, err
			}
			if time.Now().After(deadline) {
				return Response{}, stillAtWork(key)
			}
			select {
			case <-time.After(pollEvery):
			case <-ctx.Done():
				return Response{}, ctx.Err()
			}
			continue
		}
		return k.doReserved(ctx, graph, key, work)
	}
}

// DoUnreserved is Do for work that writes its key itself, finished (Finished), in the
// transaction that records the work, without reserving it first: one durable write instead
// of two. It suits work whose effect before that commit is undone when the commit fails and
// is found after a crash (a started sandbox that no record names is destroyed, and reaped by
// recovery). A key taken before the work, or by a concurrent call whose commit won (the work
// then fails with a Conflict), is answered as Do answers it: the stored answer, waiting for a
// call at work; a call that took it and failed meanwhile released it, and Do does the work.
//
// do is told whether the key was reserved for it (by Do): when not, it writes the key with
// Finished, and must fail with a Conflict when it finds the key taken.
func (k Keys) DoUnreserved(ctx context.Context, graph, key, route, hash string, do func(ctx context.Context, reserved bool) (Response, error)) (Response, error) {
	reserved := func(ctx context.Context) (Response, error) { return do(ctx, key != "") }
	if key == "" {
		return k.Do(ctx, graph, key, route, hash, reserved)
	}
	if err := Check(key); err != nil {
		return Response{}, err
	}
	if _, err := k.Store.GetIdempotency(ctx, graph, key); err == nil {
		return k.Do(ctx, graph, key, route, hash, reserved)
	} else if !errdefs.IsNotFound(err) {
		return Response{}, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), workTimeout)
	defer cancel()
	resp, err := do(wctx, false)
	if errdefs.IsConflict(err) {
		if _, gerr := k.Store.GetIdempotency(ctx, graph, key); gerr == nil {
			return k.Do(ctx, graph, key, route, hash, reserved)
		}
	}
	return resp, err
}

// Finished is the record of key, finished with answer resp at, for work that writes it in
// its own transaction without a reservation (DoUnreserved).
func Finished(graph, key, route, hash string, resp Response, at time.Time) store.Idempotency {
	r := Reservation(graph, key, route, hash, at)
	Finish(&r, resp, &at)
	return r
}

// doReserved does the work of a reserved key and finishes the key, or releases it when the
// work fails.
func (k Keys) doReserved(ctx context.Context, graph, key string, work func() (Response, error)) (Response, error) {
	resp, err := work()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err != nil {
		if derr := k.Store.DeleteIdempotency(fctx, graph, key); derr != nil {
			k.log().Error("releasing an idempotency key", "graph", graph, "err", derr)
		}
		return Response{}, err
	}
	r, err := k.Store.GetIdempotency(fctx, graph, key)
	if err == nil && r.State == store.IdempotencyDone {
		return resp, nil // the work finished the key in its own transaction
	}
	if err == nil {
		now := k.Now()
		Finish(&r, resp, &now)
		err = k.Store.UpdateIdempotency(fctx, r)
	}
	if err != nil {
		k.log().Error("finishing an idempotency key", "graph", graph, "err", err)
	}
	return resp, nil
}

// Stored answers the stored answer of a finished call made with key (ok), the reused error
// when that call was another request; nothing without a key or a finished call. A call
// whose replay needs no valid request asks it first.
func (k Keys) Stored(ctx context.Context, graph, key, hash string) (_ Response, ok bool, _ error) {
	if key == "" {
		return Response{}, false, nil
	}
	r, err := k.Store.GetIdempotency(ctx, graph, key)
	if err != nil || r.State != store.IdempotencyDone {
		return Response{}, false, nil
	}
	return Answer(r, hash)
}

func (k Keys) log() *slog.Logger {
	if k.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return k.Log
}
