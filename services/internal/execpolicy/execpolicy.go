package execpolicy

import (
	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// Words of the settings as users and models write them.
var (
	// Hosts are the host words.
	Hosts = map[string]approvalv1.Host{"sandbox": approvalv1.Host_HOST_SANDBOX, "gateway": approvalv1.Host_HOST_GATEWAY, "node": approvalv1.Host_HOST_NODE}
	// Securities are the security words.
	Securities = map[string]approvalv1.Security{"deny": approvalv1.Security_SECURITY_DENY, "allowlist": approvalv1.Security_SECURITY_ALLOWLIST, "full": approvalv1.Security_SECURITY_FULL}
	// Asks are the ask words.
	Asks = map[string]approvalv1.Ask{"off": approvalv1.Ask_ASK_OFF, "on-miss": approvalv1.Ask_ASK_ON_MISS, "always": approvalv1.Ask_ASK_ALWAYS}
	// Decisions are a human's answers to an approval, on every surface.
	Decisions = map[string]approvalv1.ApprovalDecision{
		"allow-once":    approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE,
		"allow-session": approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION,
		"allow-always":  approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS,
		"deny":          approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY,
	}
)

// DecisionWords lists the decisions for usage texts, mildest first.
const DecisionWords = "allow-once|allow-session|allow-always|deny"

// DefaultApprovalSessionTTLSeconds is how long an allow-session answer
// holds when the exec settings say 0.
const DefaultApprovalSessionTTLSeconds = 3600

// Word returns the word of a setting value in words, or "default" for a
// value that has none (unset).
func Word[K comparable](words map[string]K, v K) string {
	for w, k := range words {
		if k == v {
			return w
		}
	}
	return "default"
}

// knownSecurity maps a value this package does not know to deny: a
// setting nobody can read must not run anything.
func knownSecurity(s approvalv1.Security) approvalv1.Security {
	switch s {
	case approvalv1.Security_SECURITY_UNSPECIFIED, approvalv1.Security_SECURITY_DENY,
		approvalv1.Security_SECURITY_ALLOWLIST, approvalv1.Security_SECURITY_FULL:
		return s
	}
	return approvalv1.Security_SECURITY_DENY
}

// knownAsk maps a value this package does not know to always, for the
// same reason.
func knownAsk(a approvalv1.Ask) approvalv1.Ask {
	switch a {
	case approvalv1.Ask_ASK_UNSPECIFIED, approvalv1.Ask_ASK_OFF, approvalv1.Ask_ASK_ON_MISS, approvalv1.Ask_ASK_ALWAYS:
		return a
	}
	return approvalv1.Ask_ASK_ALWAYS
}

// securityRank orders known security modes, higher being stricter; the
// enum's own numbers run the other way and must not be compared.
func securityRank(s approvalv1.Security) int {
	switch s {
	case approvalv1.Security_SECURITY_FULL:
		return 1
	case approvalv1.Security_SECURITY_ALLOWLIST:
		return 2
	case approvalv1.Security_SECURITY_DENY:
		return 3
	}
	return 0
}

// askRank orders known ask modes, higher asking more.
func askRank(a approvalv1.Ask) int {
	switch a {
	case approvalv1.Ask_ASK_OFF:
		return 1
	case approvalv1.Ask_ASK_ON_MISS:
		return 2
	case approvalv1.Ask_ASK_ALWAYS:
		return 3
	}
	return 0
}

// StricterSecurity returns the stricter of two security modes; an unset one
// defers to the other, and one this package does not know counts as deny.
func StricterSecurity(a, b approvalv1.Security) approvalv1.Security {
	a, b = knownSecurity(a), knownSecurity(b)
	if securityRank(b) > securityRank(a) {
		return b
	}
	return a
}

// StricterAsk returns the ask mode that asks more; an unset one defers to
// the other, and one this package does not know counts as always.
func StricterAsk(a, b approvalv1.Ask) approvalv1.Ask {
	a, b = knownAsk(a), knownAsk(b)
	if askRank(b) > askRank(a) {
		return b
	}
	return a
}

// sandbox reports whether h is the sandbox, the host an unspecified one
// means.
func sandbox(h approvalv1.Host) bool {
	return h == approvalv1.Host_HOST_SANDBOX || h == approvalv1.Host_HOST_UNSPECIFIED
}

// DefaultApprovalTimeoutSeconds is how long a human has to answer when the
// exec settings say 0 (docs/explanation/exec-policy.md).
const DefaultApprovalTimeoutSeconds = 120

// Defaults returns the settings of host h when no layer sets them: the
// sandbox's isolation protects it, so it runs anything without asking;
// every other host runs only what the allowlist allows and asks a human
// otherwise. No human answering means deny on every host. An unspecified
// host is the sandbox.
func Defaults(h approvalv1.Host) *approvalv1.ExecSettings {
	if sandbox(h) {
		return &approvalv1.ExecSettings{
			Host: approvalv1.Host_HOST_SANDBOX, Security: approvalv1.Security_SECURITY_FULL,
			Ask: approvalv1.Ask_ASK_OFF, AskFallback: approvalv1.Security_SECURITY_DENY,
		}
	}
	return &approvalv1.ExecSettings{
		Host: h, Security: approvalv1.Security_SECURITY_ALLOWLIST,
		Ask: approvalv1.Ask_ASK_ON_MISS, AskFallback: approvalv1.Security_SECURITY_DENY,
	}
}

// Stricter combines layers field by field (security, ask, ask fallback),
// the stricter value winning and an unset field deferring to the other
// layers; a nil layer sets nothing. The other fields of the result are
// empty.
func Stricter(layers ...*approvalv1.ExecSettings) *approvalv1.ExecSettings {
	out := &approvalv1.ExecSettings{}
	for _, l := range layers {
		out.Security = StricterSecurity(out.Security, l.GetSecurity())
		out.Ask = StricterAsk(out.Ask, l.GetAsk())
		out.AskFallback = StricterSecurity(out.AskFallback, l.GetAskFallback())
	}
	return out
}

// Effective returns the host, security, ask and ask fallback a command on
// host runs under. exec are the gateway's exec settings and the layers that
// tightened them (stricter wins among them); doc is the exec-approvals
// document's settings for the command's agent. For the sandbox the exec
// layers alone choose; for other hosts the document counts as one more
// layer. What stays unset takes the host's default, and the fallback is
// capped at the security mode: a human not answering never allows more
// than the mode itself would.
func Effective(host approvalv1.Host, doc *approvalv1.ExecSettings, exec ...*approvalv1.ExecSettings) *approvalv1.ExecSettings {
	s := Stricter(exec...)
	if !sandbox(host) {
		s = Stricter(s, doc)
	}
	d := Defaults(host)
	s.Host = d.Host
	if s.Security == approvalv1.Security_SECURITY_UNSPECIFIED {
		s.Security = d.Security
	}
	if s.Ask == approvalv1.Ask_ASK_UNSPECIFIED {
		s.Ask = d.Ask
	}
	if s.AskFallback == approvalv1.Security_SECURITY_UNSPECIFIED {
		s.AskFallback = d.AskFallback
	}
	s.AskFallback = StricterSecurity(s.AskFallback, s.Security)
	return s
}

// Needed reports whether a command on host under the settings s must be
// put to the approval service at all. Only the sandbox under security full
// without asking (its defaults) and without deny rules runs unchecked: on
// other hosts the exec-approvals document may be stricter than the
// settings the caller holds, and only the approval service reads it.
func Needed(host approvalv1.Host, s *approvalv1.ExecSettings) bool {
	if !sandbox(host) || len(s.GetDeny()) > 0 {
		return true
	}
	e := Effective(host, nil, s)
	return e.GetSecurity() != approvalv1.Security_SECURITY_FULL || e.GetAsk() != approvalv1.Ask_ASK_OFF
}
