// Package fleet is a hostagent.Host made of several machines' host agents: the control plane
// of `lbb serve --host-agent URL,URL,…` asks it as it would ask one machine, and it places
// each new sandbox (a one-call run's, a long-lived one) on a host, records where (the
// placements table of the store), and routes every later call for that sandbox — commands,
// files, output, terminals, previews, snapshots and forks — to the host that holds it.
//
// It watches its hosts: each answers Info every Heartbeat (its capacity, and a boot id that
// changes when its process restarts). A host that stops answering is left out of placement
// at once and is lost after LostAfter; a host whose boot id changed lost what it ran too. For
// every sandbox placed on a lost host the fleet reports hostagent.EventHostLost, and the
// control plane ends the running ones (end_reason host_lost; their commands lost, never run
// again). Calls for a lost host's sandboxes fail with errdefs Unavailable, code host_lost.
// When the host answers again it is reconciled: one that restarted is reaped of everything
// no placement names (its warm pool starts after, as at a control plane's start; one that the
// control plane's Reap did not reach yet keeps what that Reap kept, such as other control
// planes' sandboxes); one that
// only went silent has the sandboxes destroyed that the control plane ended meanwhile.
//
// Its hosts are listed (Options.Members: lbb serve --host-agent) or join at runtime
// (Options.Dial: lbb serve --hosts remote, where lbb host --control registers itself and Join
// adds it); a fleet that joins hosts also picks up, from the store's hosts table, those that
// registered with another control plane on the same database.
//
// docs/architecture.md and docs/deploy.md show where it fits.
package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Member is one host of a fleet.
type Member struct {
	// ID names the host in records (placements, the hosts table); URL is where it is.
	ID, URL string
	Host    hostagent.Host
}

// Options configure a Fleet.
type Options struct {
	Members []Member
	// Store keeps the hosts and the placements of long-lived sandboxes and snapshots, so
	// that a restarted control plane (or another one on the same database) finds them; nil
	// keeps them in memory only.
	Store store.Store
	Log   *slog.Logger
	// Heartbeat is how often each host is asked for its Info (default 1s); LostAfter how
	// long a host may not answer before it is lost (default 10s).
	Heartbeat, LostAfter time.Duration
	Now                  func() time.Time
	// Registerer receives the metrics per host (lbb_host_*); nil registers none.
	Registerer prometheus.Registerer
	// Dial, when set, lets hosts join at runtime (Join, and the store's joined hosts every
	// Poll, default 2s): it makes the client of host id at url.
	Dial func(id, url string) (hostagent.Host, error)
	Poll time.Duration
	// MinMemoryMiB and MinDiskMiB are the floors of free memory and free disk below which a
	// host that reports them takes no new sandbox (defaults 256 and 1024; negative: none).
	MinMemoryMiB, MinDiskMiB int64
}

// Host states beyond store.HostUp and store.HostLost: down is a host that failed a call or a
// heartbeat and is not lost yet (no new work goes there).
const stateDown = "down"

// member is a host and what the fleet knows of it.
type member struct {
	Member
	state    string
	info     hostagent.Info
	lastBeat time.Time
	// boot is the host agent's boot id when the fleet last saw it up.
	boot string
	// reconciled says that the host's leftovers were reaped in this life of the fleet.
	reconciled bool
	// orphans are sandboxes and snapshots the control plane let go of while the host did not
	// answer: destroyed when it answers again.
	orphans []string
	// registered is when the fleet first saw the host.
	registered time.Time
	// lost is closed when the host is lost (a new one is made when it is up again): calls
	// under way to it answer host_lost then, without waiting for the connection to give up.
	lost chan struct{}
	// probing says a heartbeat is under way (a host cut off by the network may not answer
	// it for as long as the connection takes to give up).
	probing bool
	// beating is held while a heartbeat's answer is acted on (reconciling included).
	beating sync.Mutex
}

// placement is where a sandbox or snapshot is held.
type placement struct {
	host string
	kind string // store.PlacedSandbox, store.PlacedSnapshot, or kindRun
	// running says the sandbox runs (placed, created, resumed here): only those load a host.
	// A placement read from the store is taken as not running.
	running bool
}

// kindRun is a one-call run's sandbox: kept in memory only (a restarted control plane ends
// every run and reaps their sandboxes).
const kindRun = "run"

// Fleet is a hostagent.Host over several hosts.
type Fleet struct {
	o   Options
	log *slog.Logger

	mu sync.Mutex
	// members is replaced, never changed in place, under mu (Join adds to it).
	members []*member
	where   map[string]placement // by sandbox or snapshot id
	cmds    map[string]string    // command id → sandbox id
	sub     *subscriber          // the caller of Events
	reaped  bool                 // the control plane's Reap (Recover) ran
	// kept is what that Reap kept: with other control planes on the store, it names their
	// sandboxes too, which this fleet did not place, so a host reconciled later keeps them.
	kept []string
	next int // round robin among equally loaded hosts

	// joining orders registrations and polls of the store (Register, joinStored), so that a
	// poll that read a host's old URL does not move it back after a registration moved it.
	joining sync.Mutex

	stop context.CancelFunc
	done chan struct{}
}

var _ hostagent.Host = (*Fleet)(nil)

// New returns a fleet of o.Members and starts watching them (Close stops it). Hosts that do
// not answer yet join when they do.
func New(ctx context.Context, o Options) (*Fleet, error) {
	if len(o.Members) == 0 && o.Dial == nil {
		return nil, errors.New("fleet: no hosts")
	}
	o.Poll = cmp.Or(o.Poll, 2*time.Second)
	o.MinMemoryMiB = cmp.Or(o.MinMemoryMiB, 256)
	o.MinDiskMiB = cmp.Or(o.MinDiskMiB, 1024)
	o.Log = cmp.Or(o.Log, slog.New(slog.DiscardHandler))
	o.Heartbeat = cmp.Or(o.Heartbeat, time.Second)
	o.LostAfter = cmp.Or(o.LostAfter, 10*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Fleet{o: o, log: o.Log, where: map[string]placement{}, cmds: map[string]string{}, done: make(chan struct{})}
	seen := map[string]bool{}
	for _, m := range o.Members {
		if seen[m.ID] {
			return nil, fmt.Errorf("fleet: host %s named twice", m.ID)
		}
		seen[m.ID] = true
		f.members = append(f.members, &member{Member: m, state: stateDown, registered: f.o.Now().UTC(), lost: make(chan struct{})})
	}
	if o.Store != nil {
		ps, err := o.Store.ListPlacements(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("fleet: placements: %w", err)
		}
		for _, p := range ps {
			f.where[p.ID] = placement{host: p.Host, kind: p.Kind}
		}
		if o.Dial != nil {
			f.joinStored(ctx)
		}
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(collector{f}); err != nil {
			return nil, fmt.Errorf("fleet: metrics: %w", err)
		}
	}
	// The first heartbeat is synchronous: Info answers the hosts that are up.
	f.beat(ctx)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = cancel
	go f.watch(wctx)
	return f, nil
}

// Close stops watching the hosts.
func (f *Fleet) Close() error {
	f.stop()
	<-f.done
	return nil
}

// all answers the members now.
func (f *Fleet) all() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members
}

// current reports whether m is still the member for its id (Join replaces a host that moved).
func (f *Fleet) current(m *member) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.members, m)
}

// Hosts answers each host's id, URL, state and last Info.
func (f *Fleet) Hosts() []HostState {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []HostState
	for _, m := range f.members {
		n := 0
		for _, p := range f.where {
			if p.host == m.ID && p.kind != store.PlacedSnapshot {
				n++
			}
		}
		out = append(out, HostState{ID: m.ID, URL: m.URL, State: m.state, LastHeartbeat: m.lastBeat, Placed: n, Info: m.info})
	}
	return out
}

// HostState is what the fleet knows of one host.
type HostState struct {
	ID, URL, State string
	LastHeartbeat  time.Time
	// Placed is how many sandboxes the fleet placed there that it still holds.
	Placed int
	Info   hostagent.Info
}

func (f *Fleet) member(id string) *member {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// place chooses a host for a new sandbox id: an up host offering runtime (and passing only,
// if given) with free memory and disk above the floors, the best scored (round robin among
// equals), and records the placement.
func (f *Fleet) place(ctx context.Context, id, kind, runtime string, only ...func(*member) bool) (*member, error) {
	f.mu.Lock()
	load := map[string]int{}
	for _, p := range f.where {
		if p.running {
			load[p.host]++
		}
	}
	var best *member
	var bestScore float64
	full := 0
	n := len(f.members)
	for i := range n {
		m := f.members[(f.next+i)%n]
		if m.state != store.HostUp || runtime != "" && !slices.Contains(m.info.Offered, runtime) {
			continue
		}
		if len(only) > 0 && !only[0](m) {
			continue
		}
		score, ok := f.score(m.info.Capacity, load[m.ID])
		if !ok {
			full++
			continue
		}
		if best == nil || score < bestScore {
			best, bestScore = m, score
		}
	}
	f.next++
	if best == nil {
		f.mu.Unlock()
		if full > 0 {
			return nil, errdefs.New(errdefs.ClassUnavailable, "no_host", "no host has room: %d up below the floors of free memory (%d MiB) or disk (%d MiB)", full, f.o.MinMemoryMiB, f.o.MinDiskMiB)
		}
		if runtime != "" {
			return nil, errdefs.New(errdefs.ClassUnavailable, "no_host", "no host that offers runtime %s is up", runtime)
		}
		return nil, errdefs.New(errdefs.ClassUnavailable, "no_host", "no host is up")
	}
	f.where[id] = placement{host: best.ID, kind: kind, running: kind != store.PlacedSnapshot}
	f.mu.Unlock()
	if err := f.persist(ctx, id, best.ID, kind); err != nil {
		f.unplace(ctx, id)
		return nil, err
	}
	return best, nil
}

// placeOn records that m holds id.
func (f *Fleet) placeOn(ctx context.Context, m *member, id, kind string) error {
	f.mu.Lock()
	f.where[id] = placement{host: m.ID, kind: kind, running: kind != store.PlacedSnapshot}
	f.mu.Unlock()
	return f.persist(ctx, id, m.ID, kind)
}

// setRunning records whether sandbox id runs (Stop and Pause end that, Resume starts it).
func (f *Fleet) setRunning(id string, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.where[id]; ok {
		p.running = running
		f.where[id] = p
	}
}

// score is how loaded a host with capacity c and running sandboxes running would be (lower
// is better), and false when it has no room: free memory or disk it reports below the
// floors. The load is the running sandboxes per CPU; the share of memory in use and a
// disk term (0 with 64 GiB free or more, 1 with none) are added, so that of two hosts as
// busy the one with more to spare gets the sandbox. Stopped sandboxes do not count: they
// hold disk (which the disk term sees), not CPU or memory.
func (f *Fleet) score(c hostagent.Capacity, running int) (float64, bool) {
	if f.o.MinMemoryMiB > 0 && c.MemoryFreeMiB > 0 && c.MemoryFreeMiB < f.o.MinMemoryMiB ||
		f.o.MinDiskMiB > 0 && c.DiskFreeMiB > 0 && c.DiskFreeMiB < f.o.MinDiskMiB {
		return 0, false
	}
	score := float64(running) / float64(max(c.CPUs, 1))
	if c.MemoryMiB > 0 && c.MemoryFreeMiB > 0 {
		score += 1 - float64(min(c.MemoryFreeMiB, c.MemoryMiB))/float64(c.MemoryMiB)
	}
	if c.DiskFreeMiB > 0 {
		const plenty = 64 << 10
		score += 1 - float64(min(c.DiskFreeMiB, plenty))/plenty
	}
	return score, true
}

func (f *Fleet) persist(ctx context.Context, id, host, kind string) error {
	if f.o.Store == nil || kind == kindRun {
		return nil
	}
	err := f.o.Store.PutPlacement(context.WithoutCancel(ctx), store.Placement{ID: id, Host: host, Kind: kind, PlacedAt: f.o.Now().UTC()})
	if err != nil {
		return fmt.Errorf("fleet: recording where %s is: %w", id, err)
	}
	return nil
}

// unplace forgets where id is held, and the commands of it.
func (f *Fleet) unplace(ctx context.Context, id string) {
	f.mu.Lock()
	p, ok := f.where[id]
	delete(f.where, id)
	for c, sb := range f.cmds {
		if sb == id {
			delete(f.cmds, c)
		}
	}
	f.mu.Unlock()
	if ok && p.kind != kindRun && f.o.Store != nil {
		if err := f.o.Store.DeletePlacement(context.WithoutCancel(ctx), id); err != nil {
			f.log.Warn("forgetting a placement", "id", id, "err", err)
		}
	}
}

// HostOf answers the id of the host holding sandbox id ("" when none does): what its record
// says (hostagent.Locator).
func (f *Fleet) HostOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.where[id].host
}

var _ hostagent.Locator = (*Fleet)(nil)

// hostOf answers the host holding id. A lost host's sandbox is errdefs Unavailable
// (host_lost), with the host; an id placed nowhere is NotFound.
func (f *Fleet) hostOf(ctx context.Context, id string) (*member, error) {
	f.mu.Lock()
	p, ok := f.where[id]
	f.mu.Unlock()
	if !ok && f.o.Store != nil {
		// Placed by another control plane on the same database.
		sp, err := f.o.Store.GetPlacement(ctx, id)
		if err == nil {
			p, ok = placement{host: sp.Host, kind: sp.Kind}, true
			f.mu.Lock()
			f.where[id] = p
			f.mu.Unlock()
		}
	}
	if !ok {
		return nil, errdefs.NotFound("sandbox %s is on no host", id)
	}
	m := f.member(p.host)
	if m == nil {
		return nil, errdefs.New(errdefs.ClassUnavailable, hostagent.CodeHostLost, "sandbox %s is on host %s, which this control plane does not know", id, p.host)
	}
	f.mu.Lock()
	lost := m.state == store.HostLost
	f.mu.Unlock()
	if lost {
		return m, errdefs.New(errdefs.ClassUnavailable, hostagent.CodeHostLost, "the host of sandbox %s (%s) is lost", id, m.ID)
	}
	return m, nil
}

func (f *Fleet) noteCommand(commandID, sandboxID string) {
	if commandID == "" {
		return
	}
	f.mu.Lock()
	f.cmds[commandID] = sandboxID
	f.mu.Unlock()
}

// check classifies a host's error: one that says the host could not be reached takes the host
// out of placement (the heartbeat decides whether it is lost) and is host_lost to the caller,
// whose call's fate on the host is unknown.
func (f *Fleet) check(m *member, err error) error {
	if err == nil || errdefs.CodeOf(err) != hostagent.CodeUnreachable {
		return err
	}
	f.mu.Lock()
	if m.state == store.HostUp {
		m.state = stateDown
		f.log.Warn("host did not answer; no new work goes there", "host", m.ID, "err", err)
	}
	f.mu.Unlock()
	return errdefs.Wrap(errdefs.ClassUnavailable, hostagent.CodeHostLost, fmt.Errorf("host %s: %w", m.ID, err))
}

// gone reports whether err says the host is gone (lost, or not answering).
func gone(err error) bool {
	c := errdefs.CodeOf(err)
	return c == hostagent.CodeHostLost || c == hostagent.CodeUnreachable
}

// letGo forgets id after the control plane let go of it on a host that is gone: the host
// destroys it when it answers again.
func (f *Fleet) letGo(ctx context.Context, m *member, id string) {
	f.unplace(ctx, id)
	if m == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The member for the host now: a host that moved (Join) has a new one.
	for _, cur := range f.members {
		if cur.ID == m.ID {
			m = cur
		}
	}
	m.orphans = append(m.orphans, id)
}

// placedOn answers the placements on host id.
func (f *Fleet) placedOn(host string) (sandboxes, all []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, p := range f.where {
		if p.host != host {
			continue
		}
		all = append(all, id)
		if p.kind != store.PlacedSnapshot {
			sandboxes = append(sandboxes, id)
		}
	}
	slices.Sort(sandboxes)
	slices.Sort(all)
	return sandboxes, all
}
