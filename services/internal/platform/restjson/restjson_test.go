package restjson

import (
	"encoding/json"
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
		{query: "agent=a&agent=b", wantErr: true},
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
		{`{"command": "ls", "settings": {"ask_fallback": "loose"}}`, "settings.ask_fallback: must be deny, allowlist or full"},
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

// TestDecodeErrors: a body or query that does not decode is refused in the
// caller's words: the field's path as written first, or `unknown field`,
// never protojson's or encoding/json's words about proto or Go types.
func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"unknown field", `{"usr": "alice"}`, `unknown field "usr"`},
		{"unknown nested field", `{"limits": {"memory": 1}}`, `unknown field "limits.memory"`},
		{"string for a string field", `{"user": 5}`, `user: want a string, got 5`},
		{"camelCase names stay as written", `{"idleTimeoutSeconds": "soon"}`, `idleTimeoutSeconds: want an integer from -2147483648 to 2147483647, got "soon"`},
		{"fraction", `{"idle_timeout_seconds": 1.5}`, `idle_timeout_seconds: want an integer from -2147483648 to 2147483647, got 1.5`},
		{"out of range", `{"idle_timeout_seconds": 99999999999}`, `idle_timeout_seconds: want an integer from -2147483648 to 2147483647, got 99999999999`},
		{"int64 as a word", `{"limits": {"memory_bytes": "lots"}}`, `limits.memory_bytes: want an integer, got "lots"`},
		{"bool", `{"persistent": "yes"}`, `persistent: want true or false, got "yes"`},
		{"object", `{"limits": "big"}`, `limits: want an object, got "big"`},
		{"array", `{"path_prepend": "/opt/bin"}`, `path_prepend: want an array, got "/opt/bin"`},
		{"array element", `{"path_prepend": ["/opt/bin", 7]}`, `path_prepend[1]: want a string, got 7`},
		{"element of a list of messages", `{"tools": [{"name": "a"}, {"nme": "b"}]}`, `unknown field "tools[1].nme"`},
		{"enum word", `{"network": {"mode": "open"}}`, `network.mode: must be`},
		{"not an object", `[1]`, `request body: want a JSON object, got an array`},
		{"syntax", "{\n  \"user\": \"a\",\n}", `request body is not valid JSON: invalid character '}' looking for beginning of object key string at line 3, column 1`},
		{"cut short", `{"user": "a"`, `request body is not valid JSON: it ends before the JSON value does`},
		{"not JSON", `user=alice`, `request body is not valid JSON: invalid character 'u' looking for beginning of value at line 1, column 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var req executorv1.CreateSandboxRequest
			err := New().NewDecoder(strings.NewReader(tt.body)).Decode(&req)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Decode(%s) = %v, want %q", tt.body, err, tt.want)
			}
			for _, leak := range []string{"proto", "Go ", "Go struct", "int32", "int64", "CreateSandboxRequest", "(line"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("Decode(%s) = %q, which says %q", tt.body, err, leak)
				}
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query, want string
		msg         proto.Message
	}{
		{"state=maybe", "state: must be pending, allowed, denied", &approvalv1.ListApprovalsRequest{}},
		{"agent=a&agent=b", "agent: give one value, got 2", &approvalv1.ListApprovalsRequest{}},
		{"page_size=x", `page_size: want an integer from -2147483648 to 2147483647, got "x"`, &approvalv1.ListAuditRecordsRequest{}},
		{"since=yesterday", `since: want a time as RFC 3339 ("2006-01-02T15:04:05Z"), got "yesterday"`, &approvalv1.ListAuditRecordsRequest{}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			values, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			err = QueryParser{}.Parse(tt.msg, values, utilities.NewDoubleArray(nil))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Parse(%s) = %v, want %q", tt.query, err, tt.want)
			}
			if strings.Contains(err.Error(), "strconv") || strings.Contains(err.Error(), "parsing") {
				t.Errorf("Parse(%s) = %q, in Go's words", tt.query, err)
			}
		})
	}
}

func TestJSONError(t *testing.T) {
	t.Parallel()
	type entry struct {
		Pattern string `json:"pattern"`
	}
	type doc struct {
		Version int                                    `json:"version"`
		Agents  map[string]struct{ Allowlist []entry } `json:"agents"`
	}
	tests := []struct{ in, want string }{
		{`{"version": "x"}`, `version: want an integer, got a string`},
		{`{"version": 1.5}`, `version: want an integer, got 1.5`},
		{`{"agents": {"main": {"Allowlist": [{"pattern": 5}]}}}`, `agents.Allowlist.pattern: want a string, got a number`},
		{`[1]`, `request body: want an object, got an array`},
		{`{"version": 1,}`, `request body is not valid JSON: invalid character '}' looking for beginning of object key string at line 1, column 15`},
	}
	for _, tt := range tests {
		var d doc
		err := JSONError([]byte(tt.in), json.Unmarshal([]byte(tt.in), &d))
		if err == nil || err.Error() != tt.want {
			t.Errorf("JSONError(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
	if JSONError(nil, nil) != nil {
		t.Error("JSONError(nil) != nil")
	}
}
