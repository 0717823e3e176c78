package placement

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/conch-sh/conch/services/internal/platform/discovery"
)

// Dialer opens a connection to the one executor at addr (see
// discovery.DialAddr). It must not install the placement interceptors.
type Dialer func(addr string) (*grpc.ClientConn, error)

// directIdle is how long a direct connection outlives its last use.
const directIdle = time.Minute

// direct holds connections to executors that are out of discovery's
// balancing but may still serve what they hold: an executor leaves
// discovery, and reports NOT_SERVING, when its drain begins, then serves
// the sandboxes it holds until its drain delay ends.
type direct struct {
	dial Dialer

	mu    sync.Mutex
	conns map[string]*directConn
}

type directConn struct {
	cc   *grpc.ClientConn
	used time.Time
}

// conn returns the connection to addr, opening it if need be, and closes
// those unused for directIdle.
func (d *direct) conn(addr string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dial == nil {
		return nil, errNoDirect
	}
	now := time.Now()
	for a, c := range d.conns {
		if a != addr && now.Sub(c.used) > directIdle {
			_ = c.cc.Close()
			delete(d.conns, a)
		}
	}
	if c, ok := d.conns[addr]; ok {
		c.used = now
		return c.cc, nil
	}
	cc, err := d.dial(addr)
	if err != nil {
		return nil, err
	}
	if d.conns == nil {
		d.conns = map[string]*directConn{}
	}
	d.conns[addr] = &directConn{cc: cc, used: now}
	return cc, nil
}

var errNoDirect = errors.New("placement: no direct connections")

// closeAll closes every connection, and opens no more, once ctx ends.
func (d *direct) closeAll(ctx context.Context) {
	<-ctx.Done()
	d.mu.Lock()
	defer d.mu.Unlock()
	for a, c := range d.conns {
		_ = c.cc.Close()
		delete(d.conns, a)
	}
	d.dial = nil
}

// fallback returns the connection to retry a call on: one pinned in ctx
// that failed with err unsent because its executor is out of balancing.
// It returns nil when err stands.
func (d *direct) fallback(ctx context.Context, err error) *grpc.ClientConn {
	addr := discovery.Pinned(ctx)
	if addr == "" || !discovery.Unreachable(err) {
		return nil
	}
	cc, derr := d.conn(addr)
	if derr != nil {
		return nil
	}
	return cc
}
