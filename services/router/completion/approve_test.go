package completion

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display/displaytest"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/router/loop"
)

// textEvents records the text a streaming client sees.
type textEvents struct{ text strings.Builder }

func (e *textEvents) Delta(s string) error         { e.text.WriteString(s); return nil }
func (e *textEvents) KeepAlive() error             { return nil }
func (e *textEvents) Tool(ev loop.ToolEvent) error { return nil }

// sessionForwarding is an approval service whose account forwards
// approvals to sessions.
type sessionForwarding struct {
	approvalv1.ApprovalServiceClient
}

func (sessionForwarding) GetForwarding(context.Context, *approvalv1.GetForwardingRequest, ...grpc.CallOption) (*approvalv1.GetForwardingResponse, error) {
	return &approvalv1.GetForwardingResponse{Config: &approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_SESSION}}, nil
}

// The text a session-mode conversation shows for its pending approval
// escapes like every other surface, checked with the shared table.
func TestSessionApprovalTextEscapesTheSharedTable(t *testing.T) {
	t.Parallel()
	for _, tc := range displaytest.Cases {
		if !tc.ValidUTF8() {
			continue // the approval arrives as protobuf, which carries only valid UTF-8
		}
		var rec textEvents
		e := &sessionEvents{Events: &rec, ctx: t.Context(), approvals: sessionForwarding{}}
		b, err := restjson.New().Marshal(&approvalv1.Approval{Id: "A1", Command: tc.In, Cwd: tc.In, Agent: tc.In, ResolvedPaths: []string{tc.In}, Session: tc.In})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Tool(loop.ToolEvent{Event: "approval_pending", ID: "call-1", Name: "shell", Approval: b}); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"Command", "CWD", "Agent", "Resolved", "Session"} {
			if want := "\n" + field + ": " + tc.Want + "\n"; !strings.Contains(rec.text.String(), want) {
				t.Errorf("%s: session text lacks %q:\n%s", tc.Name, want, rec.text.String())
			}
		}
	}
}
