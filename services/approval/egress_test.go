package approval

import (
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// A sandbox's connection outside its allowlist becomes a pending approval
// that every surface lists by its command; allow-always remembers the host
// for the agent, so the next sandbox connects without asking.
func TestAuthorizeEgress(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	req := &approvalv1.AuthorizeEgressRequest{Agent: "research", Sandbox: "sb-1", Host: "PyPI.org", Port: 443, Session: "s1"}
	resp, err := s.AuthorizeEgress(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetApproval()
	if resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK || a.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_PENDING ||
		a.GetCommand() != "connect to pypi.org:443" || a.GetEgress() != "pypi.org:443" || a.GetSandbox() != "sb-1" || a.GetAgent() != "research" {
		t.Fatalf("authorize egress: %v", resp)
	}
	list, err := s.ListApprovals(ctx, &approvalv1.ListApprovalsRequest{State: approvalv1.ApprovalState_APPROVAL_STATE_PENDING})
	if err != nil || len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetEgress() != "pypi.org:443" {
		t.Fatalf("pending: %v %v", list, err)
	}
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS}); err != nil {
		t.Fatal(err)
	}
	again, err := s.AuthorizeEgress(ctx, &approvalv1.AuthorizeEgressRequest{Agent: "research", Sandbox: "sb-2", Host: "pypi.org", Port: 443})
	if err != nil || again.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
		t.Fatalf("after allow-always: %v %v", again, err)
	}
	other, err := s.AuthorizeEgress(ctx, &approvalv1.AuthorizeEgressRequest{Agent: "other", Sandbox: "sb-3", Host: "pypi.org", Port: 443})
	if err != nil || other.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK {
		t.Fatalf("another agent: %v %v", other, err)
	}
	for name, bad := range map[string]*approvalv1.AuthorizeEgressRequest{
		"no agent":   {Sandbox: "sb", Host: "pypi.org", Port: 443},
		"no sandbox": {Agent: "a", Host: "pypi.org", Port: 443},
		"a suffix":   {Agent: "a", Sandbox: "sb", Host: "*.pypi.org", Port: 443},
		"no host":    {Agent: "a", Sandbox: "sb", Port: 443},
		"bad port":   {Agent: "a", Sandbox: "sb", Host: "pypi.org", Port: 0},
	} {
		if _, err := s.AuthorizeEgress(ctx, bad); errs.KindOf(err) != errs.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
}
