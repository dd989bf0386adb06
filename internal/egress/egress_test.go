package egress

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/store"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		rule string
		ok   []string
		no   []string
	}{
		{"example.org", []string{"example.org:443", "example.org:80", "EXAMPLE.org.:443"}, []string{"example.org:8080", "a.example.org:443", "example.com:443"}},
		{"example.org:8080", []string{"example.org:8080"}, []string{"example.org:443"}},
		{"example.org:*", []string{"example.org:1", "example.org:65535"}, []string{"b.example.org:1"}},
		{"*.example.org", []string{"a.example.org:443", "a.b.example.org:80"}, []string{"example.org:443", "aexample.org:443", "a.example.org:22"}},
		{"*.example.org:22", []string{"git.example.org:22"}, []string{"git.example.org:443"}},
		{"10.1.2.3:5432", []string{"10.1.2.3:5432"}, []string{"10.1.2.4:5432"}},
		{"[2001:db8::1]:443", []string{"2001:db8::1:443"}, nil},
	} {
		r, err := ParseRule(tc.rule)
		if err != nil {
			t.Fatalf("%s: %v", tc.rule, err)
		}
		try := func(hp string) bool {
			i := strings.LastIndexByte(hp, ':')
			var port int
			fmt.Sscan(hp[i+1:], &port)
			name, err := Normalize(hp[:i])
			return err == nil && r.matches(name, port)
		}
		for _, hp := range tc.ok {
			if !try(hp) {
				t.Errorf("%s does not match %s", tc.rule, hp)
			}
		}
		for _, hp := range tc.no {
			if try(hp) {
				t.Errorf("%s matches %s", tc.rule, hp)
			}
		}
	}
	for _, bad := range []string{"", "*", "*.org", "exa mple.org", "example.org:0", "example.org:70000", "a_b.org", "-a.org",
		"*.*.example.org", "exämple.org", "[::1", "example.org:x"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		p  store.Egress
		ok bool
	}{
		{store.Egress{Mode: "none"}, true},
		{store.Egress{Mode: "public", QuotaBytes: 10}, true},
		{store.Egress{Mode: "allowlist", Allow: []string{"example.org"}}, true},
		{store.Egress{Mode: "allowlist"}, false},
		{store.Egress{Mode: "public", Allow: []string{"example.org"}}, false},
		{store.Egress{Mode: "open"}, false},
		{store.Egress{Mode: "public", QuotaBytes: -1}, false},
	} {
		if err := Check(tc.p); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.p, err)
		}
	}
}

func TestNonpublic(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "127.9.9.9": "loopback", "::1": "loopback", "10.0.0.1": "private", "172.16.5.4": "private",
		"192.168.1.1": "private", "fc00::1": "private", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"169.254.169.254": "cloud metadata", "fd00:ec2::254": "cloud metadata", "100.64.0.1": "CGNAT (shared address space)",
		"100.100.100.200": "cloud metadata", "224.0.0.1": "multicast", "ff02::1": "multicast", "0.0.0.0": "unspecified (this host)",
		"::": "unspecified (this host)", "::ffff:127.0.0.1": "loopback", "64:ff9b::a9fe:a9fe": "cloud metadata",
		"2002:7f00:1::1": "loopback (in 6to4)", "255.255.255.255": "reserved", "240.0.0.1": "reserved",
		"1.1.1.1": "", "8.8.8.8": "", "2606:4700::1111": "",
	} {
		if got := Nonpublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

// lookup resolves the tests' names as a DNS server would.
func lookup(names map[string]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := names[host]
		if !ok {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
}

func TestDialDecides(t *testing.T) {
	names := map[string]string{"allowed.test": "127.0.0.1", "meta.test": "169.254.169.254", "v6.test": "::1"}
	open := NewGuard(Options{Lookup: lookup(names), Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	closed := NewGuard(Options{Lookup: lookup(names)})
	for _, tc := range []struct {
		g         *Guard
		p         store.Egress
		host      string
		port      int
		code, why string
	}{
		{closed, store.Egress{Mode: "public"}, "allowed.test", 9, "egress_denied", "allowed.test resolves to 127.0.0.1, a loopback address"},
		{open, store.Egress{Mode: "public"}, "meta.test", 80, "egress_denied", "meta.test resolves to 169.254.169.254, a cloud metadata address"},
		{open, store.Egress{Mode: "public"}, "v6.test", 80, "egress_denied", "v6.test resolves to ::1, a loopback address"},
		{open, store.Egress{Mode: "public"}, "169.254.169.254", 80, "egress_denied", "169.254.169.254 is a cloud metadata address"},
		{open, store.Egress{Mode: "allowlist", Allow: []string{"allowed.test:*"}}, "other.test", 80, "egress_denied", "other.test:80 is not on the sandbox's egress allowlist"},
		{open, store.Egress{Mode: "allowlist", Allow: []string{"allowed.test:*"}}, "allowed.test", 1, "egress_connection_refused", "connection refused"},
		{open, store.Egress{Mode: "none"}, "allowed.test", 80, "egress_denied", "egress is off"},
		{open, store.Egress{Mode: "public"}, "nowhere.test", 80, "egress_unreachable", "cannot resolve nowhere.test"},
		{open, store.Egress{Mode: "public"}, "bad name", 80, "egress_denied", "no host name"},
	} {
		sb, err := tc.g.NewSandbox("sbx_t", tc.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		var told []Refused
		sb.OnRefused = func(r Refused) { told = append(told, r) }
		c, ref := sb.Dial(context.Background(), tc.host, tc.port)
		if c != nil {
			c.Close()
		}
		if ref == nil || ref.Code != tc.code || !strings.Contains(ref.Message, tc.why) {
			t.Errorf("%s:%d under %+v: %+v, want %s %q", tc.host, tc.port, tc.p, ref, tc.code, tc.why)
			continue
		}
		sb.Dial(context.Background(), tc.host, tc.port)
		if u := sb.Usage(); u.Refused != 2 || len(told) != 1 {
			t.Errorf("%s: usage %+v, told %d times", tc.host, u, len(told))
		}
	}
}
