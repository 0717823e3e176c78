package outbound

import (
	"net/netip"
	"strings"
)

// Class names the class of ip when conch never connects to it for a
// tenant, or is "" for a public unicast address: loopback,
// private (RFC 1918, unique local), link-local (the cloud metadata
// addresses 169.254.169.254 and fd00:ec2::254 among them), carrier-grade
// NAT, multicast, unspecified, and the reserved ranges that are none of
// these but reach no public host. An IPv6 address embedding an IPv4 one
// (mapped, NAT64, 6to4) is judged by the IPv4 address too.
func Class(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, r := range reserved {
		if r.prefix.Contains(ip) {
			return r.class
		}
	}
	if v4, ok := embedded(ip); ok {
		if class := Class(v4); class != "" {
			return class + " (embedded in " + ip.String() + ")"
		}
	}
	return ""
}

var reserved = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
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

// The reasons Guard.Judge gives besides an address class.
const (
	ReasonControlPlane = "conch's control plane"
	ReasonDenied       = "denied by the operator"
	ReasonThisNode     = "this node's address"
)

// Phrase is a reason Guard.Judge gives as a noun phrase for messages
// that say "it is …": "a loopback address".
func Phrase(reason string) string {
	switch reason {
	case "":
		return ""
	case ReasonControlPlane:
		return "an address of conch's control plane"
	case ReasonDenied:
		return "an address the operator denies"
	case ReasonThisNode:
		return "an address of this node"
	}
	class, rest, _ := strings.Cut(reason, " (")
	if rest != "" {
		rest = " (" + rest
	}
	article := "a "
	if strings.IndexByte("aeiou", class[0]) >= 0 {
		article = "an "
	}
	return article + class + " address" + rest
}
