package restjson

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

func TestMarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   proto.Message
		want string
	}{
		{
			name: "exit outcome keeps a zero exit code",
			in: &executorv1.RunCommandResponse{
				Stdout:  "hi\n",
				Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: proto.Int32(0)},
			},
			want: `{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"hi\n"}`,
		},
		{
			name: "error outcome has no exit code",
			in: &executorv1.RunCommandResponse{
				Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR},
				Error:   proto.String("Command not allowed by exec policy"),
			},
			want: `{"error":"Command not allowed by exec policy","outcome":{"type":"error"},"stderr":"","stdout":""}`,
		},
		{
			name: "multi-word enums become hyphenated words, unspecified is empty",
			in: &approvalv1.EvaluateResponse{
				Decision: approvalv1.PolicyDecision_POLICY_DECISION_ASK,
				Ask:      approvalv1.Ask_ASK_ON_MISS,
				Segments: []*approvalv1.Segment{{Argv: []string{"rg"}, Decision: approvalv1.PolicyDecision_POLICY_DECISION_DENY}},
			},
			want: `{"ask":"on-miss","ask_fallback":"","decision":"ask","plan":"","reason":"","security":"","segments":[{"argv":["rg"],"content_digest":"","decision":"deny","real_path":"","reason":"","resolved_path":""}]}`,
		},
		{
			name: "html characters are not escaped",
			in:   &executorv1.RunCommandResponse{Stdout: "<a&b>"},
			want: `{"outcome":null,"stderr":"","stdout":"<a&b>"}`,
		},
	}
	m := New()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := m.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("Marshal mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    proto.Message
		wantErr bool
	}{
		{
			name: "word",
			in:   `{"decision": "allow-once"}`,
			want: &approvalv1.ResolveApprovalRequest{Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE},
		},
		{
			name: "proto name",
			in:   `{"decision": "APPROVAL_DECISION_DENY"}`,
			want: &approvalv1.ResolveApprovalRequest{Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY},
		},
		{
			name: "camelCase field and nested enum",
			in:   `{"command": "ls", "settings": {"askFallback": "allowlist", "safeBins": ["jq"]}}`,
			want: &approvalv1.EvaluateRequest{Command: "ls", Settings: &approvalv1.ExecSettings{
				AskFallback: approvalv1.Security_SECURITY_ALLOWLIST, SafeBins: []string{"jq"},
			}},
		},
		{name: "unknown word", in: `{"decision": "maybe"}`, wantErr: true},
		{name: "unspecified spelled out is not a word", in: `{"decision": "unspecified"}`, wantErr: true},
		{name: "unknown field", in: `{"verdict": "deny"}`, wantErr: true},
		{name: "syntax error", in: `{"decision": `, wantErr: true},
	}
	m := New()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got proto.Message = &approvalv1.ResolveApprovalRequest{}
			if tt.want != nil {
				got = tt.want.ProtoReflect().New().Interface()
			}
			err := m.Unmarshal([]byte(tt.in), got)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = nil error, want one", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Unmarshal mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueryParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query   string
		want    *approvalv1.ListApprovalsRequest
		wantErr bool
	}{
		{query: "state=pending", want: &approvalv1.ListApprovalsRequest{State: approvalv1.ApprovalState_APPROVAL_STATE_PENDING}},
		{query: "state=APPROVAL_STATE_EXPIRED&agent=main", want: &approvalv1.ListApprovalsRequest{State: approvalv1.ApprovalState_APPROVAL_STATE_EXPIRED, Agent: "main"}},
		{query: "state=nope", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			values, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got := &approvalv1.ListApprovalsRequest{}
			err = QueryParser{}.Parse(got, values, utilities.NewDoubleArray(nil))
			if tt.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalIsCompact(t *testing.T) {
	t.Parallel()
	got, err := New().Marshal(&approvalv1.WatchApprovalRequest{Id: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a1"}`
	if string(got) != want {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
}

func TestMarshalWrites64BitIntegersAsNumbers(t *testing.T) {
	t.Parallel()
	got, err := New().Marshal(&approvalv1.AllowlistEntry{Id: "e1", Pattern: "/usr/bin/*", LastUsedAt: 1737150000000})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"e1","last_resolved_path":"","last_used_at":1737150000000,"last_used_command":"","pattern":"/usr/bin/*"}`
	if string(got) != want {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
}

func TestUnmarshalIntoBodyField(t *testing.T) {
	t.Parallel()
	// grpc-gateway decodes a body field through a pointer to its pointer.
	var settings *approvalv1.ExecSettings
	if err := New().Unmarshal([]byte(`{"ask": "on-miss"}`), &settings); err != nil {
		t.Fatal(err)
	}
	if settings.GetAsk() != approvalv1.Ask_ASK_ON_MISS {
		t.Errorf("ask = %v, want ASK_ON_MISS", settings.GetAsk())
	}
}

// An unknown enum word is refused naming the field and its words, never
// with protojson's message about proto types.
func TestUnmarshalUnknownWord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"decision": "maybe"}`, "decision: must be allow-once, allow-always, deny or allow-session"},
		{`{"command": "ls", "settings": {"ask_fallback": "loose"}}`, "ask_fallback: must be deny, allowlist or full"},
	} {
		var msg proto.Message = &approvalv1.ResolveApprovalRequest{}
		if strings.Contains(tc.in, "settings") {
			msg = &approvalv1.EvaluateRequest{}
		}
		err := New().Unmarshal([]byte(tc.in), msg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}
