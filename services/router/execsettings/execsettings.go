// Package execsettings layers the exec settings a command runs under: the
// per-host defaults of SPEC §7, the gateway's settings, a session's /exec
// overrides and a model's per-command request, where every layer after the
// gateway may only tighten.
package execsettings

import (
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// Words of the settings as users and models write them.
var (
	Hosts      = map[string]approvalv1.Host{"sandbox": approvalv1.Host_HOST_SANDBOX, "gateway": approvalv1.Host_HOST_GATEWAY, "node": approvalv1.Host_HOST_NODE}
	Securities = map[string]approvalv1.Security{"deny": approvalv1.Security_SECURITY_DENY, "allowlist": approvalv1.Security_SECURITY_ALLOWLIST, "full": approvalv1.Security_SECURITY_FULL}
	Asks       = map[string]approvalv1.Ask{"off": approvalv1.Ask_ASK_OFF, "on-miss": approvalv1.Ask_ASK_ON_MISS, "always": approvalv1.Ask_ASK_ALWAYS}
)

// Strictness: a higher rank is stricter.
var (
	securityRank = map[approvalv1.Security]int{approvalv1.Security_SECURITY_FULL: 0, approvalv1.Security_SECURITY_ALLOWLIST: 1, approvalv1.Security_SECURITY_DENY: 2}
	askRank      = map[approvalv1.Ask]int{approvalv1.Ask_ASK_OFF: 0, approvalv1.Ask_ASK_ON_MISS: 1, approvalv1.Ask_ASK_ALWAYS: 2}
)

// StricterSecurity reports whether a is stricter than b.
func StricterSecurity(a, b approvalv1.Security) bool { return securityRank[a] > securityRank[b] }

// StricterAsk reports whether a asks more than b.
func StricterAsk(a, b approvalv1.Ask) bool { return askRank[a] > askRank[b] }

// HostDefaults are the per-host defaults of SPEC §7: the sandbox isolates,
// so it runs anything without asking; gateway and node hosts run the
// allowlist and ask on a miss.
func HostDefaults(h approvalv1.Host) (approvalv1.Security, approvalv1.Ask) {
	if h == approvalv1.Host_HOST_GATEWAY || h == approvalv1.Host_HOST_NODE {
		return approvalv1.Security_SECURITY_ALLOWLIST, approvalv1.Ask_ASK_ON_MISS
	}
	return approvalv1.Security_SECURITY_FULL, approvalv1.Ask_ASK_OFF
}

// Override is a tightening layer: words as written, empty meaning unset.
type Override struct {
	Host     string `json:"host,omitempty"`
	Security string `json:"security,omitempty"`
	Ask      string `json:"ask,omitempty"`
	Node     string `json:"node,omitempty"`
}

// Effective layers o over the gateway's settings g (nil: none) and fills in
// the host's defaults. Security and ask of o count only where stricter.
func Effective(g *approvalv1.ExecSettings, o Override) *approvalv1.ExecSettings {
	e := &approvalv1.ExecSettings{}
	if g != nil {
		e = proto.Clone(g).(*approvalv1.ExecSettings)
	}
	if e.Host == approvalv1.Host_HOST_UNSPECIFIED {
		e.Host = approvalv1.Host_HOST_SANDBOX
	}
	if h, ok := Hosts[o.Host]; ok {
		e.Host = h
	}
	if o.Node != "" {
		e.Node = o.Node
	}
	defSec, defAsk := HostDefaults(e.Host)
	if e.Security == approvalv1.Security_SECURITY_UNSPECIFIED {
		e.Security = defSec
	}
	if e.Ask == approvalv1.Ask_ASK_UNSPECIFIED {
		e.Ask = defAsk
	}
	if s, ok := Securities[o.Security]; ok && StricterSecurity(s, e.Security) {
		e.Security = s
	}
	if a, ok := Asks[o.Ask]; ok && StricterAsk(a, e.Ask) {
		e.Ask = a
	}
	return e
}

// Word returns the word of a setting value, or "default" for an unset one.
func Word[K comparable](words map[string]K, v K) string {
	for w, k := range words {
		if k == v {
			return w
		}
	}
	return "default"
}
