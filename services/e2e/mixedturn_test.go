package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// openAIToolCalls is a chat.completion calling the functions given as
// id, name, arguments triples, in one turn.
func openAIToolCalls(calls ...[3]string) string {
	var tcs []any
	for _, c := range calls {
		tcs = append(tcs, map[string]any{"id": c[0], "type": "function", "function": map[string]any{"name": c[1], "arguments": c[2]}})
	}
	b, _ := json.Marshal(map[string]any{
		"id": "up-3", "object": "chat.completion", "created": 1, "model": "up-model",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": "Checking both.", "tool_calls": tcs,
		}}},
		"usage": map[string]any{"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
	})
	return string(b)
}

// When the model calls the shell and a client function in one turn, the
// client gets only its call; on the client's next request the upstream
// sees the turn as it happened: the shell call and its output, in order,
// before the client's result.
func TestMixedTurnKeepsTheShellResult(t *testing.T) {
	d := startDev(t)
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if lastToolResult(req) == "" {
			id := fmt.Sprintf("call_%d", n)
			return 200, openAIToolCalls(
				[3]string{id + "_shell", "shell", `{"command":"echo from-the-sandbox"}`},
				[3]string{id + "_weather", "get_weather", `{"city":"Lisbon"}`},
			)
		}
		return 200, openAIText("It is sunny, and the sandbox said hello.")
	})
	createGateway(t, d, map[string]any{
		"name":     "mixed",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "up-model"},
	})
	c := client(d)
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})
	// openai-go has no type for conch's shell tool: it is sent as raw JSON
	// next to the typed function tool.
	withShell := option.WithJSONSet("tools", []any{map[string]any{"type": "shell"}, weather})

	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			user := fmt.Sprintf("user-%v", stream)
			params := openai.ChatCompletionNewParams{
				Model:    "mixed",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather, and say hello from the sandbox")},
				User:     openai.String(user),
			}
			var msg openai.ChatCompletionMessage
			var finish string
			if stream {
				s := c.Chat.Completions.NewStreaming(t.Context(), params, withShell)
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
			} else {
				resp, err := c.Chat.Completions.New(t.Context(), params, withShell)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
			}
			if finish != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
				t.Fatalf("first answer: finish %q, message %+v; want only the client call", finish, msg)
			}
			call := msg.ToolCalls[0]
			before := up.calls()

			// The client answers its call, echoing the assistant message
			// as SDKs do.
			params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("sunny, 24°C", call.ID))
			resp, err := c.Chat.Completions.New(t.Context(), params, withShell)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content != "It is sunny, and the sandbox said hello." {
				t.Fatalf("final answer %+v", resp.Choices[0].Message)
			}

			got := up.request(before)["messages"].([]any)
			var seen []string
			for _, m := range got {
				m := m.(map[string]any)
				line := fmt.Sprint(m["role"])
				if tcs, ok := m["tool_calls"].([]any); ok {
					for _, tc := range tcs {
						line += " " + tc.(map[string]any)["function"].(map[string]any)["name"].(string)
					}
				}
				if id, ok := m["tool_call_id"].(string); ok {
					content, _ := m["content"].(string)
					line += " " + strings.TrimPrefix(id, strings.TrimSuffix(call.ID, "_weather"))
					if strings.Contains(content, "from-the-sandbox") {
						line += " (sandbox output)"
					}
				}
				seen = append(seen, line)
			}
			want := []string{"user", "assistant shell get_weather", "tool _shell (sandbox output)", "tool _weather"}
			if strings.Join(seen, "\n") != strings.Join(want, "\n") {
				t.Fatalf("upstream saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
