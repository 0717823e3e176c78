package executor

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Exposed ports' bounds (docs/reference/sandboxes.md#ports).
const (
	MaxPorts             = 16
	DefaultPublicPortTTL = time.Hour
	MaxPortTTL           = 24 * time.Hour
)

// exposedPort is a port of a sandbox's loopback reachable through
// ConnectPort, and its open connections, which closing it ends.
type exposedPort struct {
	public  bool
	expires time.Time // zero: with the sandbox
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
}

func (p *exposedPort) pb(port int32) *executorv1.Port {
	out := &executorv1.Port{Port: port, Public: p.public}
	if !p.expires.IsZero() {
		out.ExpiresAt = timestamppb.New(p.expires)
	}
	return out
}

// live reports whether the port has not expired at now.
func (p *exposedPort) live(now time.Time) bool {
	return p.expires.IsZero() || now.Before(p.expires)
}

// close ends the port's connections; no new one is let in.
func (p *exposedPort) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// ExposePort exposes port of account's sandbox id, or changes how.
func (s *Service) ExposePort(ctx context.Context, account, id string, port int32, public bool, ttlSeconds int32) (*executorv1.Port, error) {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, errs.Invalid("port", "must be 1-65535, got %d", port)
	}
	if ttlSeconds < 0 || time.Duration(ttlSeconds)*time.Second > MaxPortTTL {
		return nil, errs.Invalid("expires_in_seconds", "must be 0-%d, got %d", int(MaxPortTTL/time.Second), ttlSeconds)
	}
	ttl := time.Duration(ttlSeconds) * time.Second
	if ttl == 0 && public {
		// A public URL is a credential: it always ends.
		ttl = DefaultPublicPortTTL
	}
	p := &exposedPort{public: public, conns: map[net.Conn]struct{}{}}
	if ttl > 0 {
		p.expires = time.Now().Add(ttl).Truncate(time.Second)
	}
	e.mu.Lock()
	if e.ports == nil {
		e.ports = map[int32]*exposedPort{}
	}
	old := e.ports[port]
	if old == nil && len(e.ports) >= MaxPorts {
		e.mu.Unlock()
		return nil, errs.New(errs.ResourceExhausted, "a sandbox exposes at most %d ports", MaxPorts)
	}
	e.ports[port] = p
	e.mu.Unlock()
	if old != nil {
		// Its connections were let in on the settings it had.
		old.close()
	}
	s.log.Info("port exposed", "sandbox", id, "port", port, "public", public)
	return p.pb(port), nil
}

// ListPorts lists account's sandbox id's exposed ports, by number.
func (s *Service) ListPorts(ctx context.Context, account, id string) ([]*executorv1.Port, error) {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*executorv1.Port
	for n, p := range e.ports {
		if p.live(now) {
			out = append(out, p.pb(n))
		}
	}
	slices.SortFunc(out, func(a, b *executorv1.Port) int { return int(a.GetPort() - b.GetPort()) })
	return out, nil
}

// ClosePort closes an exposed port and ends its connections.
func (s *Service) ClosePort(ctx context.Context, account, id string, port int32) error {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	p := e.ports[port]
	delete(e.ports, port)
	e.mu.Unlock()
	if p == nil {
		return errs.New(errs.NotFound, "port %d of sandbox %s is not exposed", port, id)
	}
	p.close()
	return nil
}

// closePorts ends every exposed port of e, as it ends.
func (e *entry) closePorts() {
	e.mu.Lock()
	ports := e.ports
	e.ports = nil
	e.mu.Unlock()
	for _, p := range ports {
		p.close()
	}
}

// ConnectPort opens a connection to an exposed port of account's sandbox
// id: public says it was reached by a public URL, which only a public
// port takes. The connection is the port's until it or the port closes;
// release forgets it.
func (s *Service) ConnectPort(ctx context.Context, account, id string, port int32, public bool) (net.Conn, func(), error) {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	p := e.ports[port]
	e.mu.Unlock()
	if p == nil || (public && !p.public) || !p.live(time.Now()) {
		return nil, nil, errs.New(errs.NotFound, "port %d of sandbox %s is not exposed", port, id)
	}
	c, err := e.sb.DialPort(ctx, int(port))
	if err != nil {
		return nil, nil, errs.New(errs.Unavailable, "nothing answers on port %d of sandbox %s", port, id)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return nil, nil, errs.New(errs.NotFound, "port %d of sandbox %s is not exposed", port, id)
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	e.touch()
	return c, func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		_ = c.Close()
	}, nil
}
