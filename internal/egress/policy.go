// Package egress is the host side of a sandbox's routes out: the guard that decides each
// connection a sandbox's proxies ask for (the allowlist, then the addresses its name
// resolves to), dials it, counts its bytes against the sandbox's quota and cuts it there;
// and the forwarder of the in-sandbox API, which attaches the sandbox's grant on the host
// side. Both serve the connections the guest agent hands over on the channel (agent.Listen):
// nothing listens on the host for a sandbox, so nothing there is reachable from inside.
//
// A sandbox has no network device but lo in every mode; what leaves goes through its guest
// agent's proxies, as streams over its one channel, to here. The guard resolves names itself
// (there is no DNS inside) and dials the address it resolved, never the name again, so a
// name cannot resolve one way when checked and another when dialed.
package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/littlebigbrain/lbb/internal/store"
)

// Modes, as store.Egress says them.
const (
	ModeNone      = store.EgressNone
	ModeAllowlist = store.EgressAllowlist
	ModePublic    = store.EgressPublic
)

// defaultPorts are what an allowlist entry without a port allows.
var defaultPorts = []int{80, 443}

// rule is one allowlist entry: a host name (or IP literal), or every name under a domain
// (wildcard: "*.example.org" matches a.example.org and a.b.example.org, not example.org),
// and its ports (nil: any).
type rule struct {
	host     string
	wildcard bool
	ports    []int
}

// ParseRule reads an allowlist entry: "example.org", "example.org:8080", "example.org:*",
// "*.example.org", "[2001:db8::1]:443". Without a port it allows 80 and 443.
func ParseRule(s string) (rule, error) {
	bad := func(why string) (rule, error) {
		return rule{}, fmt.Errorf("allow %q: %s (want a host name, *.domain, or either with :port or :*)", s, why)
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("an unclosed [")
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if s[end+1:] != "" && !strings.HasPrefix(s[end+1:], ":") {
			return bad("junk after ]")
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return bad("not an IPv6 address in []")
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	r := rule{ports: defaultPorts}
	switch {
	case port == "*":
		r.ports = nil
	case port != "":
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return bad("a port is 1 to 65535")
		}
		r.ports = []int{n}
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.wildcard, host = true, rest
	}
	name, err := Normalize(host)
	if err != nil {
		return bad(err.Error())
	}
	if r.wildcard && !strings.Contains(name, ".") {
		return bad("a wildcard needs a domain of two labels at least")
	}
	r.host = name
	return r, nil
}

// Normalize is the form names are compared in: lower case, no trailing dot, only letters,
// digits, '-' and '.' (or an IP literal), at most 253 bytes.
func Normalize(host string) (string, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return a.WithZone("").String(), nil
	}
	if h == "" || len(h) > 253 {
		return "", fmt.Errorf("a host name is 1 to 253 bytes")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("%q is no host name", host)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("%q is no host name (letters, digits, '-' and '.')", host)
			}
		}
	}
	return h, nil
}

func (r rule) matches(name string, port int) bool {
	if r.ports != nil && !slices.Contains(r.ports, port) {
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(name, "."+r.host)
	}
	return name == r.host
}

// Check validates a policy as a call gives it: a known mode, an allowlist only in allowlist
// mode (where it must not be empty), each entry well formed, a quota not negative.
func Check(p store.Egress) error {
	switch p.Mode {
	case ModeNone, ModePublic:
		if len(p.Allow) > 0 {
			return fmt.Errorf("egress.allow goes with mode allowlist, not %s", p.Mode)
		}
	case ModeAllowlist:
		if len(p.Allow) == 0 {
			return fmt.Errorf("egress mode allowlist needs egress.allow: the host names (and ports) it lets through")
		}
	default:
		return fmt.Errorf("egress.mode %q: want none, allowlist or public", p.Mode)
	}
	if len(p.Allow) > 256 {
		return fmt.Errorf("egress.allow has %d entries; at most 256", len(p.Allow))
	}
	for _, a := range p.Allow {
		if _, err := ParseRule(a); err != nil {
			return err
		}
	}
	if p.QuotaBytes < 0 {
		return fmt.Errorf("egress.quota_bytes must not be negative")
	}
	return nil
}

// policy is a checked store.Egress.
type policy struct {
	mode  string
	rules []rule
	quota int64
}

func compile(p store.Egress) (policy, error) {
	if p.Mode == "" {
		p.Mode = ModeNone
	}
	if err := Check(p); err != nil {
		return policy{}, err
	}
	out := policy{mode: p.Mode, quota: p.QuotaBytes}
	for _, a := range p.Allow {
		r, _ := ParseRule(a)
		out.rules = append(out.rules, r)
	}
	return out, nil
}

func matchAny(rules []rule, name string, port int) bool {
	for _, r := range rules {
		if r.matches(name, port) {
			return true
		}
	}
	return false
}
