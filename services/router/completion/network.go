package completion

import (
	"fmt"
	"slices"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/egress"
)

// defaultPorts are the ports of a network that names none.
var defaultPorts = []int32{443, 80}

// shellNetwork is the network of the completion's sandbox: the gateway's,
// narrowed by the request's shell tool. A request may only narrow it; a
// domain or port the gateway does not allow is refused naming the field.
func shellNetwork(g *routerv1.Gateway, req *Request) (*executorv1.Network, error) {
	gw := g.GetShell().GetNetwork()
	if req.Shell == nil || req.Shell.Network == nil {
		return gw, nil
	}
	n, field := req.Shell.Network, req.ShellField+".network"
	if req.Container != "" {
		return nil, BadField(field, "a container keeps the network it was created with; leave network out")
	}
	allowlist := gw.GetMode() == executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST
	var wide []string
	for _, d := range gw.GetAllowedDomains() {
		if norm, err := egress.NormalizePattern(d); err == nil {
			wide = append(wide, norm)
		}
	}
	out := &executorv1.Network{Mode: gw.GetMode(), AllowedDomains: gw.GetAllowedDomains(), Ports: gw.GetPorts(),
		MaxConnections: gw.GetMaxConnections(), MaxBytes: gw.GetMaxBytes(), Ask: gw.GetAsk(), Secrets: gw.GetSecrets(),
		ApprovalTimeoutSeconds: gw.GetApprovalTimeoutSeconds()}
	if n.AllowedDomains != nil {
		out.AllowedDomains = nil
		for i, d := range n.AllowedDomains {
			f := fmt.Sprintf("%s.allowed_domains[%d]", field, i)
			norm, err := egress.NormalizePattern(d)
			if err != nil {
				return nil, BadField(f, "%v", err)
			}
			if !allowlist || !egress.Covers(wide, norm) {
				return nil, BadField(f, "%q is not within the allowed domains of gateway %q; a request may only narrow them", d, g.GetName())
			}
			out.AllowedDomains = append(out.AllowedDomains, norm)
		}
		if len(out.AllowedDomains) == 0 {
			return &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_NONE}, nil
		}
		// A secret keeps only the domains still allowed.
		out.Secrets = nil
		for _, sec := range gw.GetSecrets() {
			var domains []string
			for _, d := range sec.GetDomains() {
				if norm, err := egress.NormalizePattern(d); err == nil && egress.Covers(out.AllowedDomains, norm) {
					domains = append(domains, norm)
				}
			}
			if len(domains) > 0 {
				out.Secrets = append(out.Secrets, &executorv1.NetworkSecret{Env: sec.GetEnv(), Value: sec.GetValue(), Header: sec.GetHeader(), Domains: domains})
			}
		}
	}
	if n.Ports != nil {
		if len(n.Ports) == 0 {
			return nil, BadField(field+".ports", "must name at least one port; leave it out to keep the gateway's")
		}
		allowed := gw.GetPorts()
		if len(allowed) == 0 {
			allowed = defaultPorts
		}
		for i, p := range n.Ports {
			if !allowlist || !slices.Contains(allowed, p) {
				return nil, BadField(fmt.Sprintf("%s.ports[%d]", field, i), "port %d is not among the ports gateway %q allows; a request may only narrow them", p, g.GetName())
			}
		}
		out.Ports = n.Ports
	}
	return out, nil
}
