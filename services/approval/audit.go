package approval

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Approval events in the audit trail.
const (
	eventCreated   = "created"
	eventResolved  = "resolved"
	eventExpired   = "expired"
	eventAbandoned = "abandoned"
)

// auditAuthorize records the verdict of one Authorize call: the whole
// command, what the engine made of it, and who allowed it when an approval
// did. Evaluate, a dry run, is not recorded.
// In sync mode (exec.audit) the record is written before the verdict
// returns, and a record that cannot be written fails the call.
func (s *Server) auditAuthorize(ctx context.Context, account string, req *approvalv1.AuthorizeRequest, resp *approvalv1.AuthorizeResponse, err error) error {
	if s.cfg.Audit == nil {
		return nil
	}
	if resp == nil {
		// An approval used for another command is refused with an error,
		// and is a refusal all the same.
		if errs.KindOf(err) != errs.PermissionDenied {
			return nil
		}
		resp = &approvalv1.AuthorizeResponse{Decision: approvalv1.PolicyDecision_POLICY_DECISION_DENY, Reason: err.Error()}
		if id := req.GetApprovalId(); id != "" {
			resp.Approval = &approvalv1.Approval{Id: id}
		}
	}
	b := req.GetBinding()
	r := audit.Record{
		Kind: audit.KindCommand, Account: account, User: b.GetUser(), Session: b.GetSession(), Gateway: b.GetAgent(),
		Host: hostFrom(b.GetHost()).String(), Node: b.GetNode(), Cwd: b.GetCwd(), Command: b.GetCommand(), Plan: resp.GetPlan(),
		Decision: decisionName(resp.GetDecision()), Reason: resp.GetReason(), TraceID: traceID(ctx),
	}
	for _, seg := range resp.GetSegments() {
		r.Argv = append(r.Argv, seg.GetArgv())
		r.ResolvedPaths = append(r.ResolvedPaths, seg.GetResolvedPath())
	}
	if req.GetSettings() != nil {
		if b, err := protojson.Marshal(req.GetSettings()); err == nil {
			r.Exec = b
		}
	}
	if a := resp.GetApproval(); a != nil {
		r.ApprovalID = a.GetId()
		r.ResolvedBy, r.Surface = splitApprover(a.GetResolvedBy())
	}
	if req.GetSettings().GetAudit() == audit.Sync {
		if err := s.cfg.Audit.WriteSync(ctx, r); err != nil {
			return errs.Wrap(errs.Unavailable, err, "audit trail: the command's record could not be stored, so it does not run (exec.audit is sync)")
		}
		return nil
	}
	s.cfg.Audit.Write(ctx, r)
	return nil
}

// auditApproval records an approval event; resolved_by is what the store
// recorded from the authenticated caller, never a name in a request.
func (s *Server) auditApproval(ctx context.Context, event string, a *store.Approval) {
	if s.cfg.Audit == nil || a == nil {
		return
	}
	r := audit.Record{
		Kind: audit.KindApproval, Event: event, Account: a.Account, User: a.User, Session: a.Session, Gateway: a.Agent,
		Host: a.Host, Node: a.Node, Cwd: a.Cwd, Command: a.Command, ResolvedPaths: a.ResolvedPaths,
		Decision: a.Decision, Reason: a.Reason, ApprovalID: a.ID, TraceID: traceID(ctx),
	}
	for _, seg := range a.Segments {
		r.Argv = append(r.Argv, seg.Argv)
	}
	r.ResolvedBy, r.Surface = splitApprover(a.ResolvedBy)
	s.cfg.Audit.Write(ctx, r)
}

// splitApprover splits "key:<id> via <surface>" as keyApprover writes it;
// "fallback" and "requester" have no surface.
func splitApprover(by string) (who, surface string) {
	if i := strings.LastIndex(by, " via "); i >= 0 {
		return by[:i], by[i+len(" via "):]
	}
	return by, ""
}

func decisionName(d approvalv1.PolicyDecision) string {
	return strings.ToLower(strings.TrimPrefix(d.String(), "POLICY_DECISION_"))
}

func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
