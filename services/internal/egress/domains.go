package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// profile normalises names as a browser would look them up: Unicode is
// mapped and converted to its A-label form, letters to lower case.
var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true), idna.VerifyDNSLength(true))

// ErrPattern is an allowlist entry that is neither a domain name, a "*."
// suffix nor an IP literal.
var ErrPattern = errors.New("egress: not a domain name, *.suffix or IP address")

// NormalizePattern returns the canonical form of an allowlist entry: a
// domain name ("api.github.com"), a suffix ("*.pypi.org", matching names
// below pypi.org but not pypi.org itself) or an IP literal, written any
// way the user likes ("API.GitHub.com", "*.bücher.example", "[::1]").
func NormalizePattern(p string) (string, error) {
	if ip, ok := parseIP(p); ok {
		return ip.String(), nil
	}
	wild := strings.HasPrefix(p, "*.")
	name := strings.TrimPrefix(p, "*.")
	n, err := NormalizeName(name)
	if err != nil || strings.Contains(n, "*") {
		return "", fmt.Errorf("%w: %q", ErrPattern, p)
	}
	// A suffix of one label ("*.com") would allow a whole top-level domain.
	if wild && !strings.Contains(n, ".") {
		return "", fmt.Errorf("%w: %q allows a whole top-level domain", ErrPattern, p)
	}
	if !strings.Contains(n, ".") {
		return "", fmt.Errorf("%w: %q has no dot", ErrPattern, p)
	}
	if wild {
		return "*." + n, nil
	}
	return n, nil
}

// NormalizeName returns the lookup form of a host name a client asked for:
// lower case, A-labels, without a trailing dot.
func NormalizeName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%w: %q", ErrPattern, name)
	}
	n, err := profile.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrPattern, name, err)
	}
	return n, nil
}

// parseIP accepts an IP literal, bracketed or not, without a zone.
func parseIP(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// Allowlist is a set of normalised entries.
type Allowlist struct {
	exact    map[string]bool
	suffixes []string // ".pypi.org"
}

// NewAllowlist normalises patterns; the first bad one is an error naming
// its index.
func NewAllowlist(patterns []string) (*Allowlist, error) {
	a := &Allowlist{exact: map[string]bool{}}
	for i, p := range patterns {
		n, err := NormalizePattern(p)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		if s, ok := strings.CutPrefix(n, "*"); ok {
			a.suffixes = append(a.suffixes, s)
		} else {
			a.exact[n] = true
		}
	}
	return a, nil
}

// Match reports whether host (a name or IP literal as the client wrote it)
// is allowed. A name that does not normalise matches nothing.
func (a *Allowlist) Match(host string) bool {
	if a == nil {
		return false
	}
	if ip, ok := parseIP(host); ok {
		return a.exact[ip.String()]
	}
	n, err := NormalizeName(host)
	if err != nil {
		return false
	}
	if a.exact[n] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// Covers reports whether every host pattern p allows, wide allows too:
// an exact entry is covered by itself or a suffix it ends with, a suffix
// by an equal or shorter suffix. Both are normalised entries.
func Covers(wide []string, p string) bool {
	for _, w := range wide {
		switch {
		case w == p:
			return true
		case strings.HasPrefix(w, "*.") && !isIP(p):
			if strings.HasSuffix(p, w[1:]) {
				return true
			}
		}
	}
	return false
}

func isIP(s string) bool {
	_, ok := parseIP(s)
	return ok
}
