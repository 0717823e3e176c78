package approval

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/execpolicy"
)

func hostFrom(h approvalv1.Host) policy.Host {
	switch h {
	case approvalv1.Host_HOST_GATEWAY:
		return policy.HostGateway
	case approvalv1.Host_HOST_NODE:
		return policy.HostNode
	}
	return policy.HostSandbox
}

func hostByName(s string) approvalv1.Host {
	switch s {
	case "gateway":
		return approvalv1.Host_HOST_GATEWAY
	case "node":
		return approvalv1.Host_HOST_NODE
	}
	return approvalv1.Host_HOST_SANDBOX
}

func securityFrom(s approvalv1.Security) policy.Security {
	switch s {
	case approvalv1.Security_SECURITY_DENY:
		return policy.SecurityDeny
	case approvalv1.Security_SECURITY_ALLOWLIST:
		return policy.SecurityAllowlist
	case approvalv1.Security_SECURITY_FULL:
		return policy.SecurityFull
	}
	return policy.SecurityUnset
}

func securityTo(s policy.Security) approvalv1.Security {
	switch s {
	case policy.SecurityDeny:
		return approvalv1.Security_SECURITY_DENY
	case policy.SecurityAllowlist:
		return approvalv1.Security_SECURITY_ALLOWLIST
	case policy.SecurityFull:
		return approvalv1.Security_SECURITY_FULL
	}
	return approvalv1.Security_SECURITY_UNSPECIFIED
}

func askFrom(a approvalv1.Ask) policy.Ask {
	switch a {
	case approvalv1.Ask_ASK_OFF:
		return policy.AskOff
	case approvalv1.Ask_ASK_ON_MISS:
		return policy.AskOnMiss
	case approvalv1.Ask_ASK_ALWAYS:
		return policy.AskAlways
	}
	return policy.AskUnset
}

func askTo(a policy.Ask) approvalv1.Ask {
	switch a {
	case policy.AskOff:
		return approvalv1.Ask_ASK_OFF
	case policy.AskOnMiss:
		return approvalv1.Ask_ASK_ON_MISS
	case policy.AskAlways:
		return approvalv1.Ask_ASK_ALWAYS
	}
	return approvalv1.Ask_ASK_UNSPECIFIED
}

func decisionTo(d policy.Decision) approvalv1.PolicyDecision {
	switch d {
	case policy.Allow:
		return approvalv1.PolicyDecision_POLICY_DECISION_ALLOW
	case policy.AskHuman:
		return approvalv1.PolicyDecision_POLICY_DECISION_ASK
	}
	return approvalv1.PolicyDecision_POLICY_DECISION_DENY
}

func decisionByName(s string) approvalv1.PolicyDecision {
	switch s {
	case "allow":
		return approvalv1.PolicyDecision_POLICY_DECISION_ALLOW
	case "ask":
		return approvalv1.PolicyDecision_POLICY_DECISION_ASK
	}
	return approvalv1.PolicyDecision_POLICY_DECISION_DENY
}

// settingsTo is the API form of engine settings, for execpolicy to layer.
func settingsTo(s policy.Settings) *approvalv1.ExecSettings {
	return &approvalv1.ExecSettings{Security: securityTo(s.Security), Ask: askTo(s.Ask), AskFallback: securityTo(s.AskFallback)}
}

// settingsFrom is the engine form of API settings.
func settingsFrom(s *approvalv1.ExecSettings) policy.Settings {
	if s == nil {
		return policy.Settings{}
	}
	return policy.Settings{Security: securityFrom(s.GetSecurity()), Ask: askFrom(s.GetAsk()), AskFallback: securityFrom(s.GetAskFallback())}
}

func segmentsTo(segs []policy.Segment) []*approvalv1.Segment {
	out := make([]*approvalv1.Segment, len(segs))
	for i, s := range segs {
		out[i] = &approvalv1.Segment{Argv: s.Argv, ResolvedPath: s.ResolvedPath, RealPath: s.RealPath, Decision: decisionTo(s.Decision), Reason: s.Reason}
	}
	return out
}

func segmentsStored(segs []policy.Segment) []store.Segment {
	out := make([]store.Segment, len(segs))
	for i, s := range segs {
		out[i] = store.Segment{Argv: s.Argv, ResolvedPath: s.ResolvedPath, Decision: s.Decision.String(), Reason: s.Reason}
	}
	return out
}

var stateTo = map[string]approvalv1.ApprovalState{
	store.StatePending: approvalv1.ApprovalState_APPROVAL_STATE_PENDING,
	store.StateAllowed: approvalv1.ApprovalState_APPROVAL_STATE_ALLOWED,
	store.StateDenied:  approvalv1.ApprovalState_APPROVAL_STATE_DENIED,
	store.StateExpired: approvalv1.ApprovalState_APPROVAL_STATE_EXPIRED,
}

// approvalDecisionTo maps a stored decision (its word) to the enum.
var approvalDecisionTo = execpolicy.Decisions

func approvalDecisionFrom(d approvalv1.ApprovalDecision) string {
	for k, v := range approvalDecisionTo {
		if v == d {
			return k
		}
	}
	return ""
}

// optionalTime is nil for a zero time, so unset times stay absent.
func optionalTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func approvalTo(a *store.Approval) *approvalv1.Approval {
	sec, _ := policy.ParseSecurity(a.Security)
	out := &approvalv1.Approval{
		Id: a.ID, State: stateTo[a.State], Decision: approvalDecisionTo[a.Decision], Command: a.Command,
		Cwd: a.Cwd, Agent: a.Agent, ResolvedPaths: a.ResolvedPaths, Host: hostByName(a.Host),
		Security: securityTo(sec), Session: a.Session, User: a.User,
		CreatedAt: timestamppb.New(a.CreatedAt), ExpiresAt: timestamppb.New(a.ExpiresAt),
		ResolvedBy: a.ResolvedBy, ResolvedAt: optionalTime(a.ResolvedAt), Node: a.Node,
		Reason: a.Reason, ReviewerNote: a.ReviewerNote, Reviewing: a.UnderReview(time.Now()),
		Egress: a.Egress, Sandbox: a.Sandbox, Preview: a.Preview,
	}
	for _, s := range a.Segments {
		out.Segments = append(out.Segments, &approvalv1.Segment{Argv: s.Argv, ResolvedPath: s.ResolvedPath, Decision: decisionByName(s.Decision), Reason: s.Reason})
	}
	return out
}
