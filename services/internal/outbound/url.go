package outbound

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/conch-sh/conch/services/internal/egress"
)

// CheckHost returns the lookup form of a host name a URL names. Names
// that are numbers in disguise ("2130706433", "0x7f.1", "0177.0.0.1",
// "127.1": forms some resolvers read as addresses) are refused: an address
// must be written as one.
func CheckHost(host string) (string, error) {
	name, err := egress.NormalizeName(host)
	if err != nil {
		return "", fmt.Errorf("conch: outbound to %s refused: not a host name", host)
	}
	if numeric(name) {
		return "", fmt.Errorf("conch: outbound to %s refused: an address not written as one", host)
	}
	return name, nil
}

// numeric reports whether name's last label is all digits or a 0x hex
// number: no top-level domain is, and inet_aton-style resolvers read such
// a name as an IPv4 address.
func numeric(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		_, err := strconv.ParseUint("0"+h, 16, 64)
		return err == nil
	}
	_, err := strconv.ParseUint(last, 10, 64)
	return err == nil
}

// URLKind says what a URL field holds.
type URLKind int

const (
	// Endpoint is a URL conch calls as it is (a webhook, an MCP server):
	// it may carry a query.
	Endpoint URLKind = iota
	// Base is a URL conch appends paths to (an upstream's base_url, a
	// chat API's base): no query or fragment, which would swallow them.
	Base
)

// ParseURL checks a URL a tenant saves: http or https, a host, no
// credentials, no fragment, and for a Base no query. When g is set, a
// host written as an address is judged now, so that what the guard would
// refuse at call time is refused on save; names are judged when dialled,
// since what they resolve to may change.
func (g *Guard) ParseURL(raw string, kind URLKind) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %q", raw)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("want an http:// or https:// URL, got %q", raw)
	case u.Opaque != "" || u.Host == "":
		return nil, fmt.Errorf("want an absolute URL with a host, got %q", raw)
	case u.User != nil:
		return nil, fmt.Errorf("credentials in the URL are not allowed, got %q", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, fmt.Errorf("a fragment is not allowed, got %q", raw)
	case kind == Base && (u.RawQuery != "" || u.ForceQuery):
		return nil, fmt.Errorf("a base URL may not have a query, got %q", raw)
	}
	host := u.Hostname()
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return nil, fmt.Errorf("bad port in %q", raw)
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if g != nil {
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			n, _ := strconv.ParseUint(port, 10, 16)
			if why := g.Judge("", netip.AddrPortFrom(ip, uint16(n))); why != "" {
				return nil, &RefusedError{Addr: net.JoinHostPort(ip.String(), port), Why: why}
			}
		}
		return u, nil
	}
	if _, err := CheckHost(host); err != nil {
		return nil, err
	}
	return u, nil
}

// JoinPath appends elem to base as URL path segments (never as text, so
// nothing in base or elem can turn into a query, a fragment or another
// host).
func JoinPath(base string, elem ...string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	if u.RawQuery != "" || u.ForceQuery || strings.Contains(base, "#") {
		return "", fmt.Errorf("base URL %q has a query or fragment", base)
	}
	return u.JoinPath(elem...).String(), nil
}
