package fleet

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/api/errhttp"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Hosts that join (lbb serve --hosts remote, lbb host --control).
//
// Each host has one token, "lbbh_<id>.<mac>", where mac is the HMAC-SHA256 of the id under
// the control planes' host secret (--host-secret, the same for every control plane on one
// database). An admin gives it out once (lbb hosts add NAME); the store keeps only its
// SHA-256, so that a host whose row is gone (lbb hosts rm NAME) joins no more and the
// database holds no token. The host presents it when it registers (POST
// /v1/hosts/register) and asks it of whoever calls its host agent; a control plane derives
// it from the secret to call the host. One token per host: a host that leaks it exposes
// itself only.

// Error codes of a registration.
const (
	CodeHostToken = "host_token_invalid"
)

var hostIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidHostID reports whether id may name a host that joins.
func ValidHostID(id string) error {
	if !hostIDPattern.MatchString(id) {
		return errdefs.InvalidArgument("host name %q: want 1-63 lowercase letters, digits and dashes", id)
	}
	return nil
}

// HostToken is the token of host id under secret.
func HostToken(secret, id string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("lbb host " + id))
	return "lbbh_" + id + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// HostOfToken answers the host id a token names ("" when it names none).
func HostOfToken(token string) string {
	rest, ok := strings.CutPrefix(token, "lbbh_")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok || ValidHostID(id) != nil {
		return ""
	}
	return id
}

// HashToken is what the store keeps of a host's token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Register checks a host's token against the store and records the host where it says it is
// (joined hosts of other control planes on the database pick it up from there), then has it
// join this fleet. A token that is not the recorded one of a host is errdefs Unauthorized,
// code host_token_invalid.
func (f *Fleet) Register(ctx context.Context, token string, r hostagent.Registration) (hostagent.Registered, error) {
	if err := f.register(ctx, token, r); err != nil {
		return hostagent.Registered{}, err
	}
	return hostagent.Registered{ID: HostOfToken(token), HeartbeatSeconds: max(f.o.Poll, time.Second).Seconds()}, nil
}

var _ hostagent.Registrar = (*Fleet)(nil)

func (f *Fleet) register(ctx context.Context, token string, r hostagent.Registration) error {
	id := HostOfToken(token)
	bad := errdefs.New(errdefs.ClassUnauthorized, CodeHostToken, "not the token of a host added to this control plane (lbb hosts add NAME)")
	if id == "" || f.o.Store == nil {
		return bad
	}
	f.joining.Lock()
	defer f.joining.Unlock()
	hosts, err := f.o.Store.ListHosts(ctx)
	if err != nil {
		return err
	}
	var h *store.Host
	for i := range hosts {
		if hosts[i].ID == id {
			h = &hosts[i]
		}
	}
	if h == nil || h.TokenHash == "" || subtle.ConstantTimeCompare([]byte(h.TokenHash), []byte(HashToken(token))) != 1 {
		return bad
	}
	if r.ID != "" && r.ID != id {
		return errdefs.InvalidArgument("host %q registers with the token of host %q", r.ID, id)
	}
	if err := checkHostURL(r.URL); err != nil {
		return err
	}
	if h.URL != r.URL {
		capacity, _ := json.Marshal(r.Capacity)
		h.URL, h.Capacity = r.URL, capacity
		if err := f.o.Store.PutHost(ctx, *h); err != nil {
			return fmt.Errorf("recording host %s: %w", id, err)
		}
	}
	return f.Join(ctx, id, r.URL)
}

// checkHostURL accepts the URL of a host agent: http:// or https:// with a host and port.
func checkHostURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Port() == "" {
		return errdefs.InvalidArgument("host url %q: want http://host:port or https://host:port", raw)
	}
	return nil
}

// Join adds host id at url to the fleet, or moves it there when it was elsewhere; a host that
// is a member at url already is left as it is (its heartbeats say how it is).
func (f *Fleet) Join(ctx context.Context, id, url string) error {
	if f.o.Dial == nil {
		return errdefs.New(errdefs.ClassUnavailable, "hosts_listed", "this control plane's hosts are listed (--host-agent); start it with --hosts remote to let hosts join")
	}
	if old := f.member(id); old != nil {
		f.mu.Lock()
		same := old.URL == url
		f.mu.Unlock()
		if same {
			return nil
		}
	}
	h, err := f.o.Dial(id, url)
	if err != nil {
		return fmt.Errorf("host %s at %s: %w", id, url, err)
	}
	m := &member{Member: Member{ID: id, URL: url, Host: h}, state: stateDown, registered: f.o.Now().UTC(), lost: make(chan struct{})}
	f.mu.Lock()
	members := make([]*member, 0, len(f.members)+1)
	var old *member
	for _, o := range f.members {
		if o.ID == id {
			old = o
			continue
		}
		members = append(members, o)
	}
	if old != nil {
		// What the fleet knew of the host goes with it; calls under way to the old address
		// end as they end.
		m.boot, m.reconciled, m.orphans, m.lastBeat, m.registered = old.boot, old.reconciled, old.orphans, old.lastBeat, old.registered
		old.orphans = nil
		if old.state == store.HostLost {
			// Still lost until it answers at its new address, which reconciles it.
			m.state, m.lost = store.HostLost, old.lost
		}
	}
	f.members = append(members, m)
	sub := f.sub
	f.mu.Unlock()
	if old != nil {
		f.log.Info("host moved", "host", id, "from", old.URL, "to", url)
		if c, ok := old.Host.(io.Closer); ok {
			c.Close()
		}
	} else {
		f.log.Info("host joined", "host", id, "url", url)
	}
	if sub != nil {
		go f.follow(sub, m)
	}
	// Its first heartbeat now, rather than at the next tick.
	go f.heartbeat(context.WithoutCancel(ctx), m)
	return nil
}

// joinStored joins the hosts the store says joined (through another control plane too).
func (f *Fleet) joinStored(ctx context.Context) {
	f.joining.Lock()
	defer f.joining.Unlock()
	hosts, err := f.o.Store.ListHosts(ctx)
	if err != nil {
		f.log.Warn("listing hosts", "err", err)
		return
	}
	known := map[string]bool{}
	for _, h := range hosts {
		if h.TokenHash == "" {
			// No token: a removed host's row that a heartbeat under way wrote back.
			if f.member(h.ID) == nil {
				f.o.Store.DeleteHost(ctx, h.ID)
			}
			continue
		}
		known[h.ID] = true
		if h.URL == "" {
			continue
		}
		if err := f.Join(ctx, h.ID, h.URL); err != nil {
			f.log.Warn("joining a host", "host", h.ID, "err", err)
		}
	}
	// A host whose row is gone was removed (lbb hosts rm): its token joins no more, and it
	// leaves the fleet as a lost host does.
	for _, m := range f.all() {
		if known[m.ID] {
			continue
		}
		f.lose(ctx, m, "removed from the control plane's hosts")
		f.o.Store.DeleteHost(ctx, m.ID) // lose recorded it lost
		f.mu.Lock()
		f.members = slices.DeleteFunc(slices.Clone(f.members), func(x *member) bool { return x == m })
		f.mu.Unlock()
		if c, ok := m.Host.(io.Closer); ok {
			c.Close()
		}
	}
}

// RegisterHandler serves POST /v1/hosts/register (a host's registration, its token as the
// bearer token) before the API is up: lbb serve --hosts remote waiting for its first host.
func (f *Fleet) RegisterHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var reg hostagent.Registration
		var answer hostagent.Registered
		err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&reg)
		if err != nil {
			err = errdefs.InvalidArgument("registration: %v", err)
		} else {
			answer, err = f.Register(r.Context(), token, reg)
		}
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			// The statuses are the API's (errhttp), as the route's once the API is up.
			w.WriteHeader(errhttp.Status(err))
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": errdefs.CodeOf(err), "message": err.Error()}})
			return
		}
		json.NewEncoder(w).Encode(answer)
	})
}
