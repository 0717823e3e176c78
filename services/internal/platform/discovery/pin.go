package discovery

import (
	"context"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	_ "google.golang.org/grpc/health" // client-side health checking

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Policy is the load-balancing policy of connections made by Dial: a call
// whose context is pinned (Pin) goes to that instance; any other call goes
// round-robin to the instances that are connected and report SERVING.
const Policy = "conch_pinned"

func init() { balancer.Register(pinBuilder{}) }

type pinKey struct{}

// Pin returns a context whose calls go to the instance registered at addr.
// While that instance is first connecting the call waits for it; if it is
// unknown, failing or draining the call fails at once with
// codes.Unavailable (Unreachable reports it) rather than going elsewhere.
func Pin(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, pinKey{}, addr)
}

// Pinned returns the address ctx is pinned to, or "".
func Pinned(ctx context.Context) string {
	addr, _ := ctx.Value(pinKey{}).(string)
	return addr
}

// pinBuilder builds the policy the way grpc's round_robin is built: one
// pick_first child per endpoint, with health checking; only the picker
// differs.
type pinBuilder struct{}

func (pinBuilder) Name() string { return Policy }

func (pinBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	child := balancer.Get(pickfirst.Name).Build
	return &pinBalancer{Balancer: endpointsharding.NewBalancer(pinClientConn{cc}, opts, child, endpointsharding.Options{})}
}

type pinBalancer struct{ balancer.Balancer }

func (b *pinBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	return b.Balancer.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
}

// pinClientConn wraps each round-robin picker in a pinPicker.
type pinClientConn struct{ balancer.ClientConn }

func (c pinClientConn) UpdateState(s balancer.State) {
	s.Picker = &pinPicker{rr: s.Picker, children: endpointsharding.ChildStatesFromPicker(s.Picker)}
	c.ClientConn.UpdateState(s)
}

type pinPicker struct {
	rr       balancer.Picker
	children []endpointsharding.ChildState
}

func (p *pinPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	addr := Pinned(info.Ctx)
	if addr == "" {
		return p.rr.Pick(info)
	}
	for _, c := range p.children {
		for _, a := range c.Endpoint.Addresses {
			if a.Addr != addr {
				continue
			}
			switch c.State.ConnectivityState {
			case connectivity.Ready:
				return c.State.Picker.Pick(info)
			case connectivity.Idle:
				c.ExitIdle()
				return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
			case connectivity.Connecting:
				return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
			}
			return balancer.PickResult{}, unreachable(addr)
		}
	}
	return balancer.PickResult{}, unreachable(addr)
}

// reasonUnreachable marks the error of a pinned call that was not sent.
const reasonUnreachable = "PINNED_INSTANCE_UNREACHABLE"

func unreachable(addr string) error {
	return errs.WithReason(codes.Unavailable, reasonUnreachable, "instance "+addr+" is not reachable", map[string]string{"addr": addr})
}

// Unreachable reports whether err is a pinned call's that was not sent:
// its instance has left discovery, does not report SERVING or is not
// connected.
func Unreachable(err error) bool { return errs.HasReason(err, codes.Unavailable, reasonUnreachable) }
