package egress

import "net/netip"

// Refusal says why no egress may reach ip, or "" when it may: loopback,
// private (RFC 1918, unique local), link-local (the cloud metadata
// addresses 169.254.169.254 and fd00:ec2::254 among them), carrier-grade
// NAT, multicast, unspecified, and the reserved ranges that are none of
// these but reach no public host. An IPv6 address embedding an IPv4 one
// (mapped, NAT64, 6to4) is judged by the IPv4 address too.
func Refusal(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "not an address"
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	for _, r := range reserved {
		if r.prefix.Contains(ip) {
			return r.why
		}
	}
	if v4, ok := embedded(ip); ok {
		if why := Refusal(v4); why != "" {
			return why + " (embedded in " + ip.String() + ")"
		}
	}
	return ""
}

var reserved = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a reserved address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "a broadcast address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	nat64L  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	compat4 = netip.MustParsePrefix("::/96")
)

// embedded is the IPv4 address an IPv6 address routes to, if it has one.
func embedded(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64L.Contains(ip), compat4.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// documentation are the ranges set aside for examples; nothing public
// lives there.
var documentation = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Documentation reports whether ip is in a range reserved for
// documentation (RFC 5737, RFC 3849). Sandbox egress allows them, so that
// tests can stand up an "internet" there; the router's built-in tools,
// which have no such test, refuse them.
func Documentation(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range documentation {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
