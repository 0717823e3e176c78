package policy

import (
	"fmt"
	"strings"
)

// The error strings callers see (docs/explanation/exec-policy.md). Tests and
// clients compare them verbatim, so they never change.
const (
	// ErrNotAllowed is the refusal of a command the policy does not allow.
	ErrNotAllowed = "Command not allowed by exec policy"
	// ErrTimeout is the refusal when no human answered in time and the
	// fallback did not allow the command.
	ErrTimeout = "Approval timeout"
	// ErrUnsupportedToken prefixes the refusal of a shell construct the
	// engine cannot judge; the token follows.
	ErrUnsupportedToken = "Unsupported shell token: "
	// ErrPatternNotBinary refuses an allowlist pattern that is not a path.
	ErrPatternNotBinary = "Pattern does not resolve to binary"
	// ErrNodeNotFound is the refusal of an unknown node.
	ErrNodeNotFound = "Node not found"
)

// Security is what may run at all.
type Security int8

// Security modes, ordered from strictest to loosest after SecurityUnset.
const (
	SecurityUnset Security = iota
	SecurityDeny
	SecurityAllowlist
	SecurityFull
)

var securityNames = [...]string{"", "deny", "allowlist", "full"}

// String returns the mode's word, empty when unset.
func (s Security) String() string {
	if s < 0 || int(s) >= len(securityNames) {
		return fmt.Sprintf("security(%d)", int(s))
	}
	return securityNames[s]
}

// ParseSecurity reads a mode word; the empty string is SecurityUnset.
func ParseSecurity(s string) (Security, error) {
	for i, n := range securityNames {
		if strings.EqualFold(s, n) {
			return Security(i), nil
		}
	}
	return SecurityUnset, fmt.Errorf("security %q: want deny, allowlist or full", s)
}

// Ask is when a human is asked.
type Ask int8

// Ask modes, ordered from loosest to strictest after AskUnset.
const (
	AskUnset Ask = iota
	AskOff
	AskOnMiss
	AskAlways
)

var askNames = [...]string{"", "off", "on-miss", "always"}

// String returns the mode's word, empty when unset.
func (a Ask) String() string {
	if a < 0 || int(a) >= len(askNames) {
		return fmt.Sprintf("ask(%d)", int(a))
	}
	return askNames[a]
}

// ParseAsk reads an ask word; the empty string is AskUnset.
func ParseAsk(s string) (Ask, error) {
	for i, n := range askNames {
		if strings.EqualFold(s, n) {
			return Ask(i), nil
		}
	}
	return AskUnset, fmt.Errorf("ask %q: want off, on-miss or always", s)
}

// Decision is the verdict on a command or a segment.
type Decision int8

// Decisions. The zero value is invalid so that a forgotten verdict never
// reads as "allow".
const (
	DecisionUnset Decision = iota
	Allow
	AskHuman
	Deny
)

// String returns "allow", "ask" or "deny".
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case AskHuman:
		return "ask"
	case Deny:
		return "deny"
	}
	return "unset"
}

// Host is where a command runs.
type Host int8

// Hosts.
const (
	HostSandbox Host = iota
	HostGateway
	HostNode
)

// String returns the host's word.
func (h Host) String() string {
	switch h {
	case HostGateway:
		return "gateway"
	case HostNode:
		return "node"
	}
	return "sandbox"
}

// Settings are exec settings in the engine's compact form; unset fields
// defer to other layers. The rules that layer them live in
// services/internal/execpolicy, which speaks the API's types; the service
// converts its effective settings to these.
type Settings struct {
	Security    Security
	Ask         Ask
	AskFallback Security
}

// Segment is one simple command as judged.
type Segment struct {
	// Argv are the words after quote removal; a word that expands at run
	// time keeps its source spelling.
	Argv []string
	// ResolvedPath is the binary the shell would run; empty for builtins
	// and for names that do not resolve.
	ResolvedPath string
	// RealPath is ResolvedPath with its symlinks resolved: the file that
	// really runs, and what allow-always records.
	RealPath string
	// Decision is Allow, AskHuman (an allowlist miss) or Deny (refused).
	Decision Decision
	// Reason explains the decision; refusals start with the policy's string.
	Reason string
	// EntryID is the allowlist entry that matched, if any.
	EntryID string
	// Recordable reports whether allow-always may add ResolvedPath to the
	// allowlist: a resolved binary that is not a shell, an interpreter, a
	// multi-call binary or a wrapper.
	Recordable bool
}

// Program is a program name and the binary it resolved to.
type Program struct {
	// Name is the name the command gives.
	Name string
	// Path is the binary it resolves to; RealPath that file with its
	// symlinks resolved.
	Path, RealPath string
}

// Result is the verdict on a whole command line.
type Result struct {
	// Decision is the overall verdict under the settings evaluated with.
	Decision Decision
	// Reason is the exact error string of the policy for a refusal, or a
	// short explanation otherwise.
	Reason string
	// Segments are the simple commands, in execution order, wrappers
	// followed by what they run.
	Segments []Segment
	// Settings are the effective settings the verdict was reached under.
	Settings Settings
	// Programs are the program names the command resolved, judged or
	// not, in the order met: what a caller resolving for the approval
	// service sends (see gate.Segments).
	Programs []Program
	// Plan is the script that runs in place of the command when the
	// engine judged its structure (security allowlist, not denied): the
	// judged tree re-printed canonically (see plan.go). Empty under
	// security full, where the command runs as written.
	Plan string
}

// ResolvedPaths returns the distinct resolved binaries of the segments.
func (r *Result) ResolvedPaths() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range r.Segments {
		if s.ResolvedPath != "" && !seen[s.ResolvedPath] {
			seen[s.ResolvedPath] = true
			out = append(out, s.ResolvedPath)
		}
	}
	return out
}

// Recordable returns the binaries allow-always adds to the allowlist: the
// real files (symlinks followed) of segments that missed and may be
// recorded.
func (r *Result) Recordable() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range r.Segments {
		p := s.RealPath
		if p == "" {
			p = s.ResolvedPath
		}
		if s.Decision == AskHuman && s.Recordable && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
