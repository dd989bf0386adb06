package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/store"
)

// LostError is what a lost command's record says.
const LostError = "the server stopped while this command ran (crash or kill); it was not run again"

// Recovered says what Recover found.
type Recovered struct {
	Lost      []string // commands marked lost
	Sandboxes []string // sandbox records ended as lost
	Reaped    []string // sandboxes the runtime still held, destroyed
	// Stopped are long-lived sandboxes that were running: stopped, their disks kept.
	Stopped []string
	// Expired are long-lived sandboxes whose expiry passed while the server was down.
	Expired []string
	// Released are idempotency keys of calls that ran no code and were cut off; a retry
	// with one does the work.
	Released int
	// BlobsRemoved are blobs that no File named (a crash cut off their File's creation).
	BlobsRemoved int
}

// Recover runs at start, before the server serves. It recovers the records this control
// plane holds (holders.go): those of its previous life on this data directory, those from
// before holders, and those of peers on the store that are dead. Every command still queued
// or running was cut off, so it is marked lost (and its idempotency key answers that record,
// so a retry never runs the code again); every sandbox record still live is ended (a
// long-lived one stopped, its disk kept); and every sandbox the runtime still holds that no
// record of any control plane keeps is destroyed.
func (s *Service) Recover(ctx context.Context) (Recovered, error) {
	var rec Recovered
	holders, err := s.claimAtStart(ctx)
	if err != nil {
		return rec, fmt.Errorf("recover: %w", err)
	}
	for _, h := range holders {
		if err := s.recoverHeld(ctx, h, &rec, false); err != nil {
			return rec, fmt.Errorf("recover: %w", err)
		}
		if h != s.id {
			if err := s.st.FinishAdoption(ctx, h, s.now()); err != nil {
				return rec, fmt.Errorf("recover: adopting control plane %q: %w", h, err)
			}
			s.adopted(h, Recovered{})
		}
	}
	if s.id != "" {
		if err := s.st.RegisterControlPlane(ctx, s.id, s.now()); err != nil {
			return rec, fmt.Errorf("recover: %w", err)
		}
	}
	s.recovered.Store(true)
	if _, err := s.sweepSnapshots(ctx); err != nil {
		return rec, fmt.Errorf("recover: snapshots: %w", err)
	}
	// A blob a live peer is uploading has no File yet: blobs are swept only when no other
	// control plane lives.
	peers, err := s.livePeers(ctx)
	if err != nil {
		return rec, fmt.Errorf("recover: %w", err)
	}
	if len(peers) == 0 {
		if rec.BlobsRemoved, err = s.sweepBlobs(ctx); err != nil {
			return rec, fmt.Errorf("recover: blobs: %w", err)
		}
	}
	// What the records still name stays: stopped sandboxes keep their disk, paused ones their
	// checkpoint (this control plane's own were stopped or ended above unless checkpointed),
	// and whatever else is live is a live peer's. Nothing else is meant to exist after a
	// restart. Listed last, just before the Reap, so that a peer's sandbox made meanwhile is
	// named too.
	live, err := s.st.ListSandboxesByStatus(ctx, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped)
	if err != nil {
		return rec, fmt.Errorf("recover: %w", err)
	}
	// The snapshots of the sandboxes that stay are kept too; any other snapshot files go.
	var kept []string
	for _, sb := range live {
		kept = append(kept, sb.ID)
		if sb.OneCall {
			continue // no snapshots
		}
		snaps, err := s.allSnapshots(ctx, sb.Graph, sb.ID)
		if err != nil {
			return rec, fmt.Errorf("recover: snapshots: %w", err)
		}
		kept = append(kept, snaps...)
	}
	rec.Reaped, err = s.host.Reap(ctx, kept)
	s.metrics.reaped.Add(float64(len(rec.Reaped)))
	if err != nil {
		return rec, fmt.Errorf("recover: %w", err)
	}
	return rec, nil
}

// recoverHeld recovers the records holder holds: its commands queued or running are marked
// lost, its live one-call sandboxes ended lost (destroyed on the host too when destroy: a
// peer's, while the hosts run on), its long-lived sandboxes stopped and held here
// (recoverLongLived), and its reservations of calls that ran no code released.
func (s *Service) recoverHeld(ctx context.Context, holder string, rec *Recovered, destroy bool) error {
	now := s.now()
	cmds, err := s.st.ListCommandsHeld(ctx, holder, store.CommandQueued, store.CommandRunning)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		err := s.st.WithTx(ctx, func(q store.Queries) error {
			c.Status, c.OK, c.Error, c.FinishedAt = store.CommandLost, false, LostError, &now
			if c.StartedAt != nil {
				c.DurationMs = now.Sub(*c.StartedAt).Milliseconds()
			}
			if err := q.UpdateCommand(ctx, c); err != nil {
				return err
			}
			sb, err := q.GetSandbox(ctx, c.Graph, c.SandboxID)
			if err != nil {
				return err
			}
			if sb.EndedAt == nil && sb.OneCall {
				sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, store.EndLost, &now
				if err := q.UpdateSandbox(ctx, sb); err != nil {
					return err
				}
			}
			r, ok, err := keyOfCommand(ctx, q, c.ID)
			if !ok {
				return err
			}
			var body []byte
			if c.Kind == store.KindProcess || c.Kind == store.KindCode {
				body, err = json.Marshal(c)
			} else {
				body, err = json.Marshal(render(c, sb))
			}
			if err != nil {
				return err
			}
			return s.finishKey(ctx, q, r, Response{Outcome: idempotency.Done, Body: body}, &now, nil, c.ID)
		})
		if err != nil {
			return fmt.Errorf("marking %s lost: %w", c.ID, err)
		}
		s.metrics.lost.Inc()
		s.log.Warn("command lost", "graph", c.Graph, "command", c.ID, "sandbox", c.SandboxID, "holder", holder)
		rec.Lost = append(rec.Lost, c.ID)
	}
	if err := s.recoverLongLived(ctx, holder, rec); err != nil {
		return err
	}
	live, err := s.st.ListSandboxesHeld(ctx, holder, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused)
	if err != nil {
		return err
	}
	for _, sb := range live {
		if !sb.OneCall {
			continue // recoverLongLived stopped it
		}
		if destroy {
			if _, err := s.host.Destroy(ctx, sb.ID); err != nil && !errdefs.IsNotFound(err) {
				s.log.Warn("destroying a lost sandbox", "sandbox", sb.ID, "err", err)
			}
		}
		sb.Status, sb.EndReason, sb.EndedAt = store.SandboxDestroyed, store.EndLost, &now
		if err := s.st.UpdateSandbox(ctx, sb); err != nil {
			return fmt.Errorf("ending %s: %w", sb.ID, err)
		}
		s.log.Warn("sandbox lost", "graph", sb.Graph, "sandbox", sb.ID, "holder", holder)
		rec.Sandboxes = append(rec.Sandboxes, sb.ID)
	}
	// Calls that ran no code and were cut off leave their keys reserved: release them.
	pending, err := s.st.ListIdempotencyHeld(ctx, holder, store.IdempotencyRunning)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if r.CommandID != "" {
			continue
		}
		if err := s.st.DeleteIdempotency(ctx, r.Graph, r.Key); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("releasing an idempotency key: %w", err)
		}
		rec.Released++
	}
	return nil
}

// StartJanitor enforces retention every JanitorInterval until StopJanitor.
func (s *Service) StartJanitor() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.janitorStop != nil {
		return
	}
	s.janitorStop, s.janitorDone = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(s.cfg.JanitorInterval)
		defer t.Stop()
		for {
			if _, err := s.Sweep(context.Background()); err != nil {
				s.log.Error("janitor", "err", err)
			}
			s.expireDue()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}(s.janitorStop, s.janitorDone)
}

// StopJanitor stops the janitor and waits for it.
func (s *Service) StopJanitor() {
	s.mu.Lock()
	stop, done := s.janitorStop, s.janitorDone
	s.janitorStop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Swept says what one janitor pass removed.
type Swept struct {
	Sandboxes     int // sandboxes deleted with their commands
	OutputExpired int // one-call runs whose output was dropped
}

// Sweep enforces retention once: sandboxes that ended more than SandboxRetention ago go,
// with their commands; one-call runs that finished more than OutputRetention ago lose their
// output, in their record and in the answer their idempotency key replays. Idempotency keys
// themselves stay, so that a key never runs code twice.
func (s *Service) Sweep(ctx context.Context) (Swept, error) {
	var sw Swept
	const batch = 500
	now := s.now()
	for {
		var n int
		err := s.st.WithTx(ctx, func(q store.Queries) error {
			ids, err := q.ExpireRunOutput(ctx, now.Add(-s.cfg.OutputRetention), batch)
			if err != nil {
				return err
			}
			n = len(ids)
			for _, id := range ids {
				r, err := q.GetIdempotencyByCommand(ctx, id)
				if errdefs.IsNotFound(err) || err == nil && len(r.ResponseBody) == 0 {
					continue
				} else if err != nil {
					return err
				}
				r.ResponseBody = expireOutput(r.ResponseBody)
				if err := q.UpdateIdempotency(ctx, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return sw, fmt.Errorf("janitor: expiring output: %w", err)
		}
		sw.OutputExpired += n
		if n < batch {
			break
		}
	}
	if _, err := s.sweepSnapshots(ctx); err != nil {
		return sw, fmt.Errorf("janitor: removing snapshots: %w", err)
	}
	if _, err := s.sweepLayers(ctx); err != nil {
		return sw, fmt.Errorf("janitor: removing unused template layers: %w", err)
	}
	// A preview past its expiry answers 404 anyway; its row goes a day later.
	if _, err := s.st.DeleteExpiredPreviews(ctx, now.Add(-24*time.Hour)); err != nil {
		return sw, fmt.Errorf("janitor: removing expired previews: %w", err)
	}
	for {
		n, err := s.st.DeleteEndedSandboxes(ctx, now.Add(-s.cfg.SandboxRetention), batch)
		if err != nil {
			return sw, fmt.Errorf("janitor: deleting sandboxes: %w", err)
		}
		sw.Sandboxes += n
		if n < batch {
			break
		}
	}
	if sw.Sandboxes > 0 || sw.OutputExpired > 0 {
		s.log.Info("janitor", "sandboxes_deleted", sw.Sandboxes, "outputs_expired", sw.OutputExpired)
	}
	return sw, nil
}

// expireOutput drops head and tail from the streams of a stored run answer.
func expireOutput(body []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return body
	}
	for _, k := range []string{"stdout", "stderr"} {
		var o store.Output
		if err := json.Unmarshal(m[k], &o); err != nil {
			continue
		}
		o.Head, o.Tail, o.Expired = "", "", true
		b, _ := json.Marshal(o)
		m[k] = b
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
