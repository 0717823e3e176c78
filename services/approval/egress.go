package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"strconv"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// maxEgressTimeout bounds how long a held connection waits for a human.
const maxEgressTimeout = time.Hour

// AuthorizeEgress implements ApprovalService.
func (s *Server) AuthorizeEgress(ctx context.Context, req *approvalv1.AuthorizeEgressRequest) (*approvalv1.AuthorizeEgressResponse, error) {
	ctx, span := tracer.Start(ctx, "approval.AuthorizeEgress")
	defer span.End()
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetAgent() == "" {
		return nil, errs.New(errs.InvalidArgument, "agent: required")
	}
	if req.GetSandbox() == "" {
		return nil, errs.New(errs.InvalidArgument, "sandbox: required")
	}
	host, err := egress.NormalizePattern(req.GetHost())
	if err != nil || host[0] == '*' {
		return nil, errs.New(errs.InvalidArgument, "host: not a host name or IP address: %q", req.GetHost())
	}
	if p := req.GetPort(); p < 1 || p > 65535 {
		return nil, errs.New(errs.InvalidArgument, "port: must be 1 to 65535, got %d", p)
	}
	timeout := DefaultApprovalTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = min(time.Duration(t)*time.Second, maxEgressTimeout)
	}
	doc, _, err := s.store.CachedDocument(ctx, account)
	if err != nil {
		return nil, err
	}
	if doc.EgressAllowed(req.GetAgent(), host) {
		verdicts.Add(ctx, 1, verdictAttrs("authorize-egress", "allow"))
		return &approvalv1.AuthorizeEgressResponse{Decision: approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, Reason: "allowed always for " + req.GetAgent()}, nil
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(req.GetPort())))
	now := s.cfg.Now()
	a := &store.Approval{
		ID: document.NewID(), Account: account, Agent: req.GetAgent(),
		Command: "connect to " + target, Host: policy.HostSandbox.String(), Security: policy.SecurityAllowlist.String(),
		Session: req.GetSession(), User: req.GetUser(), CreatedAt: now, ExpiresAt: now.Add(timeout),
		Egress: target, EgressHost: host, Sandbox: req.GetSandbox(),
		Binding: egressBinding(account, req.GetAgent(), req.GetSandbox(), target),
	}
	if err := s.store.Create(ctx, a, timeout); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "network approval requested", "account", account, "approval", a.ID, "agent", a.Agent, "sandbox", a.Sandbox, "egress", target)
	verdicts.Add(ctx, 1, verdictAttrs("authorize-egress", "ask"))
	return &approvalv1.AuthorizeEgressResponse{
		Decision: approvalv1.PolicyDecision_POLICY_DECISION_ASK, Reason: target + " is not in the network allowlist of " + req.GetAgent(),
		Approval: approvalTo(a),
	}, nil
}

// egressBinding is what a network approval is bound to.
func egressBinding(account, agent, sandbox, target string) string {
	buf, _ := json.Marshal([]string{"egress", account, agent, sandbox, target})
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}
