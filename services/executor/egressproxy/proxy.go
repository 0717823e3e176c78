package egressproxy

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"

	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/outbound"
)

const instrumentationName = "github.com/conch-sh/conch/services/executor/egressproxy"

var (
	tracer = otel.Tracer(instrumentationName)
	meter  = otel.Meter(instrumentationName)

	// connections counts sandbox connections to the outside by decision
	// (allowed, refused, failed, limited).
	connections, _ = meter.Int64Counter("conch.egress.connections",
		metric.WithDescription("Sandbox egress connections, by decision (allowed, refused, failed, limited)"))
	// egressBytes counts the bytes of allowed connections by direction.
	egressBytes, _ = meter.Int64Counter("conch.egress.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of sandbox egress connections, by direction (sent, received)"))
)

// DefaultPorts are the ports a policy without ports allows.
var DefaultPorts = []int{443, 80}

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy.
type Config struct {
	// Resolver resolves the names clients ask for; nil is the system's.
	Resolver Resolver
	// Guard judges every address dialled; it refuses conch's own
	// services, etcd and MinIO, and any the operator lists besides the
	// internal ranges. Nil means a guard with no such list.
	Guard *outbound.Guard
	// DialTimeout bounds resolving and connecting; 0 means 10s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds reading a client's request; 0 means 30s.
	HandshakeTimeout time.Duration
	// UpstreamRoots verify the hosts whose TLS the proxy terminates; nil
	// means the system's.
	UpstreamRoots *x509.CertPool
	// Log receives one record per refused connection.
	Log *slog.Logger
}

// Proxy serves the egress of any number of sandboxes, each on its own
// listener with its own policy.
type Proxy struct {
	cfg    Config
	dialer net.Dialer
}

// New returns a proxy.
func New(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Guard == nil {
		cfg.Guard = outbound.Must(outbound.Options{})
	}
	p := &Proxy{cfg: cfg}
	p.dialer = net.Dialer{Timeout: cfg.DialTimeout, Control: p.control}
	return p
}

// Policy is what one sandbox may reach.
type Policy struct {
	// Gateway names whose policy this is, for refusals.
	Gateway string
	// Allow lists the names (and IP literals) allowed.
	Allow *egress.Allowlist
	// Ports allowed; empty means DefaultPorts.
	Ports []int
	// MaxConns bounds the connections open at once to the outside; 0
	// means DefaultMaxConns. Clients waiting on the proxy are bounded to
	// a few times as many, so that a sandbox cannot spend the executor's
	// file descriptors.
	MaxConns int
	// MaxBytes bounds the bytes a sandbox sends and receives in all; 0
	// means DefaultMaxBytes.
	MaxBytes int64
	// Ask, when set, is asked about a name (normalised) or IP literal the
	// allowlist misses, on an allowed port; the connection is held until
	// it answers. A host it allows stays allowed for the session (the
	// sandbox). why says why not.
	Ask func(ctx context.Context, host string, port int) (allowed bool, why string)
	// Secrets are put in place of their placeholders in requests to their
	// hosts; CA, set when there are secrets, signs what the proxy shows
	// the sandbox for those hosts.
	Secrets []Secret
	CA      *CA
	// Shared, when set, is a budget the sandbox shares with others (its
	// account's egress bytes per day): a connection is refused, and one
	// open is ended, once it is spent, as with MaxBytes.
	Shared SharedBudget
	// OnOpen, when set, is told of every connection allowed and opened;
	// OnConnection, of every connection, allowed or not, as it ends.
	OnOpen       func()
	OnConnection func(Record)
}

// SharedBudget is bytes several sandboxes spend from together.
type SharedBudget interface {
	// Left is what is left to spend; 0 or less when spent.
	Left() int64
	// Spend takes n bytes moved from it.
	Spend(n int64)
	// Why says, for a refusal, that it is spent.
	Why() string
}

// Defaults of the per-sandbox limits.
const (
	DefaultMaxConns       = 64
	DefaultMaxBytes int64 = 4 << 30
	// clientsPerConn is how many client connections, held or handshaking,
	// the proxy keeps per connection it may open.
	clientsPerConn = 4
)

// errBudget ends a connection when its sandbox has moved all the bytes
// its policy allows.
var errBudget = errors.New("conch: egress byte budget of this sandbox is spent")

// Refused is a connection the policy does not allow.
type Refused struct {
	Host    string
	Port    int
	Gateway string
	// Why is set when the name is allowed but an address is not.
	Why string
}

func (r *Refused) Error() string {
	msg := fmt.Sprintf("conch: egress to %s is not allowed by %s", net.JoinHostPort(r.Host, strconv.Itoa(r.Port)), by(r.Gateway))
	if r.Why != "" {
		msg += ": " + r.Why
	}
	return msg
}

// refusal says why the proxy never dials ap, or "": package outbound's
// guard judges it, with no exception an operator allows for tenants'
// outbound calls.
func (p *Proxy) refusal(ap netip.AddrPort) string {
	return outbound.Phrase(p.cfg.Guard.Judge("", ap))
}

// control refuses, at the socket, an address the proxy never dials: the
// last check, on the address the kernel is about to connect to.
func (p *Proxy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egressproxy: dial %q: not an address", address)
	}
	if why := p.refusal(ap); why != "" {
		return fmt.Errorf("egressproxy: %s is %s", ap.Addr(), why)
	}
	return nil
}

// check decides whether the sandbox may connect to host:port: its port
// allowed, and its name on the allowlist or allowed by Ask.
func (s *session) check(ctx context.Context, host string, port int) error {
	pol := s.pol
	ports := pol.Ports
	if len(ports) == 0 {
		ports = DefaultPorts
	}
	if !slices.Contains(ports, port) {
		return &Refused{Host: host, Port: port, Gateway: pol.Gateway, Why: "port " + strconv.Itoa(port) + " is not an allowed port"}
	}
	if pol.Allow.Match(host) {
		return nil
	}
	norm := host
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		norm = ip.Unmap().String()
	} else if n, err := egress.NormalizeName(host); err == nil {
		norm = n
	} else {
		return &Refused{Host: host, Port: port, Gateway: pol.Gateway}
	}
	if pol.Ask == nil {
		return &Refused{Host: host, Port: port, Gateway: pol.Gateway}
	}
	key := net.JoinHostPort(norm, strconv.Itoa(port))
	s.mu.Lock()
	granted := s.granted[key]
	s.mu.Unlock()
	if granted {
		return nil
	}
	ok, why := pol.Ask(ctx, norm, port)
	if !ok {
		return &Refused{Host: host, Port: port, Gateway: pol.Gateway, Why: why}
	}
	s.mu.Lock()
	s.granted[key] = true
	s.mu.Unlock()
	return nil
}

// dial connects to host:port, which the policy allowed, at an address it
// resolves to that the proxy may dial.
func (p *Proxy) dial(ctx context.Context, pol *Policy, host string, port int) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		name, err := egress.NormalizeName(host)
		if err != nil {
			return nil, netip.Addr{}, &Refused{Host: host, Port: port, Gateway: pol.Gateway}
		}
		if addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", name); err != nil {
			return nil, netip.Addr{}, fmt.Errorf("conch: egress to %s: cannot resolve %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), name, err)
		}
	}
	var refused, failed error
	for _, a := range addrs {
		a = a.Unmap()
		if why := p.refusal(netip.AddrPortFrom(a, uint16(port))); why != "" {
			if refused == nil {
				w := "it is " + why
				if a.String() != host {
					w = "it resolves to " + a.String() + ", " + why
				}
				refused = &Refused{Host: host, Port: port, Gateway: pol.Gateway, Why: w}
			}
			continue
		}
		c, err := p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, a, nil
		}
		failed = err
	}
	if failed != nil {
		return nil, netip.Addr{}, fmt.Errorf("conch: egress to %s failed: %w", net.JoinHostPort(host, strconv.Itoa(port)), failed)
	}
	if refused != nil {
		return nil, netip.Addr{}, refused
	}
	return nil, netip.Addr{}, fmt.Errorf("conch: egress to %s: %s has no address", net.JoinHostPort(host, strconv.Itoa(port)), host)
}

// Serve answers the connections of one sandbox on l until ctx ends or l
// is closed; every connection still open then is closed.
func (p *Proxy) Serve(ctx context.Context, l net.Listener, pol Policy) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if pol.MaxConns <= 0 {
		pol.MaxConns = DefaultMaxConns
	}
	if pol.MaxBytes <= 0 {
		pol.MaxBytes = DefaultMaxBytes
	}
	s := &session{p: p, pol: &pol, conns: map[net.Conn]struct{}{}, granted: map[string]bool{}, upstreams: make(chan struct{}, pol.MaxConns)}
	s.budget.Store(pol.MaxBytes)
	s.transport = s.newTransport()
	defer s.transport.CloseIdleConnections()
	go func() {
		<-ctx.Done()
		_ = l.Close()
		s.closeAll()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("egressproxy: accept: %w", err)
		}
		if s.clients.Load() >= int64(clientsPerConn*pol.MaxConns) {
			_ = c.Close()
			continue
		}
		if !s.track(c) {
			_ = c.Close()
			return nil
		}
		s.clients.Add(1)
		wg.Go(func() {
			defer s.clients.Add(-1)
			defer s.untrack(c)
			s.handle(ctx, c)
		})
	}
}

// session is one sandbox's proxy.
type session struct {
	p         *Proxy
	pol       *Policy
	transport interface{ CloseIdleConnections() }
	rt        roundTripper

	// upstreams holds a token per connection open to the outside.
	upstreams chan struct{}
	// clients counts the connections from the sandbox being served.
	clients atomic.Int64
	// budget is what is left of MaxBytes.
	budget atomic.Int64

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	granted map[string]bool // host:port that Ask allowed
	closed  bool
}

func (s *session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *session) untrack(c net.Conn) {
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *session) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
}

// handle serves one client connection.
func (s *session) handle(ctx context.Context, c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.p.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(c, 16<<10)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		s.socks(ctx, c, br)
		return
	}
	s.http(ctx, c, br)
}

// connect decides on and dials one connection of the sandbox, with a span
// and metrics; done reports its bytes when it ends, and why it failed
// when something the proxy requires of it after the dial did not hold
// (its TLS not verified). Every connection, allowed or not, ends as one
// Record.
func (s *session) connect(ctx context.Context, kind, host string, port int) (net.Conn, func(sent, received int64, err error), error) {
	start := time.Now()
	ctx, span := tracer.Start(ctx, "executor.egress")
	span.SetAttributes(attribute.String("conch.egress.kind", kind), attribute.String("conch.egress.host", host),
		attribute.Int("conch.egress.port", port), attribute.String("conch.gateway", s.pol.Gateway))
	rec := Record{Host: host, Port: port, Start: start}
	up, addr, err := s.open(ctx, host, port)
	if err != nil {
		var r *Refused
		var l *Limited
		switch {
		case errors.As(err, &r):
			rec.Decision = "refused"
		case errors.As(err, &l):
			rec.Decision = "limited"
		default:
			rec.Decision = "failed"
		}
		rec.Reason, rec.Duration = err.Error(), time.Since(start)
		span.SetAttributes(attribute.String("conch.egress.decision", rec.Decision))
		span.SetStatus(codes.Error, err.Error())
		span.End()
		connections.Add(ctx, 1, metric.WithAttributes(attribute.String("decision", rec.Decision)))
		s.p.cfg.Log.InfoContext(ctx, "egress not connected", "gateway", s.pol.Gateway, "host", egress.Clip(host, egress.MaxHostReported),
			"port", port, "decision", rec.Decision, "err", egress.Clip(err.Error(), egress.MaxReasonReported))
		s.record(rec)
		return nil, nil, err
	}
	rec.Decision, rec.Address = "allowed", addr.String()
	if s.pol.OnOpen != nil {
		s.pol.OnOpen()
	}
	span.SetAttributes(attribute.String("conch.egress.decision", "allowed"), attribute.String("conch.egress.address", rec.Address))
	connections.Add(ctx, 1, metric.WithAttributes(attribute.String("decision", "allowed")))
	var once sync.Once
	return up, func(sent, received int64, err error) {
		once.Do(func() {
			<-s.upstreams
			rec.BytesSent, rec.BytesReceived, rec.Duration = sent, received, time.Since(start)
			if err != nil {
				rec.Decision, rec.Reason = "failed", err.Error()
				span.SetAttributes(attribute.String("conch.egress.decision", rec.Decision))
				span.SetStatus(codes.Error, err.Error())
			}
			egressBytes.Add(ctx, sent, metric.WithAttributes(attribute.String("direction", "sent")))
			egressBytes.Add(ctx, received, metric.WithAttributes(attribute.String("direction", "received")))
			span.SetAttributes(attribute.Int64("conch.egress.bytes_sent", sent), attribute.Int64("conch.egress.bytes_received", received),
				attribute.Int64("conch.egress.duration_ms", rec.Duration.Milliseconds()))
			span.End()
			s.record(rec)
		})
	}, nil
}

// open checks the policy and the limits and dials; on success the
// connection holds one of the session's upstream tokens.
func (s *session) open(ctx context.Context, host string, port int) (net.Conn, netip.Addr, error) {
	if err := s.check(ctx, host, port); err != nil {
		return nil, netip.Addr{}, err
	}
	select {
	case s.upstreams <- struct{}{}:
	default:
		return nil, netip.Addr{}, &Limited{Why: fmt.Sprintf("this sandbox has %d connections open, the most %s allows", s.pol.MaxConns, by(s.pol.Gateway))}
	}
	if s.budget.Load() <= 0 {
		<-s.upstreams
		return nil, netip.Addr{}, &Limited{Why: fmt.Sprintf("this sandbox has sent and received %d bytes, the most %s allows", s.pol.MaxBytes, by(s.pol.Gateway))}
	}
	if sh := s.pol.Shared; sh != nil && sh.Left() <= 0 {
		<-s.upstreams
		return nil, netip.Addr{}, &Limited{Why: sh.Why()}
	}
	up, addr, err := s.p.dial(ctx, s.pol, host, port)
	if err != nil {
		<-s.upstreams
		return nil, netip.Addr{}, err
	}
	return up, addr, nil
}

// refuse records a request refused before any connection was made for
// it.
func (s *session) refuse(ctx context.Context, host string, port int, err error) {
	connections.Add(ctx, 1, metric.WithAttributes(attribute.String("decision", "refused")))
	s.p.cfg.Log.InfoContext(ctx, "egress not connected", "gateway", s.pol.Gateway, "host", egress.Clip(host, egress.MaxHostReported),
		"port", port, "decision", "refused", "err", egress.Clip(err.Error(), egress.MaxReasonReported))
	s.record(Record{Host: host, Port: port, Decision: "refused", Reason: err.Error(), Start: time.Now()})
}

// record reports r, its host and reason cut to what a report keeps: a
// host the sandbox wrote may be any length.
func (s *session) record(r Record) {
	r.Host, r.Reason = egress.Clip(r.Host, egress.MaxHostReported), egress.Clip(r.Reason, egress.MaxReasonReported)
	if s.pol.OnConnection != nil {
		s.pol.OnConnection(r)
	}
}

// Record is one connection a sandbox asked for, as it ended.
type Record struct {
	// Host is as the client asked for it, cut to
	// egress.MaxHostReported bytes.
	Host string
	Port int
	// Address is what the proxy connected to; empty when it did not.
	Address string
	// Decision is allowed, refused, failed or limited; Reason says why
	// for all but allowed (cut to egress.MaxReasonReported bytes). A
	// connection made and then given up, as one to a secret's host whose
	// TLS is not verified, is failed with an Address.
	Decision, Reason string
	// BytesSent from the sandbox and BytesReceived by it.
	BytesSent, BytesReceived int64
	Start                    time.Time
	Duration                 time.Duration
}

// Limited is a connection refused because its sandbox is at a limit.
type Limited struct{ Why string }

func (l *Limited) Error() string { return "conch: egress refused: " + l.Why }

func by(gateway string) string {
	if gateway == "" {
		return "this sandbox's network policy"
	}
	return "gateway " + gateway
}

// tunnel copies both ways between the client (with what br holds of it
// already) and up until both directions end or the sandbox's byte budget
// is spent.
func (s *session) tunnel(c net.Conn, br *bufio.Reader, up net.Conn) (sent, received int64) {
	_ = c.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		received, err = s.copyBudget(c, up)
		if errors.Is(err, errBudget) {
			_ = c.Close()
			_ = up.Close()
			return
		}
		closeWrite(c)
	}()
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		w, _ := up.Write(b)
		s.spend(int64(w))
		sent += int64(w)
	}
	n, err := s.copyBudget(up, c)
	sent += n
	if errors.Is(err, errBudget) {
		_ = c.Close()
		_ = up.Close()
	} else {
		closeWrite(up)
	}
	<-done
	return sent, received
}

// budgetChunk is the most copied between two looks at the budget; the
// copy of a chunk keeps the kernel's splice between sockets.
const budgetChunk = 1 << 20

// copyBudget copies src to dst until src ends, taking what it copies from
// the sandbox's budget; errBudget when the budget is spent first.
func (s *session) copyBudget(dst, src net.Conn) (int64, error) {
	var total int64
	for {
		chunk := min(s.left(), budgetChunk)
		if chunk <= 0 {
			return total, errBudget
		}
		n, err := io.Copy(dst, &io.LimitedReader{R: src, N: chunk})
		s.spend(n)
		total += n
		if err != nil || n < chunk {
			return total, err
		}
	}
}

// left is what the sandbox may still move: what is left of its own
// budget and of the one it shares.
func (s *session) left() int64 {
	n := s.budget.Load()
	if sh := s.pol.Shared; sh != nil {
		n = min(n, sh.Left())
	}
	return n
}

// spend takes n bytes moved from the sandbox's budgets.
func (s *session) spend(n int64) {
	s.budget.Add(-n)
	if sh := s.pol.Shared; sh != nil {
		sh.Spend(n)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// countedConn counts a pooled upstream connection's bytes and ends its
// span when the transport closes it.
type countedConn struct {
	net.Conn
	s              *session
	sent, received atomic.Int64
	once           sync.Once
	done           func(sent, received int64, err error)
	failed         atomic.Pointer[error]
	// io is held shared by each Read and Write until it has counted
	// its bytes, and by Close alone before it reports them: the
	// transport's read loop may close the connection on the answer
	// before its write loop has counted the request it wrote.
	io sync.RWMutex
}

func (s *session) counted(c net.Conn, done func(sent, received int64, err error)) *countedConn {
	s.track(c)
	return &countedConn{Conn: c, s: s, done: done}
}

// fail makes err the connection's end, recorded when it is closed.
func (c *countedConn) fail(err error) { c.failed.Store(&err) }

func (c *countedConn) Read(b []byte) (int, error) {
	c.io.RLock()
	defer c.io.RUnlock()
	if c.s.left() <= 0 {
		return 0, errBudget
	}
	n, err := c.Conn.Read(b)
	c.received.Add(int64(n))
	c.s.spend(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.io.RLock()
	defer c.io.RUnlock()
	if c.s.left() <= 0 {
		return 0, errBudget
	}
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	c.s.spend(int64(n))
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	// A Read or Write still under way returns now the connection is
	// closed; its bytes are counted before they are reported.
	c.io.Lock()
	defer c.io.Unlock()
	c.once.Do(func() {
		c.s.untrack(c.Conn)
		var failed error
		if p := c.failed.Load(); p != nil {
			failed = *p
		}
		c.done(c.sent.Load(), c.received.Load(), failed)
	})
	return err
}
