package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Addresses of a sandbox's listeners, on its own loopback.
const (
	ProxyAddr = "127.0.0.1:3128"
	SOCKSAddr = "127.0.0.1:1080"
	APIAddr   = "127.0.0.1:7700"
)

// Options configure a Guard.
type Options struct {
	// Permit are the networks the guard lets a sandbox reach although they are not public
	// (--egress-permit): a test's loopback servers, an internal mirror.
	Permit []netip.Prefix
	// Resolver is the DNS server (host:port) names are resolved with; "" is the host's.
	Resolver string
	// Lookup, when set, resolves instead (tests).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialTimeout bounds resolving and connecting; default 10 s.
	DialTimeout time.Duration
	// Registerer receives the guard's counters; nil registers none.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Guard decides, dials, counts and cuts the connections of every sandbox of a host.
type Guard struct {
	o       Options
	lookup  func(ctx context.Context, host string) ([]netip.Addr, error)
	api     *http.Transport
	bytes   *prometheus.CounterVec
	conns   *prometheus.CounterVec
	apiReqs prometheus.Counter
}

// NewGuard returns a guard.
func NewGuard(o Options) *Guard {
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{o: o, lookup: o.Lookup,
		api: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute, DisableCompression: true}}
	if g.lookup == nil {
		r := net.DefaultResolver
		if o.Resolver != "" {
			var d net.Dialer
			r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, o.Resolver)
			}}
		}
		g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) { return r.LookupNetIP(ctx, "ip", host) }
	}
	g.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lbb_egress_bytes_total", Help: "Bytes sandboxes' egress carried, by direction (out: from the sandbox).",
	}, []string{"direction"})
	g.conns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lbb_egress_connections_total", Help: "Connections sandboxes' proxies asked for, by result (made, or the refusal's code).",
	}, []string{"result"})
	g.apiReqs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lbb_sandbox_api_requests_total", Help: "Requests sandboxes made to the API with their grants.",
	})
	if o.Registerer != nil {
		o.Registerer.MustRegister(g.bytes, g.conns, g.apiReqs)
	}
	return g
}

// ParsePermit reads --egress-permit values: CIDRs (10.0.0.0/8) or single addresses.
func ParsePermit(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("--egress-permit %q: want a CIDR such as 10.0.0.0/8: %v", s, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Grant is a sandbox's API grant as the host agent holds it: the API to forward to, the
// derived key's secret (which never enters the sandbox) and the sandbox's graph.
type Grant struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	Graph string `json:"graph"`
}

// Refused is a refused connection, reported once per destination (Sandbox.OnRefused).
type Refused struct {
	Host string
	Port int
	agent.Refusal
}

// maxDestinations bounds the destinations a sandbox's usage names; the rest count under "*".
const maxDestinations = 200

// Sandbox is one sandbox's egress on the host: its policy, its counters and quota (which
// outlive a stop and a resume: NewSandbox takes what an earlier life used), its grant, and the
// connections open now (cut at the quota).
type Sandbox struct {
	ID string
	// OnRefused, when set, is told of the first refused connection to each destination.
	OnRefused func(Refused)

	g     *Guard
	pol   policy
	mu    sync.Mutex
	use   store.EgressUsage
	dests map[string]int // host:port → index in use.Destinations
	told  map[string]bool
	extra []rule
	open  map[io.Closer]struct{}
	grant *Grant
}

// NewSandbox makes a sandbox's egress with policy p, its counters starting at used (an
// earlier life's).
func (g *Guard) NewSandbox(id string, p store.Egress, used *store.EgressUsage) (*Sandbox, error) {
	pol, err := compile(p)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{ID: id, g: g, pol: pol, dests: map[string]int{}, told: map[string]bool{}, open: map[io.Closer]struct{}{}}
	if used != nil {
		sb.use = store.EgressUsage{BytesOut: used.BytesOut, BytesIn: used.BytesIn, QuotaExceeded: used.QuotaExceeded}
	}
	return sb, nil
}

// On reports whether the sandbox lets anything out (its proxies are served).
func (sb *Sandbox) On() bool { return sb.pol.mode != ModeNone }

// Usage is what the sandbox's egress carried so far.
func (sb *Sandbox) Usage() store.EgressUsage {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	u := sb.use
	u.Destinations = append([]store.EgressDestination(nil), u.Destinations...)
	return u
}

// SetGrant sets (nil: clears) the credential API calls from inside carry.
func (sb *Sandbox) SetGrant(gr *Grant) {
	sb.mu.Lock()
	sb.grant = gr
	sb.mu.Unlock()
}

// Allow lets host (an allowlist entry) through too, until the function it answers is called:
// a git clone's repository, for the clone only.
func (sb *Sandbox) Allow(entry string) (func(), error) {
	r, err := ParseRule(entry)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	sb.extra = append(sb.extra, r)
	sb.mu.Unlock()
	return func() {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		for i := range sb.extra {
			if sb.extra[i].host == r.host && sb.extra[i].wildcard == r.wildcard {
				sb.extra = append(sb.extra[:i], sb.extra[i+1:]...)
				return
			}
		}
	}, nil
}

func (sb *Sandbox) count(host string, port int, refused bool) {
	key := host + ":" + strconv.Itoa(port)
	i, ok := sb.dests[key]
	if !ok {
		if len(sb.use.Destinations) >= maxDestinations {
			key, host, port = "*:0", "*", 0
			i, ok = sb.dests[key]
		}
		if !ok {
			i = len(sb.use.Destinations)
			sb.dests[key] = i
			sb.use.Destinations = append(sb.use.Destinations, store.EgressDestination{Host: host, Port: port})
		}
	}
	if refused {
		sb.use.Refused++
		sb.use.Destinations[i].Refused++
	} else {
		sb.use.Connections++
		sb.use.Destinations[i].Connections++
	}
}

// refuse counts a refusal and tells OnRefused of the first to each destination.
func (sb *Sandbox) refuse(host string, port int, r agent.Refusal) *agent.Refusal {
	sb.g.conns.WithLabelValues(r.Code).Inc()
	sb.mu.Lock()
	sb.count(host, port, true)
	key := host + ":" + strconv.Itoa(port)
	first := !sb.told[key] && len(sb.told) < maxDestinations
	if first {
		sb.told[key] = true
	}
	sb.mu.Unlock()
	if first && sb.OnRefused != nil {
		sb.OnRefused(Refused{Host: host, Port: port, Refusal: r})
	}
	return &r
}

// take reserves up to n bytes of the quota (all n without one) and counts them; fewer than
// n says the quota is reached, and every connection is cut.
func (sb *Sandbox) take(n int, out bool) int {
	sb.mu.Lock()
	if q := sb.pol.quota; q > 0 {
		left := q - sb.use.BytesOut - sb.use.BytesIn
		if int64(n) > left {
			n = int(max(left, 0))
			sb.use.QuotaExceeded = true
		}
	}
	if out {
		sb.use.BytesOut += int64(n)
	} else {
		sb.use.BytesIn += int64(n)
	}
	var cut []io.Closer
	if sb.use.QuotaExceeded {
		for c := range sb.open {
			cut = append(cut, c)
		}
	}
	sb.mu.Unlock()
	dir := "in"
	if out {
		dir = "out"
	}
	sb.g.bytes.WithLabelValues(dir).Add(float64(n))
	for _, c := range cut {
		c.Close()
	}
	return n
}

func (sb *Sandbox) exceeded() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.use.QuotaExceeded
}

// Dial decides a connection to host:port for the sandbox and makes it: the policy on the
// name asked for, then the addresses it resolves to (non-public ones refused unless
// permitted), then a connection to the first of those that answers.
func (sb *Sandbox) Dial(ctx context.Context, host string, port int) (net.Conn, *agent.Refusal) {
	name, err := Normalize(host)
	if err != nil {
		return nil, sb.refuse(host, port, agent.Refusal{Code: agent.RefuseDenied, Message: err.Error()})
	}
	if sb.exceeded() {
		return nil, sb.refuse(name, port, agent.Refusal{Code: agent.RefuseQuota,
			Message: fmt.Sprintf("the sandbox's egress quota of %d bytes is used up", sb.pol.quota)})
	}
	sb.mu.Lock()
	allowed := sb.pol.mode == ModePublic || sb.pol.mode == ModeAllowlist && matchAny(sb.pol.rules, name, port) ||
		matchAny(sb.extra, name, port)
	sb.mu.Unlock()
	if !allowed {
		why := fmt.Sprintf("%s:%d is not on the sandbox's egress allowlist", name, port)
		if sb.pol.mode == ModeNone {
			why = "the sandbox's egress is off"
		}
		return nil, sb.refuse(name, port, agent.Refusal{Code: agent.RefuseDenied, Message: why})
	}
	ctx, cancel := context.WithTimeout(ctx, sb.g.o.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(name); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = sb.g.lookup(ctx, name); err != nil || len(addrs) == 0 {
		return nil, sb.refuse(name, port, agent.Refusal{Code: agent.RefuseUnreachable, Message: fmt.Sprintf("cannot resolve %s: %v", name, err)})
	}
	var ok []netip.Addr
	why := ""
	for _, a := range addrs {
		a = a.Unmap()
		if sb.g.permitted(a) {
			ok = append(ok, a)
		} else if kind := Nonpublic(a); kind != "" {
			why = fmt.Sprintf("%s resolves to %s, a %s address", name, a, kind)
			if name == a.String() {
				why = fmt.Sprintf("%s is a %s address", name, kind)
			}
		} else {
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		return nil, sb.refuse(name, port, agent.Refusal{Code: agent.RefuseDenied, Message: why})
	}
	var d net.Dialer
	var errs []error
	for _, a := range ok {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			sb.g.conns.WithLabelValues("made").Inc()
			sb.mu.Lock()
			sb.count(name, port, false)
			sb.mu.Unlock()
			return c, nil
		}
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	code := agent.RefuseUnreachable
	if errors.Is(err, syscall.ECONNREFUSED) {
		code = agent.RefuseRefused
	}
	return nil, sb.refuse(name, port, agent.Refusal{Code: code, Message: fmt.Sprintf("%s:%d: %v", name, port, err)})
}

func (g *Guard) permitted(a netip.Addr) bool {
	for _, p := range g.o.Permit {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Listen is the agent.ListenRequest that serves sb: the proxies when its egress is on, the
// API listener when api, and env for processes.
func Listen(sb *Sandbox, api bool, env map[string]string) agent.ListenRequest {
	req := agent.ListenRequest{Env: env}
	if sb.On() {
		req.Proxy, req.SOCKS = ProxyAddr, SOCKSAddr
	}
	if api {
		req.API = APIAddr
	}
	return req
}

// Session serves one sandbox's listeners: it answers every connection they accept until
// Close.
type Session struct {
	l      *agent.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// Open opens req's listeners in the sandbox of c and serves their connections for sb. It
// answers once the listeners serve, or fails when ctx ends first; the session then lasts
// until Close or the channel's end, whatever becomes of ctx.
func (g *Guard) Open(ctx context.Context, c *agent.Client, sb *Sandbox, req agent.ListenRequest) (*Session, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	l, err := c.Listen(life, req)
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		cancel()
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("opening the sandbox's egress: %w", err)
	}
	ctx = life
	s := &Session{l: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			cr, err := l.Next()
			if err != nil {
				cancel()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.serve(ctx, c, sb, cr)
			}()
		}
	}()
	return s, nil
}

// Close ends the session: the listeners close and every connection it carries is cut.
func (s *Session) Close() {
	s.cancel()
	s.l.Close()
	<-s.done
}

// Done is closed once the session has ended (Close, or the channel's end).
func (s *Session) Done() <-chan struct{} { return s.done }

func (g *Guard) serve(ctx context.Context, c *agent.Client, sb *Sandbox, cr agent.ConnRequest) {
	refuse := func(r *agent.Refusal) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c.RefuseConn(rctx, cr.ID, *r)
	}
	switch cr.Kind {
	case agent.ConnProxy:
		up, ref := sb.Dial(ctx, cr.Host, cr.Port)
		if ref != nil {
			refuse(ref)
			return
		}
		st, err := c.AcceptConn(ctx, cr.ID)
		if err != nil {
			up.Close()
			return
		}
		sb.bridge(ctx, up, st)
	case agent.ConnAPI:
		// Without a grant (any more) each request is answered 403, which a client shows.
		st, err := c.AcceptConn(ctx, cr.ID)
		if err != nil {
			return
		}
		defer st.Close()
		g.forwardAPI(ctx, st, sb)
	default:
		refuse(&agent.Refusal{Code: agent.RefuseDenied, Message: "unknown kind of connection " + cr.Kind})
	}
}

// bridge copies between the sandbox's stream and the destination, both ways, counting every
// byte against the quota, until both directions have ended or ctx ends.
func (sb *Sandbox) bridge(ctx context.Context, up net.Conn, st *agent.Stream) {
	closeAll := &cutter{up: up, st: st}
	sb.mu.Lock()
	sb.open[closeAll] = struct{}{}
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		delete(sb.open, closeAll)
		sb.mu.Unlock()
		closeAll.Close()
	}()
	stop := context.AfterFunc(ctx, func() { closeAll.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if sb.copy(up, st, true) {
			if tc, ok := up.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		} else {
			closeAll.Close()
		}
	}()
	if sb.copy(st, up, false) {
		st.CloseWrite()
	} else {
		closeAll.Close()
	}
	wg.Wait()
}

// copy copies src to dst through the quota; it answers whether src ended cleanly.
func (sb *Sandbox) copy(dst io.Writer, src io.Reader, out bool) bool {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := sb.take(n, out)
			if m > 0 {
				if _, werr := dst.Write(buf[:m]); werr != nil {
					return false
				}
			}
			if m < n {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// cutter closes both ends of a bridged connection.
type cutter struct {
	up net.Conn
	st *agent.Stream
}

func (c *cutter) Close() error {
	c.up.Close()
	return c.st.Close()
}
