package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display/displaytest"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/router/loop"
)

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
		rec := httptest.NewRecorder()
		e := &sessionEvents{sse: newSSE(rec, "chatcmpl-1", 0, "m"), ctx: t.Context(), approvals: sessionForwarding{}}
		b, err := restjson.New().Marshal(&approvalv1.Approval{Id: "A1", Command: tc.In, Cwd: tc.In, Agent: tc.In, ResolvedPaths: []string{tc.In}, Session: tc.In})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Tool(loop.ToolEvent{Event: "approval_pending", ID: "call-1", Name: "shell", Approval: b}); err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		sc := bufio.NewScanner(rec.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(data), &chunk); err != nil {
				t.Fatal(err)
			}
			for _, c := range chunk.Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		for _, field := range []string{"Command", "CWD", "Agent", "Resolved", "Session"} {
			if want := "\n" + field + ": " + tc.Want + "\n"; !strings.Contains(text.String(), want) {
				t.Errorf("%s: session text lacks %q:\n%s", tc.Name, want, text.String())
			}
		}
	}
}
