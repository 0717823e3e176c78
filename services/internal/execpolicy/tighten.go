package execpolicy

import (
	"errors"

	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// Override is a tightening layer as users and models write it: words, an
// empty one leaving its field as it is. Sessions store it as JSON.
type Override struct {
	// Host is where commands run: only "sandbox" or the base's host.
	Host string `json:"host,omitempty"`
	// Security may only be as strict as the base's or stricter.
	Security string `json:"security,omitempty"`
	// Ask may only ask as much as the base's or more.
	Ask string `json:"ask,omitempty"`
	// Node names the paired node, on host node only.
	Node string `json:"node,omitempty"`
}

// Why Tighten did not apply a field of an override.
var (
	// ErrUnknownWord is a value that is not one of the field's words.
	ErrUnknownWord = errors.New("not a known value")
	// ErrLooser is a value that would loosen the base: a weaker security,
	// less asking, or a host other than the sandbox and the base's own.
	ErrLooser = errors.New("looser than the settings it applies to")
	// ErrNotNodeHost is a node named where commands do not run on a node.
	ErrNotNodeHost = errors.New("the host is not node")
	// ErrOtherNode is a node other than the one the base names.
	ErrOtherNode = errors.New("the base names another node")
)

// Refusal is one field of an override that Tighten did not apply.
type Refusal struct {
	// Field is "host", "node", "security" or "ask".
	Field string
	// Value is the word as written.
	Value string
	// Err is why: ErrUnknownWord, ErrLooser, ErrNotNodeHost or ErrOtherNode.
	Err error
}

// Error names the field, its value and why it was not applied.
func (r Refusal) Error() string {
	return "execpolicy: " + r.Field + "=" + r.Value + ": " + r.Err.Error()
}

// Unwrap returns the reason, for errors.Is.
func (r Refusal) Unwrap() error { return r.Err }

// Tighten applies o over base (nil: none) and returns the result with its
// host, security and ask set (what base leaves unset takes the defaults of
// the resulting host), together with the fields of o it did not apply, in
// the order host, node, security, ask. The result never runs anything base
// would not: whatever would loosen it is refused, not applied. Callers
// choose what a refusal means to their users; the result is safe to use
// either way, so settings stored before the base changed never loosen it.
//
// The ask fallback is left as base has it: set, it already counts
// stricter-wins in Effective, and unset it leaves the choice to the
// exec-approvals document.
func Tighten(base *approvalv1.ExecSettings, o Override) (*approvalv1.ExecSettings, []Refusal) {
	e := &approvalv1.ExecSettings{}
	if base != nil {
		e = proto.Clone(base).(*approvalv1.ExecSettings)
	}
	if sandbox(e.Host) {
		e.Host = approvalv1.Host_HOST_SANDBOX
	}
	var refused []Refusal
	if o.Host != "" {
		h, ok := Hosts[o.Host]
		switch {
		case !ok:
			refused = append(refused, Refusal{"host", o.Host, ErrUnknownWord})
		// Leaving the sandbox is the gateway's choice alone.
		case h != approvalv1.Host_HOST_SANDBOX && h != e.Host:
			refused = append(refused, Refusal{"host", o.Host, ErrLooser})
		default:
			e.Host = h
		}
	}
	if o.Node != "" {
		switch {
		case e.Host != approvalv1.Host_HOST_NODE:
			refused = append(refused, Refusal{"node", o.Node, ErrNotNodeHost})
		// The gateway's node, when it names one, is the only node it allows.
		case e.Node != "" && e.Node != o.Node:
			refused = append(refused, Refusal{"node", o.Node, ErrOtherNode})
		default:
			e.Node = o.Node
		}
	}
	d := Defaults(e.Host)
	e.Security = knownSecurity(e.Security)
	if e.Security == approvalv1.Security_SECURITY_UNSPECIFIED {
		e.Security = d.Security
	}
	e.Ask = knownAsk(e.Ask)
	if e.Ask == approvalv1.Ask_ASK_UNSPECIFIED {
		e.Ask = d.Ask
	}
	if o.Security != "" {
		s, ok := Securities[o.Security]
		switch {
		case !ok:
			refused = append(refused, Refusal{"security", o.Security, ErrUnknownWord})
		case StricterSecurity(s, e.Security) != s:
			refused = append(refused, Refusal{"security", o.Security, ErrLooser})
		default:
			e.Security = s
		}
	}
	if o.Ask != "" {
		a, ok := Asks[o.Ask]
		switch {
		case !ok:
			refused = append(refused, Refusal{"ask", o.Ask, ErrUnknownWord})
		case StricterAsk(a, e.Ask) != a:
			refused = append(refused, Refusal{"ask", o.Ask, ErrLooser})
		default:
			e.Ask = a
		}
	}
	return e, refused
}
