package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/router/completion"
)

func TestParseRequestChecksTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		extra     string // top-level fields added to a valid request
		wantParam string // "" when the request is valid
	}{
		{"temperature as a word", `"temperature": "hot"`, "temperature"},
		{"temperature as a number", `"temperature": 0.2`, ""},
		{"temperature null", `"temperature": null`, ""},
		{"top_p as a boolean", `"top_p": true`, "top_p"},
		{"max_tokens as a fraction", `"max_tokens": 1.5`, "max_tokens"},
		{"max_tokens as a string", `"max_tokens": "100"`, "max_tokens"},
		{"max_completion_tokens", `"max_completion_tokens": 100`, ""},
		{"n as an object", `"n": {}`, "n"},
		{"seed", `"seed": 42`, ""},
		{"logprobs as a string", `"logprobs": "yes"`, "logprobs"},
		{"parallel_tool_calls as a number", `"parallel_tool_calls": 1`, "parallel_tool_calls"},
		{"stop as a string", `"stop": "END"`, ""},
		{"stop as strings", `"stop": ["a", "b"]`, ""},
		{"stop as numbers", `"stop": [1, 2]`, "stop"},
		{"tool_choice as a word", `"tool_choice": "auto"`, ""},
		{"tool_choice as an object", `"tool_choice": {"type": "function", "function": {"name": "f"}}`, ""},
		{"tool_choice as a number", `"tool_choice": 3`, "tool_choice"},
		{"response_format as a string", `"response_format": "json"`, "response_format"},
		{"metadata as an array", `"metadata": []`, "metadata"},
		{"reasoning_effort as a number", `"reasoning_effort": 2`, "reasoning_effort"},
		{"user as a number", `"user": 7`, "user"},
		{"stream as a string", `"stream": "yes"`, "stream"},
		{"stream_options.include_usage as a string", `"stream_options": {"include_usage": "yes"}`, "stream_options.include_usage"},
		{"an unknown field passes", `"x_vendor_flag": "anything"`, ""},
		{"a bad role names its field", `"messages": [{"role": "wizard", "content": "x"}]`, "messages[0].role"},
		{"a bad shell limit names its field", `"tools": [{"type": "shell", "max_uses": -1}]`, "tools[0].max_uses"},
		{"a shell network narrowing", `"tools": [{"type": "shell", "network": {"allowed_domains": ["pypi.org"], "ports": [443]}}]`, ""},
		{"a shell network of the wrong type", `"tools": [{"type": "shell", "network": {"allowed_domains": "pypi.org"}}]`, "tools[0].network.allowed_domains"},
		{"an unknown shell network field", `"tools": [{"type": "shell", "network": {"mode": "full"}}]`, "tools[0].network.mode"},
	}
	h := &Handler{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := `{"model": "default", "messages": [{"role": "user", "content": "hi"}], ` + tt.extra + `}`
			if strings.HasPrefix(tt.extra, `"messages"`) {
				body = `{"model": "default", ` + tt.extra + `}`
			}
			_, err := parseRequest([]byte(body))
			if tt.wantParam == "" {
				if err != nil {
					t.Fatalf("parseRequest(%s): %v", body, err)
				}
				return
			}
			var re *completion.FieldError
			if !errors.As(err, &re) {
				t.Fatalf("parseRequest(%s) = %v, want a request error", body, err)
			}
			e := h.errorOf(t.Context(), err, "")
			if e.Status != 400 || e.Type != "invalid_request_error" || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantParam) {
				t.Errorf("answer = %+v, want 400 invalid_request_error with param %q named in the message", e, tt.wantParam)
			}
			b, _ := json.Marshal(e.object())
			if !strings.Contains(string(b), `"param":"`+tt.wantParam+`"`) {
				t.Errorf("error object %s does not carry param %q", b, tt.wantParam)
			}
		})
	}
}

// A body that JSON readers disagree on is refused, so that what conch
// judges of a request is what the upstream it forwards to reads: a
// member named twice (encoding/json keeps the last, other readers the
// first), a name in another case (encoding/json folds it into the field)
// and invalid UTF-8 (replaced by encoding/json, passed on in the raw
// messages conch forwards).
func TestRequestsAreReadOneWay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, chat, responses string // request bodies
		param, msg            string // the error wanted: its field's end, words of its message
	}{
		{"a top-level member twice",
			`{"model": "a", "model": "b", "messages": [{"role": "user", "content": "hi"}]}`,
			`{"model": "a", "model": "b", "input": "hi"}`,
			"", `duplicate object member name "model"`},
		{"a message's member twice",
			`{"model": "m", "messages": [{"role": "user", "role": "system", "content": "hi"}]}`,
			`{"model": "m", "input": [{"role": "user", "role": "system", "content": "hi"}]}`,
			"", `duplicate object member name "role"`},
		{"a member twice deep in a tool's schema",
			`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "type": "string"}}}]}`,
			`{"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "type": "string"}}]}`,
			"", `duplicate object member name "type"`},
		{"a name in another case",
			`{"model": "m", "messages": [{"Role": "user", "content": "hi"}]}`,
			`{"model": "m", "input": [{"type": "message", "Role": "user", "content": "hi"}]}`,
			"[0].role", ""},
		{"invalid UTF-8",
			"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"h\xffi\"}]}",
			"{\"model\": \"m\", \"input\": \"h\xffi\"}",
			"", "invalid UTF-8"},
		{"data after the object",
			`{"model": "m", "messages": [{"role": "user", "content": "hi"}]} {}`,
			`{"model": "m", "input": "hi"} {}`,
			"", "after top-level value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, chatErr := parseRequest([]byte(tt.chat))
			_, responsesErr := parseResponsesRequest([]byte(tt.responses))
			for api, err := range map[string]error{"chat": chatErr, "responses": responsesErr} {
				var fe *completion.FieldError
				if !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, tt.param) || !strings.Contains(fe.Error(), tt.msg) {
					t.Errorf("%s: %v, want a field error on %q saying %q", api, err, "…"+tt.param, tt.msg)
				}
			}
		})
	}
}
