package executor

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Network is a sandbox's egress policy (docs/reference/sandboxes.md, Network).
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
	// Ask holds a connection the allowlist misses and asks a human, for
	// up to ApprovalTimeout (0: the approval service's default).
	Ask             bool
	ApprovalTimeout int32
	// Secrets are bound to some of Domains.
	Secrets []NetworkSecret
}

// NetworkSecret is a secret the sandbox uses through its placeholder.
type NetworkSecret struct {
	Env, Value, Header string
	Domains            []string
}

var (
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	headerName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
)

// maxSecretBytes bounds a secret's value.
const maxSecretBytes = 16 << 10

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
	for i, sec := range n.GetSecrets() {
		f := fmt.Sprintf("network.secrets[%d]", i)
		switch {
		case !envName.MatchString(sec.GetEnv()):
			return nil, errs.New(errs.InvalidArgument, "%s.env: must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", f)
		case sec.GetValue() == "" || len(sec.GetValue()) > maxSecretBytes || strings.ContainsAny(sec.GetValue(), "\r\n\x00"):
			return nil, errs.New(errs.InvalidArgument, "%s.value: must be 1 to %d bytes without line breaks or NUL", f, maxSecretBytes)
		case sec.GetHeader() != "" && !headerName.MatchString(sec.GetHeader()):
			return nil, errs.New(errs.InvalidArgument, "%s.header: not a header name", f)
		case len(sec.GetDomains()) == 0:
			return nil, errs.New(errs.InvalidArgument, "%s.domains: at least one domain is required", f)
		}
		out := NetworkSecret{Env: sec.GetEnv(), Value: sec.GetValue(), Header: sec.GetHeader()}
		for j, d := range sec.GetDomains() {
			norm, err := egress.NormalizePattern(d)
			if err != nil {
				return nil, errs.New(errs.InvalidArgument, "%s.domains[%d]: %v", f, j, err)
			}
			if !egress.Covers(net.Domains, norm) {
				return nil, errs.New(errs.InvalidArgument, "%s.domains[%d]: %q is not within allowed_domains", f, j, d)
			}
			out.Domains = append(out.Domains, norm)
		}
		net.Secrets = append(net.Secrets, out)
	}
	net.MaxConns, net.MaxBytes = int(n.GetMaxConnections()), n.GetMaxBytes()
	switch n.GetAsk() {
	case executorv1.NetworkAsk_NETWORK_ASK_UNSPECIFIED, executorv1.NetworkAsk_NETWORK_ASK_OFF:
	case executorv1.NetworkAsk_NETWORK_ASK_ON_MISS:
		if gateway == "" {
			return nil, errs.New(errs.InvalidArgument, "network.ask: on-miss needs the agent (gateway) whose approvals answer it")
		}
		net.Ask = true
		if t := n.GetApprovalTimeoutSeconds(); t < 0 || t > 3600 {
			return nil, errs.New(errs.InvalidArgument, "network.approval_timeout_seconds: must be 0 (the default) to 3600, got %d", t)
		}
		net.ApprovalTimeout = n.GetApprovalTimeoutSeconds()
	default:
		return nil, errs.New(errs.InvalidArgument, "network.ask: must be off or on-miss")
	}
	return net, nil
}

// policy is the proxy's form of n, with what the sandbox gets for its
// secrets: the placeholders' environment and the CA to trust.
func (n *Network) policy() (*egressproxy.Policy, map[string]string, error) {
	allow, err := egress.NewAllowlist(n.Domains)
	if err != nil {
		return nil, nil, errs.New(errs.InvalidArgument, "network.allowed_domains%v", err)
	}
	pol := &egressproxy.Policy{Gateway: n.Gateway, Allow: allow, Ports: n.Ports, MaxConns: n.MaxConns, MaxBytes: n.MaxBytes}
	if len(n.Secrets) == 0 {
		return pol, nil, nil
	}
	if pol.CA, err = egressproxy.NewCA(); err != nil {
		return nil, nil, err
	}
	env := map[string]string{}
	for i, sec := range n.Secrets {
		bound, err := egress.NewAllowlist(sec.Domains)
		if err != nil {
			return nil, nil, errs.New(errs.InvalidArgument, "network.secrets[%d].domains%v", i, err)
		}
		p := egressproxy.NewPlaceholder()
		pol.Secrets = append(pol.Secrets, egressproxy.Secret{Placeholder: p, Value: sec.Value, Allow: bound, Header: sec.Header})
		env[sec.Env] = p
	}
	return pol, env, nil
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
		out.Ask, out.ApprovalTimeoutSeconds = executorv1.NetworkAsk_NETWORK_ASK_ON_MISS, n.ApprovalTimeout
	}
	for _, sec := range n.Secrets {
		out.Secrets = append(out.Secrets, &executorv1.NetworkSecret{Env: sec.Env, ValueSet: true, Domains: sec.Domains, Header: sec.Header})
	}
	for _, p := range ports {
		out.Ports = append(out.Ports, int32(p))
	}
	return out
}
