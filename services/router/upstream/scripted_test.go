package upstream

import (
	"slices"
	"strings"
	"testing"
)

func TestScriptedCommands(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"run: ls -la", []string{"ls -la"}},
		{"please run `ls` then `pwd` and `wc -l f`", []string{"ls", "pwd", "wc -l f"}},
		{"```sh\ncd /tmp\nls\n```\nand `ignored`", []string{"cd /tmp\nls"}},
		{"hello", nil},
		{"run:   ", nil},
		{"`  ` run: true", []string{"true"}},
	}
	for _, tt := range tests {
		if got := ScriptedCommands(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("ScriptedCommands(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

// TestScriptedRunsEachCommand plays the loop: the model calls the shell for
// each command in turn, then summarises every result.
func TestScriptedRunsEachCommand(t *testing.T) {
	req := &Request{Messages: []Message{{Role: "user", Content: "run `echo a` then `echo b`"}}, Tools: []Tool{{Name: "shell"}}}
	var calls []string
	for i := 0; i < 4; i++ {
		resp, err := Scripted{}.Complete(t.Context(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ToolCalls) == 0 {
			if !strings.Contains(resp.Content, "echo a") || !strings.Contains(resp.Content, "echo b") || !strings.Contains(resp.Content, "out-b") {
				t.Fatalf("summary = %q", resp.Content)
			}
			if !slices.Equal(calls, []string{`{"command":"echo a"}`, `{"command":"echo b"}`}) {
				t.Fatalf("calls = %q", calls)
			}
			return
		}
		call := resp.ToolCalls[0]
		calls = append(calls, call.Arguments)
		out := "out-a"
		if len(calls) == 2 {
			out = "out-b"
		}
		req.Messages = append(req.Messages,
			Message{Role: "assistant", ToolCalls: resp.ToolCalls},
			Message{Role: "tool", ToolCallID: call.ID, Content: `{"stdout":"` + out + `\n","stderr":"","outcome":{"type":"exit","exit_code":0}}`})
	}
	t.Fatalf("no final answer after %d calls", len(calls))
}
