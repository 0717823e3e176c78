package approval

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

func validID(id string) error {
	if id == "" || len(id) > 128 {
		return errs.New(errs.InvalidArgument, "id: required, at most 128 characters")
	}
	return nil
}

// GetApproval implements ApprovalService.
func (s *Server) GetApproval(ctx context.Context, req *approvalv1.GetApprovalRequest) (*approvalv1.GetApprovalResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID(req.GetId()); err != nil {
		return nil, err
	}
	a, err := s.store.Get(ctx, account, req.GetId())
	if err != nil {
		return nil, err
	}
	return &approvalv1.GetApprovalResponse{Approval: approvalTo(a)}, nil
}

// ListApprovals implements ApprovalService.
func (s *Server) ListApprovals(ctx context.Context, req *approvalv1.ListApprovalsRequest) (*approvalv1.ListApprovalsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	all, err := s.store.List(ctx, account)
	if err != nil {
		return nil, err
	}
	out := &approvalv1.ListApprovalsResponse{Approvals: []*approvalv1.Approval{}}
	for _, a := range all {
		pa := approvalTo(a)
		if req.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED && pa.GetState() != req.GetState() {
			continue
		}
		if req.GetAgent() != "" && a.Agent != req.GetAgent() {
			continue
		}
		if req.GetSession() != "" && a.Session != req.GetSession() {
			continue
		}
		out.Approvals = append(out.Approvals, pa)
	}
	return out, nil
}

// ResolveApproval implements ApprovalService. The approver recorded is the
// key that authenticated the call (docs/how-to/approvals.md), never a name in
// the request: a request naming one is refused, so no caller can record
// another principal or "fallback".
func (s *Server) ResolveApproval(ctx context.Context, req *approvalv1.ResolveApprovalRequest) (*approvalv1.ResolveApprovalResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID(req.GetId()); err != nil {
		return nil, err
	}
	if req.GetApprover() != "" {
		return nil, errs.New(errs.InvalidArgument, "approver: set by conch from the authenticated caller")
	}
	approver, err := keyApprover(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.resolve(ctx, account, req.GetId(), req.GetDecision(), approver)
	if err != nil {
		return nil, err
	}
	return &approvalv1.ResolveApprovalResponse{Approval: approvalTo(a)}, nil
}

// keyApprover names the caller of ctx as an approver: "key:<key id> via
// <surface>".
func keyApprover(ctx context.Context) (string, error) {
	sc, err := callerKey(ctx)
	if err != nil {
		return "", err
	}
	return "key:" + sc.Key + " via " + tenant.SurfaceOf(sc.Surface), nil
}

// callerKey returns the scope of ctx when an API key authenticated it. A
// call without a key (one the router makes on its own) cannot answer an
// approval, since nobody could be recorded for it.
func callerKey(ctx context.Context) (tenant.Scope, error) {
	sc, _ := tenant.From(ctx)
	if sc.Key == "" {
		return sc, errs.New(errs.PermissionDenied, "only a call authenticated with an API key answers an approval")
	}
	return sc, nil
}

// resolve answers an approval exactly once; allow-always adds, with the
// answer, the inner resolved binaries to the agent's allowlist (or the
// host of a network approval to its egress list).
func (s *Server) resolve(ctx context.Context, account, id string, decision approvalv1.ApprovalDecision, approver string) (*store.Approval, error) {
	d := approvalDecisionFrom(decision)
	if d == "" {
		return nil, errs.New(errs.InvalidArgument, "decision: want %s", strings.ReplaceAll(execpolicy.DecisionWords, "|", ", "))
	}
	if len(approver) > 256 {
		return nil, errs.New(errs.InvalidArgument, "approver: at most 256 characters")
	}
	var opts store.ResolveOptions
	if d == store.DecisionAllowAlways {
		opts.Document = func(doc *document.Document, a *store.Approval) (bool, error) {
			if a.EgressHost != "" {
				return true, doc.AddEgress(a.Agent, a.EgressHost)
			}
			for _, p := range a.Recordable {
				if _, err := doc.AddPattern(a.Agent, policy.ExactPattern(p)); err != nil {
					return false, err
				}
			}
			return len(a.Recordable) > 0, nil
		}
	}
	a, err := s.store.Resolve(ctx, account, id, d, approver, opts)
	if err != nil {
		return nil, err
	}
	s.auditApproval(ctx, eventResolved, a)
	s.log.InfoContext(ctx, "approval resolved", "account", account, "approval", id, "decision", d, "approver", approver)
	resolutions.Add(ctx, 1, metric.WithAttributes(attribute.String("decision", d)))
	return a, nil
}

// AbandonApproval implements ApprovalService.
func (s *Server) AbandonApproval(ctx context.Context, req *approvalv1.AbandonApprovalRequest) (*approvalv1.AbandonApprovalResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID(req.GetId()); err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.GetReason())
	if reason == "" {
		return nil, errs.New(errs.InvalidArgument, "reason: required")
	}
	a, err := s.store.Abandon(ctx, account, req.GetId(), reason)
	if err != nil {
		return nil, err
	}
	if a.ResolvedBy == "requester" {
		s.auditApproval(ctx, eventAbandoned, a)
		s.log.InfoContext(ctx, "approval abandoned", "account", account, "approval", a.ID, "reason", reason)
	}
	return &approvalv1.AbandonApprovalResponse{Approval: approvalTo(a)}, nil
}

// WatchApproval implements ApprovalService.
func (s *Server) WatchApproval(req *approvalv1.WatchApprovalRequest, stream approvalv1.ApprovalService_WatchApprovalServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	if err := validID(req.GetId()); err != nil {
		return err
	}
	var sendErr error
	err = s.store.Watch(ctx, account, req.GetId(), func(a *store.Approval) bool {
		sendErr = stream.Send(&approvalv1.WatchApprovalResponse{Approval: approvalTo(a)})
		return sendErr == nil
	})
	if sendErr != nil {
		return sendErr
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return errs.Wrap(errs.Canceled, err, "watch approval")
	}
	return err
}
