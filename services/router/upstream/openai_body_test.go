package upstream

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestOpenAIBody checks the request body an OpenAI-compatible upstream
// receives: the client's other fields as they came, conch's model,
// messages and tools over the client's, tool-only fields dropped without
// tools, and streaming asked for with usage.
func TestOpenAIBody(t *testing.T) {
	extra := map[string]json.RawMessage{
		"temperature": json.RawMessage(`0.5`), "tool_choice": json.RawMessage(`"auto"`),
		"parallel_tool_calls": json.RawMessage(`true`), "metadata": json.RawMessage(`{"a": "<b>"}`),
		"model": json.RawMessage(`"client"`), "stream": json.RawMessage(`false`), "tools": json.RawMessage(`[]`),
	}
	msgs := []Message{
		{Role: "user", Content: "hi", Raw: json.RawMessage(`{"role":"user","content":"hi","x":1}`)},
		{Role: "assistant", Content: "q\"<&>\u2028", ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: `{}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "done"},
	}
	tests := []struct {
		name   string
		req    Request
		stream bool
		want   string
	}{
		{"no tools", Request{Model: "m\u00e9", Messages: msgs, Extra: extra}, false,
			`{"temperature":0.5,"metadata":{"a":"<b>"},"model":"m\u00e9","messages":[{"role":"user","content":"hi","x":1},` +
				`{"role":"assistant","content":"q\"<&>\u2028","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","content":"done","tool_call_id":"c1"}]}`},
		{"tools, streaming", Request{Model: "m", Messages: msgs[:1], Extra: extra, Tools: []Tool{
			{Name: "shell", Description: "run <it>", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "bare"}}}, true,
			`{"temperature":0.5,"metadata":{"a":"<b>"},"tool_choice":"auto","parallel_tool_calls":true,"model":"m",` +
				`"messages":[{"role":"user","content":"hi","x":1}],` +
				`"tools":[{"type":"function","function":{"name":"shell","description":"run <it>","parameters":{"type":"object"}}},` +
				`{"type":"function","function":{"name":"bare","description":""}}],"stream":true,"stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := (&OpenAI{}).body(&tt.req, tt.stream)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("body %s: %v", b, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("body = %s\nwant %s", b, tt.want)
			}
		})
	}
	if _, err := (&OpenAI{}).body(&Request{Model: "m", Extra: map[string]json.RawMessage{"x": json.RawMessage(`{`)}}, false); err == nil {
		t.Error("a field that is not JSON was sent")
	}
}
