package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

func client(d *dev, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(d.URL + "/v1/"), option.WithAPIKey(d.Key), option.WithMaxRetries(0),
	}, opts...)...)
}

// createGateway creates a gateway through the REST API.
func createGateway(t testing.TB, d *dev, gw map[string]any) {
	t.Helper()
	if code, body := d.call("POST", "/api/v1/gateways", d.Key, gw); code != http.StatusOK {
		t.Fatalf("create gateway %v = %d %s", gw["name"], code, body)
	}
}

func TestChatCompletions(t *testing.T) {
	d := startDev(t)
	c := client(d)
	ctx := t.Context()

	t.Run("models lists the gateways", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) == 0 || page.Data[0].ID != "default" {
			t.Fatalf("models = %+v", page.Data)
		}
		m, err := c.Models.Get(ctx, "default")
		if err != nil || m.ID != "default" {
			t.Fatalf("model default = %+v, %v", m, err)
		}
	})

	t.Run("scripted model answers with help", func(t *testing.T) {
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "default", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(resp.Choices[0].Message.Content, "scripted model") || resp.Choices[0].FinishReason != "stop" {
			t.Fatalf("answer = %+v", resp.Choices[0])
		}
		var conch struct {
			ServerToolCalls []any `json:"server_tool_calls"`
		}
		if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil || conch.ServerToolCalls == nil {
			t.Fatalf("conch field = %s (%v)", resp.JSON.ExtraFields["conch"].Raw(), err)
		}
	})

	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		text, _ := last["content"].(string)
		switch {
		case req["stream"] == true:
			return 200, openAIStream("Hello", ", ", "world")
		case text == "weather?":
			return 200, openAIToolCall("call_w", "get_weather", map[string]string{"city": "Lisbon"})
		case text == "fail":
			return 400, `{"error": {"message": "context too long for up-model", "type": "invalid_request_error", "code": "context_length_exceeded"}}`
		case text == "busy":
			return 429, `{"error": {"message": "slow down", "type": "rate_limit_error"}}`
		default:
			return 200, openAIText("upstream says hi")
		}
	})
	createGateway(t, d, map[string]any{
		"name":     "up",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "up-model", "api_key": "sk-upstream"},
	})

	t.Run("openai upstream: unknown fields pass through", func(t *testing.T) {
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:       "up",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hi")},
			Temperature: openai.Float(0.25),
		}, option.WithJSONSet("x_vendor_flag", map[string]any{"keep": true}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "upstream says hi" || resp.Model != "up" || resp.Usage.TotalTokens != 15 {
			t.Fatalf("resp = %+v", resp)
		}
		got := up.request(up.calls() - 1)
		if got["model"] != "up-model" || got["temperature"] != 0.25 || got["x_vendor_flag"] == nil {
			t.Errorf("upstream got %v", got)
		}
		if h := up.header(up.calls() - 1).Get("Authorization"); h != "Bearer sk-upstream" {
			t.Errorf("upstream Authorization = %q", h)
		}
	})

	t.Run("openai upstream: streaming", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "up", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != "Hello, world" {
			t.Fatalf("streamed content = %q", got)
		}
		if acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens != 6 {
			t.Fatalf("finish %q usage %+v", acc.Choices[0].FinishReason, acc.Usage)
		}
	})

	t.Run("client function tools stay client-side", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model:    "up",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			})},
		}
		resp, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_weather" ||
			ch.Message.ToolCalls[0].Function.Arguments != `{"city":"Lisbon"}` {
			t.Fatalf("choice = %+v", ch)
		}
		tools, _ := up.request(up.calls() - 1)["tools"].([]any)
		if len(tools) != 1 {
			t.Fatalf("upstream got tools %v, want only get_weather (gateway up has no shell)", tools)
		}
	})

	t.Run("upstream errors keep status and message", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "up", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("fail")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "context too long") || apiErr.Code != "context_length_exceeded" {
			t.Fatalf("err = %v", err)
		}
		before := up.calls()
		_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "up", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("busy")},
		})
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.Message, "slow down") {
			t.Fatalf("err = %v", err)
		}
		if n := up.calls() - before; n != 3 {
			t.Errorf("429 was tried %d times, want 3", n)
		}
	})

	t.Run("a gateway whose MCP server is down", func(t *testing.T) {
		createGateway(t, d, map[string]any{"name": "badtools", "upstream": map[string]any{"provider": "scripted"},
			"tools": map[string]any{"mcp_servers": []any{map[string]any{"name": "gone", "url": "http://" + modelHost + ":1/mcp"}}}})
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "badtools", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || !strings.Contains(apiErr.Message, `gateway badtools: mcp server gone`) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("upstream down", func(t *testing.T) {
		// Nothing listens on port 1: connections are refused at once.
		createGateway(t, d, map[string]any{"name": "down", "upstream": map[string]any{"provider": "openai", "base_url": "http://" + modelHost + ":1/v1", "model": "m"}})
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "down", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || !strings.Contains(apiErr.Message, "connection refused") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestChatRequestValidation(t *testing.T) {
	d := startDev(t)
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	tests := []struct {
		name     string
		body     any
		wantCode int
		wantMsg  string
	}{
		{"unknown gateway", map[string]any{"model": "nope", "messages": msgs}, 404, "The model `nope` does not exist"},
		{"no model", map[string]any{"messages": msgs}, 400, "model"},
		{"no messages", map[string]any{"model": "default", "messages": []any{}}, 400, "messages"},
		{"bad role", map[string]any{"model": "default", "messages": []map[string]any{{"role": "wizard", "content": "x"}}}, 400, "messages[0].role"},
		{"tool message without id", map[string]any{"model": "default", "messages": []map[string]any{{"role": "tool", "content": "x"}}}, 400, "messages[0].tool_call_id"},
		{"negative max_uses", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "shell", "max_uses": -1}}}, 400, "tools[0].max_uses"},
		{"zero timeout", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "shell", "timeout_seconds": 0}}}, 400, "tools[0].timeout_seconds"},
		{"timeout too long", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "shell", "timeout_seconds": 301}}}, 400, "tools[0].timeout_seconds"},
		{"zero output length", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "shell", "max_output_length": 0}}}, 400, "tools[0].max_output_length"},
		{"unknown shell field", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "shell", "memory": 1}}}, 400, "tools[0].memory"},
		{"unknown tool type", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "browser"}}}, 400, "tools[0].type"},
		{"reserved function", map[string]any{"model": "default", "messages": msgs, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "shell"}}}}, 400, "tools[0].function.name"},
		{"not json", nil, 400, "not a JSON object"},
		// Read one way: what conch judges is what the upstream reads.
		{"a name twice", json.RawMessage(`{"model": "default", "model": "other", "messages": [{"role": "user", "content": "hi"}]}`), 400, `duplicate object member name "model"`},
		{"a name in another case", json.RawMessage(`{"model": "default", "messages": [{"Role": "user", "content": "hi"}]}`), 400, "messages[0].role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body any = tt.body
			if tt.body == nil {
				body = "just a string"
			}
			code, resp := d.call("POST", "/v1/chat/completions", d.Key, body)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(resp, &e); err != nil {
				t.Fatalf("body %s is not an OpenAI error: %v", resp, err)
			}
			if code != tt.wantCode || !strings.Contains(e.Error.Message, tt.wantMsg) {
				t.Fatalf("= %d %s, want %d with %q", code, resp, tt.wantCode, tt.wantMsg)
			}
		})
	}

	t.Run("a gateway can forbid requests to enable the shell", func(t *testing.T) {
		createGateway(t, d, map[string]any{"name": "locked", "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"allow_request": false}})
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{"model": "locked", "messages": msgs, "tools": []any{map[string]any{"type": "shell"}}})
		if code != 400 || !strings.Contains(string(body), `gateway \"locked\"`) {
			t.Fatalf("= %d %s, want 400 naming the gateway", code, body)
		}
	})
}

// A model's tool call is read as the client that shows it reads it: a
// JavaScript or Python client takes "Command" for another argument than
// "command", so conch must not run it as the command, and arguments that
// name one twice are refused rather than read as the last.
func TestToolArgumentsAreReadOneWay(t *testing.T) {
	d := startDev(t)
	calls := map[string]json.RawMessage{
		"case":  json.RawMessage(`{"command": "echo shown", "Command": "echo hidden"}`),
		"twice": json.RawMessage(`{"command": "echo shown", "command": "echo hidden"}`),
	}
	up := newFakeUpstream(t, func(_ int, req map[string]any) (int, string) {
		if result := lastToolResult(req); result != "" {
			return 200, openAIText("done")
		}
		msgs, _ := req["messages"].([]any)
		first, _ := msgs[0].(map[string]any)
		return 200, openAIToolCall("call_1", "shell", calls[first["content"].(string)])
	})
	createGateway(t, d, map[string]any{"name": "args", "shell": map[string]any{"enabled": true},
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "m"}})
	result := func(t *testing.T, which string) string {
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model": "args", "messages": []map[string]any{{"role": "user", "content": which}},
		})
		var resp struct {
			Conch struct {
				ServerToolCalls []struct {
					Result string `json:"result"`
				} `json:"server_tool_calls"`
			} `json:"conch"`
		}
		if err := json.Unmarshal(body, &resp); code != 200 || err != nil || len(resp.Conch.ServerToolCalls) != 1 {
			t.Fatalf("= %d %s (%v), want one server tool call", code, body, err)
		}
		return resp.Conch.ServerToolCalls[0].Result
	}
	if r := result(t, "case"); !strings.Contains(r, "shown") || strings.Contains(r, "hidden") {
		t.Errorf("with \"Command\" beside \"command\", the shell ran %s; want the command the client shows", r)
	}
	if r := result(t, "twice"); !strings.Contains(r, `duplicate object member name \"command\"`) || strings.Contains(r, "shown\\n") || strings.Contains(r, "hidden\\n") {
		t.Errorf("with \"command\" twice, the shell gave %s; want the arguments refused", r)
	}
}

func TestExecSessionOverrides(t *testing.T) {
	d := startDev(t)
	ctx := t.Context()
	createGateway(t, d, map[string]any{"name": "strict", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	say := func(c openai.Client, model, text string) string {
		t.Helper()
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0].Message.Content
	}
	s1 := client(d, option.WithHeader("X-Conch-Session-Id", "s1"))
	s2 := client(d, option.WithHeader("X-Conch-Session-Id", "s2"))
	steps := []struct {
		c           openai.Client
		model, text string
		want        string
	}{
		{client(d), "default", "/exec", "needs a session"},
		{s1, "default", "/exec", "host=sandbox security=full ask=off"},
		{s1, "default", "/exec security=allowlist ask=on-miss", "now: host=sandbox security=allowlist ask=on-miss"},
		{s1, "default", "/exec", "security=allowlist ask=on-miss"},
		{s2, "default", "/exec", "security=full ask=off"}, // another session is untouched
		{s1, "default", "/exec host=gateway", "only tighten"},
		{s1, "strict", "/exec", "security=allowlist ask=on-miss"},
		{s1, "strict", "/exec security=full", "refused"},
		{s1, "strict", "/exec ask=off", "refused"},
		{s1, "strict", "/exec security=deny ask=always", "now: host=sandbox security=deny ask=always"},
	}
	for _, st := range steps {
		if got := say(st.c, st.model, st.text); !strings.Contains(got, st.want) {
			t.Errorf("%s: %q answered %q, want it to contain %q", st.model, st.text, got, st.want)
		}
	}
}
