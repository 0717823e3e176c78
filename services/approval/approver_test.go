package approval

import (
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// The approver recorded is the authenticated caller
// (docs/how-to/approvals.md): the key that called, with the surface it used,
// or the verified chat sender — never a name in the request, and never
// "fallback", which only the expiry of an approval records.
func TestResolveRecordsTheAuthenticatedCaller(t *testing.T) {
	t.Parallel()
	s, base := newServer(t)
	if _, err := s.PutForwarding(base, &approvalv1.PutForwardingRequest{Config: &approvalv1.ForwardingConfig{
		Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_SESSION,
		Approvers: []*approvalv1.Approver{{Channel: approvalv1.Channel_CHANNEL_SLACK, Id: "U999"}},
	}}); err != nil {
		t.Fatal(err)
	}
	allowOnce := approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE
	resolve := func(approver string) func(s *Server, sc tenant.Scope, id string) (*approvalv1.Approval, error) {
		return func(s *Server, sc tenant.Scope, id string) (*approvalv1.Approval, error) {
			resp, err := s.ResolveApproval(tenant.With(t.Context(), sc), &approvalv1.ResolveApprovalRequest{Id: id, Decision: allowOnce, Approver: approver})
			return resp.GetApproval(), err
		}
	}
	chat := func(ch approvalv1.Channel, from string) func(s *Server, sc tenant.Scope, id string) (*approvalv1.Approval, error) {
		return func(s *Server, sc tenant.Scope, id string) (*approvalv1.Approval, error) {
			resp, err := s.HandleChatCommand(tenant.With(t.Context(), sc), &approvalv1.HandleChatCommandRequest{Channel: ch, From: from, Text: "/approve " + id + " allow-once"})
			return resp.GetApproval(), err
		}
	}
	keyed := func(surface string) tenant.Scope {
		return tenant.Scope{Account: "acct", Session: "s1", Key: "key-a1", Surface: surface}
	}
	for _, tt := range []struct {
		name    string
		scope   tenant.Scope
		answer  func(s *Server, sc tenant.Scope, id string) (*approvalv1.Approval, error)
		want    string // the approver recorded
		refused bool   // or a refusal of kind wantErr naming errText, the approval left pending
		wantErr errs.Kind
		errText string
	}{
		{name: "rest", scope: keyed(tenant.SurfaceREST), answer: resolve(""), want: "key:key-a1 via rest"},
		{name: "cli", scope: keyed(tenant.SurfaceCLI), answer: resolve(""), want: "key:key-a1 via cli"},
		{name: "web", scope: keyed(tenant.SurfaceWeb), answer: resolve(""), want: "key:key-a1 via web"},
		{name: "no surface is rest", scope: keyed(""), answer: resolve(""), want: "key:key-a1 via rest"},
		{name: "unknown surface is rest", scope: keyed("fallback"), answer: resolve(""), want: "key:key-a1 via rest"},
		{name: "admin key", scope: tenant.Scope{Account: "acct", Admin: true, Key: "admin"}, answer: resolve(""), want: "key:admin via rest"},
		{name: "body names fallback", scope: keyed(tenant.SurfaceREST), answer: resolve("fallback"), refused: true, wantErr: errs.InvalidArgument, errText: "approver: set by conch from the authenticated caller"},
		{name: "body names someone", scope: keyed(tenant.SurfaceCLI), answer: resolve("alice"), refused: true, wantErr: errs.InvalidArgument, errText: "approver: set by conch from the authenticated caller"},
		{name: "no key", scope: tenant.Scope{Account: "acct", Session: "s1"}, answer: resolve(""), refused: true, wantErr: errs.PermissionDenied, errText: "API key"},
		{name: "chat approver", scope: keyed(tenant.SurfaceREST), answer: chat(approvalv1.Channel_CHANNEL_SLACK, "U999"), want: "slack:U999"},
		{name: "chat stranger", scope: keyed(tenant.SurfaceREST), answer: chat(approvalv1.Channel_CHANNEL_SLACK, "fallback"), refused: true, wantErr: errs.PermissionDenied, errText: "not a configured approver"},
		{name: "own session", scope: keyed(tenant.SurfaceREST), answer: chat(approvalv1.Channel_CHANNEL_SESSION, "s1"), want: "session:s1"},
		{name: "chat without key", scope: tenant.Scope{Account: "acct", Session: "s1"}, answer: chat(approvalv1.Channel_CHANNEL_SLACK, "U999"), refused: true, wantErr: errs.PermissionDenied, errText: "API key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Authorize(base, &approvalv1.AuthorizeRequest{Binding: binding("rm -rf " + tt.name), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetApproval().GetId()
			got, err := tt.answer(s, tt.scope, id)
			if tt.refused {
				if errs.KindOf(err) != tt.wantErr || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("answer = %v, want %v with %q", err, tt.wantErr, tt.errText)
				}
				left, err := s.GetApproval(base, &approvalv1.GetApprovalRequest{Id: id})
				if err != nil {
					t.Fatal(err)
				}
				if a := left.GetApproval(); a.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_PENDING || a.GetResolvedBy() != "" {
					t.Fatalf("a refused answer changed the approval: %v by %q", a.GetState(), a.GetResolvedBy())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GetResolvedBy() != tt.want {
				t.Fatalf("resolved_by = %q, want %q", got.GetResolvedBy(), tt.want)
			}
		})
	}
}
