package egress

import (
	"net/netip"
)

// Addresses the guard refuses in every mode, unless the operator permits them
// (--egress-permit): they reach the host itself, its networks, or a cloud's services.
var refusedRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (this host)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT (shared address space)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("100::/64"), "discard"},
}

// Nonpublic says what kind of address a is when it is not a public one ("loopback",
// "private", …), or "" when it is. IPv4 addresses inside IPv6 ones (mapped, NAT64, 6to4)
// are judged as the IPv4 address they carry.
func Nonpublic(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
			return Nonpublic(netip.AddrFrom4([4]byte(b[12:16])))
		case netip.MustParsePrefix("2002::/16").Contains(a):
			if w := Nonpublic(netip.AddrFrom4([4]byte(b[2:6]))); w != "" {
				return w + " (in 6to4)"
			}
		}
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return r.what
		}
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified (this host)"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case !a.IsGlobalUnicast():
		return "not global unicast"
	}
	return ""
}
