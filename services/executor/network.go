package executor

import (
	"cmp"
	"slices"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Network is a sandbox's egress policy (SPEC §4 network allowlist).
type Network struct {
	// Gateway names whose policy it is, in refusals.
	Gateway string
	// Domains are the allowlist's entries, as package egress reads them.
	Domains []string
	// Ports are the ports allowed; empty means egressproxy.DefaultPorts.
	Ports []int
	// MaxConns and MaxBytes bound the sandbox's egress; 0 means the
	// proxy's defaults.
	MaxConns int
	MaxBytes int64
	// Ask holds a connection the allowlist misses and asks a human.
	Ask bool
}

// networkFrom reads a request's network; nil means loopback only.
func networkFrom(n *executorv1.Network, gateway string) (*Network, error) {
	switch n.GetMode() {
	case executorv1.NetworkMode_NETWORK_MODE_UNSPECIFIED, executorv1.NetworkMode_NETWORK_MODE_NONE:
		if len(n.GetAllowedDomains()) > 0 || len(n.GetPorts()) > 0 {
			return nil, errs.New(errs.InvalidArgument, "network.allowed_domains: needs mode allowlist")
		}
		return nil, nil
	case executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST:
	default:
		return nil, errs.New(errs.InvalidArgument, "network.mode: must be none or allowlist")
	}
	net := &Network{Gateway: gateway}
	for i, d := range n.GetAllowedDomains() {
		norm, err := egress.NormalizePattern(d)
		if err != nil {
			return nil, errs.New(errs.InvalidArgument, "network.allowed_domains[%d]: %v", i, err)
		}
		net.Domains = append(net.Domains, norm)
	}
	if len(net.Domains) == 0 {
		return nil, errs.New(errs.InvalidArgument, "network.allowed_domains: at least one domain is required in allowlist mode")
	}
	for i, p := range n.GetPorts() {
		if p < 1 || p > 65535 {
			return nil, errs.New(errs.InvalidArgument, "network.ports[%d]: must be 1 to 65535, got %d", i, p)
		}
		if !slices.Contains(net.Ports, int(p)) {
			net.Ports = append(net.Ports, int(p))
		}
	}
	if n.GetMaxConnections() < 0 || n.GetMaxConnections() > 4096 {
		return nil, errs.New(errs.InvalidArgument, "network.max_connections: must be 0 (the default, %d) to 4096, got %d", egressproxy.DefaultMaxConns, n.GetMaxConnections())
	}
	if n.GetMaxBytes() < 0 {
		return nil, errs.New(errs.InvalidArgument, "network.max_bytes: must not be negative (0: the default, %d)", egressproxy.DefaultMaxBytes)
	}
	net.MaxConns, net.MaxBytes = int(n.GetMaxConnections()), n.GetMaxBytes()
	switch n.GetAsk() {
	case executorv1.NetworkAsk_NETWORK_ASK_UNSPECIFIED, executorv1.NetworkAsk_NETWORK_ASK_OFF:
	case executorv1.NetworkAsk_NETWORK_ASK_ON_MISS:
		if gateway == "" {
			return nil, errs.New(errs.InvalidArgument, "network.ask: on-miss needs the agent (gateway) whose approvals answer it")
		}
		net.Ask = true
	default:
		return nil, errs.New(errs.InvalidArgument, "network.ask: must be off or on-miss")
	}
	return net, nil
}

// policy is the proxy's form of n.
func (n *Network) policy() (*egressproxy.Policy, error) {
	allow, err := egress.NewAllowlist(n.Domains)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "network.allowed_domains%v", err)
	}
	return &egressproxy.Policy{Gateway: n.Gateway, Allow: allow, Ports: n.Ports, MaxConns: n.MaxConns, MaxBytes: n.MaxBytes}, nil
}

// pb is n as the API shows it.
func (n *Network) pb() *executorv1.Network {
	if n == nil {
		return &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_NONE}
	}
	ports := n.Ports
	if len(ports) == 0 {
		ports = egressproxy.DefaultPorts
	}
	out := &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: n.Domains,
		MaxConnections: int32(cmp.Or(n.MaxConns, egressproxy.DefaultMaxConns)), MaxBytes: cmp.Or(n.MaxBytes, egressproxy.DefaultMaxBytes)}
	if n.Ask {
		out.Ask = executorv1.NetworkAsk_NETWORK_ASK_ON_MISS
	}
	for _, p := range ports {
		out.Ports = append(out.Ports, int32(p))
	}
	return out
}
