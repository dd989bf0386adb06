package hostagent

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// A sandbox's routes out (internal/egress): the host agent keeps each sandbox's egress
// (policy, counters, grant) for as long as it keeps the sandbox, and serves it on every life
// of it: a Listen session opened on each new agent connection (start, resume, restore, fork)
// and closed when that life ends. What the egress carried reaches the control plane in the
// usage of each life (store.Usage.Egress), a command's share in its end; a refused
// destination, once, as an event.

// Egress is what a sandbox may reach beyond itself: its route out (Policy), the in-sandbox
// API (API: the listener is served; the grant comes with SetGrant), its graph (LBB_GRAPH
// inside), and what an earlier life of it used (its quota goes on from there).
type Egress struct {
	Policy store.Egress       `json:"policy"`
	API    bool               `json:"api,omitempty"`
	Graph  string             `json:"graph,omitempty"`
	Used   *store.EgressUsage `json:"used,omitempty"`
}

// on reports whether e asks for a Listen session at all.
func (e *Egress) on() bool { return e != nil && (e.Policy.On() || e.API) }

// EventEgressRefused: a sandbox's proxy was refused a destination (the first time for it).
const EventEgressRefused = "egress_refused"

// EgressRefusal is the destination and reason of an EventEgressRefused.
type EgressRefusal struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// newEgress makes a sandbox's egress state for spec (nil when it has none).
func (h *Local) newEgress(id string, spec *Egress) (*egress.Sandbox, error) {
	if !spec.on() {
		return nil, nil
	}
	esb, err := h.guard.NewSandbox(id, spec.Policy, spec.Used)
	if err != nil {
		return nil, errdefs.InvalidArgument("%v", err)
	}
	esb.OnRefused = func(r egress.Refused) {
		h.emit(Event{Kind: EventEgressRefused, Sandbox: id,
			Egress: &EgressRefusal{Host: r.Host, Port: r.Port, Code: r.Code, Message: r.Message}})
	}
	return esb, nil
}

// openEgress serves a sandbox's egress on a live agent until ctx ends or the agent's channel
// does; nil without one.
func (h *Local) openEgress(ctx context.Context, c *agent.Client, esb *egress.Sandbox, spec *Egress) (*egress.Session, error) {
	if esb == nil {
		return nil, nil
	}
	var env map[string]string
	if spec.API && spec.Graph != "" {
		env = map[string]string{"LBB_GRAPH": spec.Graph}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sess, err := h.guard.Open(octx, c, esb, egress.Listen(esb, spec.API, env))
	if err != nil {
		return nil, err
	}
	// The session lasts as long as ctx, not the opening's timeout.
	go func() {
		select {
		case <-ctx.Done():
			sess.Close()
		case <-sess.Done():
		}
	}()
	return sess, nil
}

// SetGrant gives a running (or stopped) sandbox's in-sandbox API its credential; nil takes
// it away. The secret stays in the host agent's memory.
func (h *Local) SetGrant(ctx context.Context, id string, grant *egress.Grant) error {
	s := h.lookup(id, false)
	if s == nil {
		return notHere(id)
	}
	s.mu.Lock()
	esb := s.egress
	s.mu.Unlock()
	if esb == nil {
		if grant == nil {
			return nil
		}
		return errdefs.Conflict("sandbox %s was not started with the API", id)
	}
	esb.SetGrant(grant)
	return nil
}

// lifeEgress is what a sandbox's egress carried since before: the usage of a life.
func lifeEgress(esb *egress.Sandbox, before store.EgressUsage) *store.EgressUsage {
	if esb == nil {
		return nil
	}
	u := esb.Usage().Since(before)
	return &u
}

// cloneTimeout bounds a git clone at create.
const cloneTimeout = 5 * time.Minute

// cloneScript clones $1 (branch $2, depth $3; 0 is all) into the workspace, which may hold
// files already (a template's): init, fetch, checkout.
const cloneScript = `set -e
url=$1 branch=$2 depth=$3
if [ -z "$branch" ]; then
  branch=$(git ls-remote --symref "$url" HEAD | sed -n 's|^ref: refs/heads/\(.*\)\tHEAD$|\1|p')
  [ -n "$branch" ] || { echo "git: the repository names no default branch" >&2; exit 1; }
fi
git init -q -b "$branch" .
git remote add origin "$url"
if [ "$depth" -gt 0 ]; then
  git fetch -q --depth "$depth" origin "refs/heads/$branch:refs/remotes/origin/$branch"
else
  git fetch -q origin "refs/heads/$branch:refs/remotes/origin/$branch"
fi
git checkout -q -B "$branch" "origin/$branch"
git branch -q --set-upstream-to "origin/$branch"
`

// clone clones a public repository into a new sandbox's workspace through its egress, the
// repository's host allowed for the clone alone (also when the sandbox's egress is off).
func (h *Local) clone(ctx context.Context, c *agent.Client, id string, esb *egress.Sandbox, g *store.GitClone) error {
	u, err := url.Parse(g.URL)
	if err != nil {
		return errdefs.InvalidArgument("git.url: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	if esb == nil {
		if esb, err = h.guard.NewSandbox(id, store.Egress{Mode: store.EgressNone}, nil); err != nil {
			return err
		}
	}
	undo, err := esb.Allow(u.Hostname() + ":" + port)
	if err != nil {
		return errdefs.InvalidArgument("git.url: %v", err)
	}
	defer undo()
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	sess, err := h.guard.Open(ctx, c, esb, agent.ListenRequest{Proxy: egress.ProxyAddr, SOCKS: egress.SOCKSAddr})
	if err != nil {
		return err
	}
	defer sess.Close()
	p, err := c.Exec(ctx, agent.ExecRequest{ID: "git-clone", Argv: []string{"sh", "-c", cloneScript, "git-clone", g.URL, g.Branch,
		strconv.Itoa(g.Depth)}, Env: map[string]string{"GIT_TERMINAL_PROMPT": "0"}, TimeoutMs: cloneTimeout.Milliseconds()}, nil)
	if err != nil {
		return fmt.Errorf("git clone: %w", err)
	}
	var stderr strings.Builder
	ex, err := p.Wait(nil, &limitWriter{w: &stderr, n: 8 << 10})
	switch {
	case err != nil:
		return fmt.Errorf("git clone: %w", err)
	case ex.StartError != "":
		return errdefs.InvalidArgument("git clone: %s", ex.StartError)
	case ex.ExitCode != 0:
		return errdefs.InvalidArgument("git clone %s failed: %s", g.URL, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// limitWriter keeps the first n bytes written to it.
type limitWriter struct {
	w interface{ WriteString(string) (int, error) }
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(p))
		l.w.WriteString(string(p[:k]))
		l.n -= k
	}
	return len(p), nil
}
