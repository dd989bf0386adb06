package fleet

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// watch asks every host for its Info each Heartbeat until ctx ends.
func (f *Fleet) watch(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.o.Heartbeat)
	defer t.Stop()
	var polled time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f.o.Dial != nil && f.o.Store != nil && time.Since(polled) >= f.o.Poll {
			polled = time.Now()
			f.joinStored(ctx)
		}
		f.beat(ctx)
	}
}

// beat asks every host at once and acts on what changed.
func (f *Fleet) beat(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range f.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.heartbeat(ctx, m)
		}()
	}
	wg.Wait()
}

// heartbeat asks m for its Info and acts on the answer, unless a heartbeat of m is under way
// already (one that Join started).
func (f *Fleet) heartbeat(ctx context.Context, m *member) {
	if !m.beating.TryLock() {
		return
	}
	defer m.beating.Unlock()
	info, err := f.probe(ctx, m)
	if ctx.Err() != nil || !f.current(m) {
		return // a host that moved (Join) or left meanwhile: its new member speaks for it
	}
	if err != nil {
		f.missed(ctx, m, err)
	} else {
		f.answered(ctx, m, info)
	}
}

// probe asks m for its Info, answering within a heartbeat's time whatever the host does (a
// host cut off by the network answers nothing until the connection gives up); while an
// earlier probe is still under way it answers that the host did not answer.
func (f *Fleet) probe(ctx context.Context, m *member) (hostagent.Info, error) {
	timeout := max(f.o.Heartbeat, time.Second)
	f.mu.Lock()
	if m.probing {
		f.mu.Unlock()
		return hostagent.Info{}, errdefs.New(errdefs.ClassUnavailable, hostagent.CodeUnreachable, "host %s: an earlier heartbeat is still unanswered", m.ID)
	}
	m.probing = true
	f.mu.Unlock()
	type answer struct {
		info hostagent.Info
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		ictx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		info, err := m.Host.Info(ictx)
		f.mu.Lock()
		m.probing = false
		f.mu.Unlock()
		ch <- answer{info, err}
	}()
	select {
	case a := <-ch:
		return a.info, a.err
	case <-time.After(timeout):
		return hostagent.Info{}, errdefs.New(errdefs.ClassUnavailable, hostagent.CodeUnreachable, "host %s: no answer to a heartbeat in %s", m.ID, timeout)
	}
}

// missed is a heartbeat the host did not answer: out of placement at once, lost after
// LostAfter without an answer.
func (f *Fleet) missed(ctx context.Context, m *member, err error) {
	now := f.o.Now()
	f.mu.Lock()
	was := m.state
	if was == store.HostUp {
		m.state = stateDown
	}
	lose := was != store.HostLost && !m.lastBeat.IsZero() && now.Sub(m.lastBeat) >= f.o.LostAfter
	f.mu.Unlock()
	if was == store.HostUp {
		f.log.Warn("host missed a heartbeat; no new work goes there", "host", m.ID, "err", err)
	}
	if lose {
		f.lose(ctx, m, "the host stopped answering")
	}
}

// answered is a heartbeat the host answered: it is up again (reconciled first when it was
// lost or restarted).
func (f *Fleet) answered(ctx context.Context, m *member, info hostagent.Info) {
	f.mu.Lock()
	restarted := m.boot != "" && info.Boot != m.boot
	wasLost := m.state == store.HostLost
	reaped := f.reaped
	f.mu.Unlock()
	if restarted && !wasLost {
		// It came back before it was found lost; what ran there is gone all the same.
		f.lose(ctx, m, "the host agent restarted")
	}
	f.mu.Lock()
	needReap := reaped && (!m.reconciled || restarted)
	orphans := m.orphans
	m.orphans = nil
	f.mu.Unlock()
	if needReap {
		// A new life of the host agent (or one this fleet never reaped): everything no
		// placement names goes (its warm pool starts after this Reap). A host that only
		// went silent keeps its warm pool: just what was let go of meanwhile goes.
		keep, err := f.keepOn(ctx, m.ID, restarted)
		var ids []string
		if err == nil {
			ids, err = m.Host.Reap(ctx, keep)
		}
		if err != nil {
			f.log.Warn("reconciling a host", "host", m.ID, "err", err)
			f.mu.Lock()
			m.orphans = append(m.orphans, orphans...)
			f.mu.Unlock()
			return // tried again at the next beat
		}
		if len(ids) > 0 {
			f.log.Info("reconciled a host: destroyed what the control plane had ended", "host", m.ID, "destroyed", ids)
		}
	} else {
		for _, id := range orphans {
			if _, err := m.Host.Destroy(ctx, id); err != nil {
				f.log.Warn("destroying a sandbox let go while its host did not answer", "host", m.ID, "sandbox", id, "err", err)
			}
			m.Host.DeleteSnapshot(ctx, id)
		}
	}
	now := f.o.Now()
	f.mu.Lock()
	if m.state != store.HostUp {
		f.log.Info("host up", "host", m.ID, "url", m.URL, "offered", info.Offered, "cpus", info.Capacity.CPUs)
	}
	if m.state == store.HostLost {
		m.lost = make(chan struct{})
	}
	m.state, m.info, m.lastBeat, m.boot = store.HostUp, info, now, info.Boot
	if reaped {
		m.reconciled = true
	}
	f.mu.Unlock()
	f.record(ctx, m, store.HostUp, now, info)
}

// lose marks m lost and reports every sandbox placed there to the control plane.
func (f *Fleet) lose(ctx context.Context, m *member, why string) {
	f.mu.Lock()
	if m.state != store.HostLost {
		close(m.lost)
	}
	m.state = store.HostLost
	info, beat := m.info, m.lastBeat
	f.mu.Unlock()
	sandboxes, _ := f.placedOn(m.ID)
	f.log.Error("host lost", "host", m.ID, "why", why, "sandboxes", len(sandboxes), "last_heartbeat", beat)
	f.record(ctx, m, store.HostLost, beat, info)
	// The heartbeats go on while the subscriber takes the events.
	go func() {
		for _, id := range sandboxes {
			f.emit(ctx, hostagent.Event{Kind: hostagent.EventHostLost, Sandbox: id, Error: "host " + m.ID + " lost: " + why, At: f.o.Now().UTC()})
		}
	}()
}

// record writes m's row of the hosts table.
func (f *Fleet) record(ctx context.Context, m *member, state string, beat time.Time, info hostagent.Info) {
	if f.o.Store == nil || f.o.Dial != nil && !f.current(m) {
		return
	}
	capacity, _ := json.Marshal(info.Capacity)
	url := m.URL
	if f.o.Dial != nil {
		url = "" // a joining host's registration alone says where it is
	}
	h := store.Host{ID: m.ID, URL: url, State: state, Capacity: capacity, LastHeartbeat: beat.UTC(), RegisteredAt: m.registered}
	if err := f.o.Store.PutHost(ctx, h); err != nil {
		f.log.Warn("recording a host", "host", m.ID, "err", err)
	}
}

// elsewhere reports whether sandbox id is placed on a host other than m.
func (f *Fleet) elsewhere(m *member, id string) bool {
	if id == "" {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.where[id]
	return ok && p.host != m.ID
}

// emit gives e to the Events subscriber, waiting for it (the control plane's handling of a
// lost host's sandboxes must not be dropped).
func (f *Fleet) emit(ctx context.Context, e hostagent.Event) {
	f.mu.Lock()
	sub := f.sub
	f.mu.Unlock()
	if sub == nil {
		return
	}
	sub.mu.RLock()
	defer sub.mu.RUnlock()
	select {
	case <-sub.done:
		return // sub.ch may be closed
	default:
	}
	select {
	case sub.ch <- e:
	case <-sub.done:
	case <-ctx.Done():
	}
}

// subscriber is the one caller of Events: ch is closed once done is and no sender holds mu.
type subscriber struct {
	ctx  context.Context
	ch   chan hostagent.Event
	done chan struct{}
	mu   sync.RWMutex
}

// send gives e to the subscriber unless it is gone.
func (sub *subscriber) send(e hostagent.Event) {
	sub.mu.RLock()
	defer sub.mu.RUnlock()
	select {
	case <-sub.done:
		return
	default:
	}
	select {
	case sub.ch <- e:
	case <-sub.done:
	}
}

// Events merges the events of every host (following each again when it comes back, and each
// that joins later) with the fleet's own (EventHostLost) until ctx ends.
func (f *Fleet) Events(ctx context.Context) (<-chan hostagent.Event, error) {
	sub := &subscriber{ctx: ctx, ch: make(chan hostagent.Event), done: make(chan struct{})}
	f.mu.Lock()
	f.sub = sub
	members := f.members
	f.mu.Unlock()
	for _, m := range members {
		go f.follow(sub, m)
	}
	go func() {
		<-ctx.Done()
		close(sub.done)
		f.mu.Lock()
		if f.sub == sub {
			f.sub = nil
		}
		f.mu.Unlock()
		sub.mu.Lock()
		close(sub.ch)
		sub.mu.Unlock()
	}()
	return sub.ch, nil
}

// follow passes m's events to sub while sub lasts and m is a member.
func (f *Fleet) follow(sub *subscriber, m *member) {
	ctx := sub.ctx
	for ctx.Err() == nil && f.current(m) {
		f.mu.Lock()
		up := m.state == store.HostUp
		f.mu.Unlock()
		var ch <-chan hostagent.Event
		var err error
		if up {
			ch, err = m.Host.Events(ctx)
		}
		if up && err == nil {
			for e := range ch {
				if f.elsewhere(m, e.Sandbox) {
					// Its stale copy, on a host that was lost while the sandbox moved on
					// (Resume): what happens to that copy is not the sandbox's.
					f.log.Debug("an event of a sandbox placed on another host", "host", m.ID, "sandbox", e.Sandbox, "kind", e.Kind)
					continue
				}
				sub.send(e)
			}
		}
		select {
		case <-time.After(f.o.Heartbeat):
		case <-ctx.Done():
		}
	}
}

// keepOn answers what a reap of host must spare: what this fleet placed there and, with a
// store, the placements every control plane recorded there (long-lived sandboxes, snapshots).
// A host that did not restart keeps more: every sandbox record not ended (other control
// planes' one-call runs are placed in their memory only; the host maps a run's record to its
// warm slot) and what this control plane's Reap kept. A host shared by several control planes
// is reaped by each of them; sparing only its own placements, one destroyed the others' work.
// A restarted host's runs died with it: what the records still call running there goes.
func (f *Fleet) keepOn(ctx context.Context, host string, restarted bool) ([]string, error) {
	_, keep := f.placedOn(host)
	if !restarted {
		f.mu.Lock()
		keep = append(keep, f.kept...)
		f.mu.Unlock()
	}
	if f.o.Store == nil {
		return keep, nil
	}
	ps, err := f.o.Store.ListPlacements(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		keep = append(keep, p.ID)
	}
	if !restarted {
		live, err := f.o.Store.ListSandboxesByStatus(ctx, store.SandboxStarting, store.SandboxRunning, store.SandboxPaused, store.SandboxStopped)
		if err != nil {
			return nil, err
		}
		for _, sb := range live {
			keep = append(keep, sb.ID)
		}
	}
	slices.Sort(keep)
	return slices.Compact(keep), nil
}
