package outbound

import "github.com/conch-sh/conch/services/internal/platform/config"

// Config is the operator's say over outbound connections, shared by the
// services that make them for tenants (the router and the approval
// service). A tenant has no such setting.
type Config struct {
	OutboundAllow []string `flag:"outbound-allow" env:"CONCH_OUTBOUND_ALLOW" usage:"CIDRs, addresses or host names (each with an optional :port) that tenants' upstreams, tools and forwarding may reach although they are loopback, private or otherwise internal, comma separated; etcd and MinIO stay refused"`
	OutboundDeny  []string `flag:"outbound-deny" env:"CONCH_OUTBOUND_DENY" usage:"CIDRs, addresses or host names (each with an optional :port) tenants' outbound connections never reach, before --outbound-allow: the cluster's service and pod ranges, MinIO; comma separated"`
}

// Validate checks the entries.
func (c *Config) Validate() error {
	if err := ValidateRules("outbound allow", c.OutboundAllow); err != nil {
		return config.Invalid("--outbound-allow", "%v", err)
	}
	if err := ValidateRules("outbound deny", c.OutboundDeny); err != nil {
		return config.Invalid("--outbound-deny", "%v", err)
	}
	return nil
}

// Guard returns the guard of these settings, refusing controlPlane
// (host:port of etcd and MinIO) whatever they allow. The settings must
// have been validated.
func (c *Config) Guard(controlPlane ...string) *Guard {
	return Must(Options{Allow: c.OutboundAllow, Deny: c.OutboundDeny, ControlPlane: controlPlane})
}
