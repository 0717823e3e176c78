package launch

import (
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/skills"
)

// EtcdUsers are the etcd users of the services, each limited to the key
// prefixes it owns (read and write) and those it only reads, for an etcd
// with its auth on: a service authenticates with a client certificate
// whose common name is its name. Every service registers itself under
// its own discovery prefix and reads the others'.
var EtcdUsers = map[string][]etcdx.Permission{
	"router": withDiscovery("router",
		rw("conch/accounts/"), rw("conch/account-keys/"), rw("conch/apikeys/"), rw("conch/gateways/"),
		rw("conch/nodes/"), rw("conch/stored-responses/"), rw("conch/sessions/"), rw("conch/toolgrants/"), rw("conch/kept-turns/"),
		rw(skills.KeyPrefix),
		rw(quotas.ClaimPrefix(quotas.StoredResponses)), rw(quotas.ClaimPrefix(quotas.MCPSessions)),
		// The election of the router that maintains etcd's space.
		rw(etcdx.DefaultSpaceElection+"/"),
		// Where sandboxes and nodes are, to place calls; what every
		// account holds, for its quotas.
		read("conch/executor/"), read("conch/claims/")),
	"executor": withDiscovery("executor",
		rw("conch/executor/"), rw(quotas.ClaimPrefix(quotas.Sandboxes)), rw(quotas.ClaimPrefix(quotas.EgressBytesPerDay)),
		// The grants of accounts (the gateway host), and whether an
		// exec-approvals document holds deny rules.
		read("conch/accounts/"), read(approval.KeyPrefix+"doc/")),
	"approval": withDiscovery("approval", rw(approval.KeyPrefix), rw(audit.DefaultEtcdPrefix),
		// Pending approvals count against their account's quota, which
		// the account's record may set.
		rw(quotas.ClaimPrefix(quotas.PendingApprovals)), read("conch/accounts/")),
	"workspace": withDiscovery("workspace", rw("/conch/workspace/")),
}

func rw(prefix string) etcdx.Permission   { return etcdx.Permission{Prefix: prefix, Write: true} }
func read(prefix string) etcdx.Permission { return etcdx.Permission{Prefix: prefix} }

func withDiscovery(service string, perms ...etcdx.Permission) []etcdx.Permission {
	return append(perms, rw(discovery.Target(service)+"/"), read(discovery.Prefix))
}
