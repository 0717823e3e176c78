package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/conch-sh/conch/services/internal/egress"
)

// Options configure a Guard.
type Options struct {
	// Allow are the operator's exceptions: CIDRs ("10.8.0.0/16"),
	// addresses ("127.0.0.1"), names ("models.internal", "*.corp.example"),
	// each with an optional port ("127.0.0.1:11434"). A name matches the
	// name a URL asked for, and then every address it resolves to.
	Allow []string
	// Deny are refused before Allow: the cluster's service and pod
	// ranges, say, when they are not private.
	Deny []string
	// ControlPlane are the host:port endpoints of etcd and MinIO: refused
	// whatever Allow says, by the name asked for and by the addresses the
	// name resolves to.
	ControlPlane []string
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds one connection attempt; 0 means 10s.
	DialTimeout time.Duration
}

// Resolver looks up the addresses of a name (net.Resolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard judges and dials outbound connections. It is safe for concurrent
// use.
type Guard struct {
	allow, deny, control []rule
	resolver             Resolver
	dialer               net.Dialer

	mu        sync.Mutex
	local     []netip.Addr
	localTime time.Time
	resolved  map[string][]netip.Addr // control-plane and deny names → addresses
	resTime   time.Time
}

// rule is one entry of Allow, Deny or ControlPlane: a prefix or a name
// (exact or "*." suffix), with port 0 for any port.
type rule struct {
	prefix netip.Prefix
	name   string
	port   uint16
}

// refreshEvery is how long the node's own addresses and the resolved
// control-plane names are kept.
const refreshEvery = 10 * time.Second

// New returns a Guard; an entry of o that does not parse is an error
// naming it.
func New(o Options) (*Guard, error) {
	g := &Guard{resolver: o.Resolver, resolved: map[string][]netip.Addr{}}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	var err error
	if g.allow, err = parseRules("outbound allow", o.Allow); err != nil {
		return nil, err
	}
	if g.deny, err = parseRules("outbound deny", o.Deny); err != nil {
		return nil, err
	}
	if g.control, err = parseRules("control plane", o.ControlPlane); err != nil {
		return nil, err
	}
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	// The socket's Control is the last check, on the address the kernel
	// is about to connect to: DialContext dials only addresses it judged,
	// and this makes sure of it.
	g.dialer = net.Dialer{Timeout: timeout, ControlContext: func(ctx context.Context, _, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("conch: outbound to %s refused: not an address", address)
		}
		name, _ := ctx.Value(nameKey{}).(string)
		if why := g.Judge(name, ap); why != "" {
			return &RefusedError{Addr: ap.String(), Why: why}
		}
		return nil
	}}
	return g, nil
}

// Must is New for settings already validated (ValidateRules).
func Must(o Options) *Guard {
	g, err := New(o)
	if err != nil {
		panic(err)
	}
	return g
}

// ValidateRules checks entries of Allow or Deny as New parses them.
func ValidateRules(what string, entries []string) error {
	_, err := parseRules(what, entries)
	return err
}

func parseRules(what string, entries []string) ([]rule, error) {
	var out []rule
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, e, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRule(e string) (rule, error) {
	if p, err := netip.ParsePrefix(e); err == nil {
		return rule{prefix: p.Masked()}, nil
	}
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, port = h, p
	}
	var r rule
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return rule{}, fmt.Errorf("bad port %q", port)
		}
		r.port = uint16(n)
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		r.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	wild := strings.HasPrefix(host, "*.")
	name, err := egress.NormalizeName(strings.TrimPrefix(host, "*."))
	if err != nil || numeric(name) {
		return rule{}, errors.New("want a CIDR, an address or a host name, each with an optional :port")
	}
	if wild {
		name = "*." + name
	}
	r.name = name
	return r, nil
}

// matches reports whether r covers the connection to ap for a URL that
// asked for name ("" when it asked for an address).
func (r rule) matches(name string, ap netip.AddrPort) bool {
	if r.port != 0 && r.port != ap.Port() {
		return false
	}
	switch {
	case r.prefix.IsValid():
		return r.prefix.Contains(ap.Addr())
	case name == "":
		return false
	case strings.HasPrefix(r.name, "*."):
		return strings.HasSuffix(name, r.name[1:])
	}
	return name == r.name
}

// nameKey carries the name a dial asked for to the socket's check.
type nameKey struct{}

// RefusedError is a connection the guard would not make.
type RefusedError struct {
	Addr string // host:port as dialled
	Why  string // the address class or rule that refused it
}

func (e *RefusedError) Error() string {
	return "conch: outbound to " + e.Addr + " refused: " + e.Why
}

// Judge says why a connection to ap, for a URL that asked for name ("" for
// an address literal), is refused, or "" when it is allowed.
func (g *Guard) Judge(name string, ap netip.AddrPort) string {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if g.hit(g.control, name, ap) {
		return ReasonControlPlane
	}
	if g.hit(g.deny, name, ap) {
		return ReasonDenied
	}
	for _, r := range g.allow {
		if r.matches(name, ap) {
			return ""
		}
	}
	if class := Class(ap.Addr()); class != "" {
		return class
	}
	if slices.Contains(g.localAddrs(), ap.Addr()) {
		return ReasonThisNode
	}
	return ""
}

// hit reports whether a rule of rules covers the connection, by its name,
// its address, or the addresses a rule's own name resolves to.
func (g *Guard) hit(rules []rule, name string, ap netip.AddrPort) bool {
	for _, r := range rules {
		if r.matches(name, ap) {
			return true
		}
		if r.name != "" && !strings.HasPrefix(r.name, "*.") && (r.port == 0 || r.port == ap.Port()) &&
			slices.Contains(g.resolve(r.name), ap.Addr()) {
			return true
		}
	}
	return false
}

// resolve returns the addresses of a rule's name, looked up at most once
// per refreshEvery; the lookup runs outside the lock, so that a slow DNS
// answer holds no other connection's verdict.
func (g *Guard) resolve(name string) []netip.Addr {
	g.mu.Lock()
	if time.Since(g.resTime) > refreshEvery {
		clear(g.resolved)
		g.resTime = time.Now()
	}
	addrs, ok := g.resolved[name]
	g.mu.Unlock()
	if ok {
		return addrs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	found, _ := g.resolver.LookupNetIP(ctx, "ip", name)
	addrs = make([]netip.Addr, len(found))
	for i, a := range found {
		addrs[i] = a.Unmap()
	}
	g.mu.Lock()
	g.resolved[name] = addrs
	g.mu.Unlock()
	return addrs
}

// localAddrs are the addresses of this node's interfaces, where conch's
// own services may listen.
func (g *Guard) localAddrs() []netip.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.localTime) < refreshEvery {
		return g.local
	}
	g.local = g.local[:0]
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					g.local = append(g.local, ip.Unmap())
				}
			}
		}
	}
	g.localTime = time.Now()
	return g.local
}

// DialContext connects to address (host:port) as a tenant's URL named it:
// a name is resolved here and each of its addresses judged before it is
// dialled; the first allowed address that answers wins.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("conch: outbound to %q: %w", address, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("conch: outbound to %q: bad port", address)
	}
	name, addrs, err := g.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	var refused, failed error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(pn))
		if why := g.Judge(name, ap); why != "" {
			if refused == nil {
				refused = &RefusedError{Addr: ap.String(), Why: why}
			}
			continue
		}
		c, err := g.dialer.DialContext(context.WithValue(ctx, nameKey{}, name), network, ap.String())
		if err == nil {
			return c, nil
		}
		failed = err
	}
	if failed != nil {
		return nil, failed
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("conch: outbound to %s: no address", address)
}

// lookup returns the name a host asked for ("" for an address literal) and
// the addresses to judge.
func (g *Guard) lookup(ctx context.Context, host string) (string, []netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", nil, fmt.Errorf("conch: outbound to %s refused: zoned address", host)
		}
		return "", []netip.Addr{ip}, nil
	}
	name, err := CheckHost(host)
	if err != nil {
		return "", nil, err
	}
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return "", nil, fmt.Errorf("conch: outbound to %s: %w", host, err)
	}
	return name, addrs, nil
}

// Transport is an HTTP transport whose every connection goes through the
// guard; environment proxies are ignored, since a proxy would make the
// connection the guard judged.
func (g *Guard) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	t.DialTLSContext = nil
	return t
}

// Client is an HTTP client over Transport that follows at most five
// redirects, each to http or https only (each redirect's connection is
// judged like the first).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: g.Transport(), Timeout: timeout, CheckRedirect: checkRedirect}
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("conch: outbound: stopped after 5 redirects")
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("conch: outbound: redirect to a %s URL refused", req.URL.Scheme)
	}
	return nil
}
