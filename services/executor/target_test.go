package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	approvalstore "github.com/conch-sh/conch/services/approval/store"

	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// verdicts is an approval service that answers every Authorize with one
// scripted response and records what it was asked.
type verdicts struct {
	resp *approvalv1.AuthorizeResponse
	got  []*approvalv1.AuthorizeRequest
}

func (v *verdicts) Authorize(_ context.Context, in *approvalv1.AuthorizeRequest, _ ...grpc.CallOption) (*approvalv1.AuthorizeResponse, error) {
	v.got = append(v.got, in)
	return v.resp, nil
}

func (v *verdicts) WatchApproval(context.Context, *approvalv1.WatchApprovalRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[approvalv1.WatchApprovalResponse], error) {
	panic("no approval is pending in these tests")
}

func (v *verdicts) AbandonApproval(context.Context, *approvalv1.AbandonApprovalRequest, ...grpc.CallOption) (*approvalv1.AbandonApprovalResponse, error) {
	panic("no approval is pending in these tests")
}

// TestExecRunsThePlan checks that a command the policy judged runs as the
// plan the approval service returned, never as the text it was sent; that
// an allowlist verdict without a plan is refused; and that the policy is
// asked about the directory the command then runs in.
func TestExecRunsThePlan(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	svc := startService(t, "127.0.0.1:1", cli)
	// The documents, watched as the executor watches them: acme's holds
	// a deny rule for the agent guarded alone.
	docs, err := approvalstore.New(cli, approval.KeyPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := document.Parse([]byte(`{"version": 1, "agents": {"guarded": {"denylist": [{"id": "no-rm", "pattern": "/usr/bin/rm"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := docs.PutDocument(t.Context(), "acme", doc, 0); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() { _ = docs.WatchDocuments(wctx) }()
	for deadline := time.Now().Add(10 * time.Second); !docs.DocumentsCached(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the documents were never cached")
		}
	}
	svc.denyRules = docs
	_, id, err := svc.Create(t.Context(), "acme", CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	allowlist := &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF}
	allow := func(plan string, sec approvalv1.Security) *approvalv1.AuthorizeResponse {
		return &approvalv1.AuthorizeResponse{Decision: approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, Plan: plan, Security: sec}
	}
	for _, tc := range []struct {
		name     string
		settings *approvalv1.ExecSettings
		resp     *approvalv1.AuthorizeResponse
		stdout   string // "" with refused set
		refused  string
		asked    bool
		agent    string
	}{
		{"plan", allowlist, allow("echo from-the-plan\n", approvalv1.Security_SECURITY_ALLOWLIST), "from-the-plan\n", "", true, ""},
		{"no plan", allowlist, allow("", approvalv1.Security_SECURITY_ALLOWLIST), "", "sent no plan to run", true, ""},
		{"full", &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_FULL, Ask: approvalv1.Ask_ASK_ALWAYS},
			allow("", approvalv1.Security_SECURITY_FULL), "from-the-command\n", "", true, ""},
		{"denied", allowlist, &approvalv1.AuthorizeResponse{Decision: approvalv1.PolicyDecision_POLICY_DECISION_DENY, Reason: "Unsupported shell token: $("},
			"", "Unsupported shell token: $(", true, ""},
		{"sandbox default", nil, nil, "from-the-command\n", "", false, ""},
		{"sandbox default, another agent", nil, nil, "from-the-command\n", "", false, "other"},
		// The fast path does not skip a document's deny rules.
		{"sandbox default, an agent with deny rules", nil, allow("", approvalv1.Security_SECURITY_FULL), "from-the-command\n", "", true, "guarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &verdicts{resp: tc.resp}
			svc.approvals = v
			res, err := svc.Exec(t.Context(), "acme", ExecParams{SandboxID: id, Command: "/bin/echo from-the-command", Workdir: "/tmp",
				Timeout: 30 * time.Second, MaxOutput: 1000, Settings: tc.settings, Agent: tc.agent}, discard{})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.refused != "" && (res.Outcome != OutcomeError || !strings.Contains(res.Error, tc.refused)):
				t.Errorf("result %+v, want a refusal containing %q", res, tc.refused)
			case tc.refused == "" && res.Stdout != tc.stdout:
				t.Errorf("stdout %q (%+v), want %q", res.Stdout, res, tc.stdout)
			}
			if asked := len(v.got) > 0; asked != tc.asked {
				t.Fatalf("approval service asked: %v, want %v", asked, tc.asked)
			}
			if tc.asked {
				b := v.got[0].GetBinding()
				if b.GetCommand() != "/bin/echo from-the-command" || b.GetCwd() != "/tmp" {
					t.Errorf("asked about %q in %q", b.GetCommand(), b.GetCwd())
				}
				if len(v.got[0].GetSegments()) != 1 || v.got[0].GetSegments()[0].GetResolvedPath() != "/usr/bin/echo" && v.got[0].GetSegments()[0].GetResolvedPath() != "/bin/echo" {
					t.Errorf("segments sent: %v", v.got[0].GetSegments())
				}
			}
		})
	}
}
