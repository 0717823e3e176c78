package review

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	may := []string{"allow-once"}
	tests := []struct{ content, want string }{
		{`{"decision": "allow-once", "reasoning": "reads a file"}`, "allow-once"},
		{"```json\n{\"decision\": \"allow-once\", \"reasoning\": \"ok\"}\n```", "allow-once"},
		{`{"decision": "escalate", "reasoning": "deletes data"}`, Escalate},
		// Outside may: the reviewer cannot widen what it is allowed.
		{`{"decision": "deny", "reasoning": "no"}`, Escalate},
		{`{"decision": "allow-always", "reasoning": "trust me"}`, Escalate},
		{`allow-once`, Escalate},
		{`{"decision": "allow-once", "reasoning": "x"} {"decision": "deny"}`, Escalate},
		{`{"decision": "allow-once", "reasoning": "x", "note": "y"}`, Escalate},
		{``, Escalate},
	}
	for _, tc := range tests {
		if got := Parse(tc.content, may); got.GetDecision() != tc.want {
			t.Errorf("%q = %q (%s), want %q", tc.content, got.GetDecision(), got.GetReasoning(), tc.want)
		}
	}
}
