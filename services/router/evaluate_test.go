package router

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

type oneGateway struct{ g *routerv1.Gateway }

func (o oneGateway) Get(_ context.Context, account, name string) (*routerv1.Gateway, error) {
	if account == "acme" && name == o.g.GetName() {
		return o.g, nil
	}
	return nil, errs.New(errs.NotFound, "gateway %q not found", name)
}

// asked records the request the approval service was asked.
type asked struct {
	approvalv1.ApprovalServiceClient
	got *approvalv1.EvaluateRequest
}

func (a *asked) Evaluate(_ context.Context, req *approvalv1.EvaluateRequest, _ ...grpc.CallOption) (*approvalv1.EvaluateResponse, error) {
	a.got = req
	return &approvalv1.EvaluateResponse{Decision: approvalv1.PolicyDecision_POLICY_DECISION_ALLOW}, nil
}

// Evaluate judges with the agent's gateway's exec settings, layered as a
// shell call on that gateway gets them, never with settings the client
// sends; an agent that is no gateway is judged by the document alone.
func TestEvaluateLayersTheGateway(t *testing.T) {
	strict := &routerv1.Gateway{Name: "strict", Exec: &approvalv1.ExecSettings{
		Host: approvalv1.Host_HOST_GATEWAY, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF}}
	full := &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_FULL, Ask: approvalv1.Ask_ASK_OFF}
	ctx := tenant.With(t.Context(), tenant.Scope{Account: "acme"})
	for _, tc := range []struct {
		name     string
		req      *approvalv1.EvaluateRequest
		settings *approvalv1.ExecSettings // what the approval service is asked with; nil: not asked
		host     approvalv1.Host
	}{
		{"the gateway's settings and host", &approvalv1.EvaluateRequest{Command: "id", Agent: "strict", Settings: full},
			&approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF},
			approvalv1.Host_HOST_GATEWAY},
		{"a host the gateway does not run on: its settings, judged there", &approvalv1.EvaluateRequest{Command: "id", Agent: "strict", Host: approvalv1.Host_HOST_NODE},
			&approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF},
			approvalv1.Host_HOST_NODE},
		{"an agent that is no gateway", &approvalv1.EvaluateRequest{Command: "id", Agent: "other", Host: approvalv1.Host_HOST_GATEWAY, Settings: full},
			nil, approvalv1.Host_HOST_GATEWAY},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &asked{}
			c := sandboxEvaluate{ApprovalServiceClient: a, gateways: oneGateway{strict}, log: slog.Default()}
			if _, err := c.Evaluate(ctx, tc.req); err != nil {
				t.Fatal(err)
			}
			if a.got == nil {
				t.Fatal("the approval service was not asked")
			}
			if a.got.GetHost() != tc.host || (tc.settings == nil) != (a.got.GetSettings() == nil) ||
				tc.settings != nil && (a.got.GetSettings().GetSecurity() != tc.settings.GetSecurity() || a.got.GetSettings().GetAsk() != tc.settings.GetAsk() || a.got.GetSettings().GetHost() != tc.settings.GetHost()) {
				t.Errorf("asked with host %v settings %v, want %v %v", a.got.GetHost(), a.got.GetSettings(), tc.host, tc.settings)
			}
		})
	}
}
