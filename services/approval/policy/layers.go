package policy

// HostDefaults are the settings of a host when no layer sets them (SPEC §7):
// the sandbox's isolation protects it, so it runs anything; the gateway's
// executor hosts and paired nodes run only what the allowlist allows and ask
// a human otherwise.
func HostDefaults(h Host) Settings {
	if h == HostSandbox {
		return Settings{Security: SecurityFull, Ask: AskOff, AskFallback: SecurityDeny}
	}
	return Settings{Security: SecurityAllowlist, Ask: AskOnMiss, AskFallback: SecurityDeny}
}

// stricterSecurity returns the stricter of two modes; unset defers.
func stricterSecurity(a, b Security) Security {
	switch {
	case a == SecurityUnset:
		return b
	case b == SecurityUnset:
		return a
	case a < b:
		return a
	}
	return b
}

// stricterAsk returns the stricter (more asking) of two modes; unset defers.
func stricterAsk(a, b Ask) Ask {
	switch {
	case a == AskUnset:
		return b
	case b == AskUnset:
		return a
	case a > b:
		return a
	}
	return b
}

// Stricter combines layers field by field, the stricter value winning and
// unset fields deferring to the other layers.
func Stricter(layers ...Settings) Settings {
	var out Settings
	for _, l := range layers {
		out.Security = stricterSecurity(out.Security, l.Security)
		out.Ask = stricterAsk(out.Ask, l.Ask)
		out.AskFallback = stricterSecurity(out.AskFallback, l.AskFallback)
	}
	return out
}

// Effective returns the settings a command runs under. exec holds the
// gateway's exec settings and any session override (stricter wins among
// them); doc holds the exec-approvals document's agent entry over its
// defaults. For host sandbox the gateway's settings alone choose, for hosts
// gateway and node the stricter of both; whatever stays unset takes the
// host's default. A fallback never exceeds the mode itself: a fallback of
// full under allowlist security means allowlist.
func Effective(h Host, doc Settings, exec ...Settings) Settings {
	s := Stricter(exec...)
	if h != HostSandbox {
		s = Stricter(s, doc)
	}
	d := HostDefaults(h)
	if s.Security == SecurityUnset {
		s.Security = d.Security
	}
	if s.Ask == AskUnset {
		s.Ask = d.Ask
	}
	if s.AskFallback == SecurityUnset {
		s.AskFallback = d.AskFallback
	}
	s.AskFallback = stricterSecurity(s.AskFallback, s.Security)
	return s
}

// DocumentSettings layers an agent's settings over the document's defaults:
// the agent's own value wins where set.
func DocumentSettings(defaults, agent Settings) Settings {
	out := defaults
	if agent.Security != SecurityUnset {
		out.Security = agent.Security
	}
	if agent.Ask != AskUnset {
		out.Ask = agent.Ask
	}
	if agent.AskFallback != SecurityUnset {
		out.AskFallback = agent.AskFallback
	}
	return out
}
