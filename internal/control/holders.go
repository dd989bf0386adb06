package control

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/datafile"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Control planes that share a store (PostgreSQL, docs/deploy.md) each hold the records they
// insert: the store stamps them with the control plane's id (sqlstore's SetHolder). A
// control plane's start recovers only what it holds, what its previous life on the same data
// directory held, and what dead peers held; while it runs, it heartbeats, and adopts the
// peers whose heartbeats stopped: their commands end lost (never run again), their
// long-lived sandboxes are stopped, disks kept, and held here, so that their calls work
// through this control plane.

// PlaneIDFile is the file in the data directory that keeps the control plane's id, so that
// a restart on the same data directory recognises its previous life.
const PlaneIDFile = "control-plane-id"

// heartbeatEvery is how often a control plane on a shared store heartbeats, and looks for
// dead peers (at most: a third of PeerDeadAfter, so that a live one never looks dead).
const heartbeatEvery = 2 * time.Second

// PlaneID answers the id of the control plane of data directory dir, made at first use.
func PlaneID(dir string) (string, error) {
	id, err := datafile.ReadOrCreate(filepath.Join(dir, PlaneIDFile), func() (string, error) {
		return "cp-" + strings.ToLower(rand.Text()[:16]), nil
	})
	if err != nil {
		return "", fmt.Errorf("control plane id: %w", err)
	}
	return id, nil
}

// PlaneID answers this control plane's id ("" when it has none: one process alone).
func (s *Service) PlaneID() string { return s.id }

// Fenced is closed when peers took this control plane for dead and adopted its records
// while it still ran (its heartbeats stalled longer than --peer-dead-after): what it runs
// now is recorded lost already, so it should stop at once, as a crash would, without
// recording anything more (and may start again, as a new life).
func (s *Service) Fenced() <-chan struct{} { return s.fenced }

// deadBefore answers the heartbeat time before which a peer is dead: on a store of one
// process (SQLite) every other holder is dead at once.
func (s *Service) deadBefore(now time.Time) time.Time {
	if !s.shared {
		return now.Add(100 * 365 * 24 * time.Hour)
	}
	return now.Add(-s.cfg.PeerDeadAfter)
}

// claimAtStart adopts this control plane's previous life (waiting for a peer that adopted it
// to finish), the records from before holders and every dead peer, starts the heartbeat, and
// answers the holders whose records Recover recovers.
func (s *Service) claimAtStart(ctx context.Context) ([]string, error) {
	if s.id == "" {
		return []string{""}, nil
	}
	now := s.now()
	won, err := s.st.AdoptControlPlane(ctx, s.id, s.id, now.Add(time.Hour), now)
	if err != nil {
		return nil, err
	}
	if !won {
		if err := s.awaitAdoption(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := s.st.GetControlPlane(ctx, s.id); errdefs.IsNotFound(err) {
		// The first life: registered now, so that peers see it from the start.
		if err := s.st.RegisterControlPlane(ctx, s.id, now); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	} else if !won {
		if err := s.st.RegisterControlPlane(ctx, s.id, now); err != nil {
			return nil, err
		}
	}
	if s.shared {
		s.startLiveness()
	}
	pending, err := s.adoptDead(ctx)
	if err != nil {
		return nil, err
	}
	// Its own records always: also those a life that a peer adopted made after the adoption
	// (before its next heartbeat found it out).
	return append([]string{s.id}, pending...), nil
}

// awaitAdoption waits while a peer that adopted this control plane's previous life has not
// finished recovering it: its records move to the peer, and only then does a new life begin.
func (s *Service) awaitAdoption(ctx context.Context) error {
	deadline := time.Now().Add(2*s.cfg.PeerDeadAfter + 30*time.Second)
	for {
		p, err := s.st.GetControlPlane(ctx, s.id)
		if errdefs.IsNotFound(err) || err == nil && (p.AdoptedBy == "" || p.RecoveredAt != nil) {
			return nil
		} else if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control plane %s adopted this one's previous life and has not finished recovering it", p.AdoptedBy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// adoptDead adopts every dead peer it can (one adopter wins each) and answers the control
// planes this one adopted and has not recovered yet, its previous life aside.
func (s *Service) adoptDead(ctx context.Context) ([]string, error) {
	now := s.now()
	planes, err := s.st.ListControlPlanes(ctx)
	if err != nil {
		return nil, err
	}
	dead := s.deadBefore(now)
	for _, p := range planes {
		if p.ID == s.id || !p.HeartbeatAt.Before(dead) || p.RecoveredAt != nil ||
			p.AdoptedBy != "" && p.AdoptedBy != p.ID {
			continue
		}
		if _, err := s.st.AdoptControlPlane(ctx, p.ID, s.id, dead, now); err != nil {
			return nil, fmt.Errorf("adopting control plane %q: %w", p.ID, err)
		}
	}
	if planes, err = s.st.ListControlPlanes(ctx); err != nil {
		return nil, err
	}
	var pending []string
	for _, p := range planes {
		if p.ID != s.id && p.AdoptedBy == s.id && p.RecoveredAt == nil {
			pending = append(pending, p.ID)
		}
	}
	return pending, nil
}

// livePeers answers the other control planes whose heartbeats are recent.
func (s *Service) livePeers(ctx context.Context) ([]string, error) {
	if s.id == "" || !s.shared {
		return nil, nil
	}
	planes, err := s.st.ListControlPlanes(ctx)
	if err != nil {
		return nil, err
	}
	dead := s.deadBefore(s.now())
	var live []string
	for _, p := range planes {
		if p.ID != s.id && p.ID != "" && p.AdoptedBy == "" && !p.HeartbeatAt.Before(dead) {
			live = append(live, p.ID)
		}
	}
	return live, nil
}

// startLiveness heartbeats every heartbeatEvery until Shutdown and, once Recover is done,
// adopts the peers that died.
func (s *Service) startLiveness() {
	stop, done := make(chan struct{}), make(chan struct{})
	s.liveStop, s.liveDone = stop, done
	every := min(heartbeatEvery, s.cfg.PeerDeadAfter/3)
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every*4)
			s.beat(ctx)
			if s.recovered.Load() {
				s.adoptAndRecover(ctx)
			}
			cancel()
		}
	}()
}

func (s *Service) stopLiveness() {
	if s.liveStop != nil {
		close(s.liveStop)
		<-s.liveDone
		s.liveStop = nil
	}
}

// beat heartbeats; a heartbeat refused says that a peer adopted this control plane.
func (s *Service) beat(ctx context.Context) {
	ok, err := s.st.Heartbeat(ctx, s.id, s.now())
	if err != nil {
		s.log.Warn("control plane heartbeat", "err", err)
		return
	}
	if !ok {
		s.fenceOnce.Do(func() {
			p, _ := s.st.GetControlPlane(ctx, s.id)
			s.log.Error("a peer took this control plane for dead and adopted its records (heartbeats stalled past --peer-dead-after); stopping",
				"control_plane", s.id, "adopted_by", p.AdoptedBy)
			// Its sandboxes are the adopter's now: Shutdown leaves them alone.
			s.lmu.Lock()
			clear(s.held)
			s.lmu.Unlock()
			close(s.fenced)
		})
	}
}

// adoptAndRecover adopts the peers that died and recovers what they held, as a start does.
func (s *Service) adoptAndRecover(ctx context.Context) {
	pending, err := s.adoptDead(ctx)
	if err != nil {
		s.log.Error("adopting dead control planes", "err", err)
		return
	}
	for _, id := range pending {
		var rec Recovered
		if err := s.recoverHeld(ctx, id, &rec, true); err != nil {
			s.log.Error("recovering a dead control plane's records", "control_plane", id, "err", err)
			continue
		}
		if err := s.st.FinishAdoption(ctx, id, s.now()); err != nil {
			s.log.Error("adopting a dead control plane", "control_plane", id, "err", err)
			continue
		}
		s.adopted(id, rec)
	}
}

// adopted counts and logs one adoption of control plane id.
func (s *Service) adopted(id string, rec Recovered) {
	s.metrics.adoptions.Inc()
	s.log.Warn("adopted a dead control plane", "control_plane", id, "by", s.id, "commands_lost", len(rec.Lost),
		"sandboxes_ended", len(rec.Sandboxes), "sandboxes_stopped", len(rec.Stopped), "sandboxes_expired", len(rec.Expired),
		"keys_released", rec.Released)
}
