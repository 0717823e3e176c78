package e2e

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// TestAnthropicUpstream checks that OpenAI-shaped requests reach an
// Anthropic Messages API upstream mapped both ways: system prompt, tools,
// tool use and tool results, plain and streamed.
func TestAnthropicUpstream(t *testing.T) {
	d := startDev(t)
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		blocks, _ := last["content"].([]any)
		first, _ := blocks[0].(map[string]any)
		switch {
		case req["stream"] == true:
			return 200, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s\",\"usage\":{\"input_tokens\":9,\"output_tokens\":0}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bom \"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"dia\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		case first["type"] == "tool_result":
			return 200, `{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"text","text":"It is sunny in Lisbon."}],"stop_reason":"end_turn","usage":{"input_tokens":20,"output_tokens":6}}`
		default:
			return 200, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Lisbon"}}],"stop_reason":"tool_use","usage":{"input_tokens":12,"output_tokens":8}}`
		}
	})
	createGateway(t, d, map[string]any{
		"name":     "claude",
		"upstream": map[string]any{"provider": "anthropic", "base_url": up.URL, "model": "claude-test", "api_key": "sk-ant"},
	})
	c := client(d)
	ctx := t.Context()
	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Weather of a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})

	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "claude",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("weather in Lisbon?")},
		Tools:    []openai.ChatCompletionToolUnionParam{tool},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].ID != "toolu_1" ||
		ch.Message.ToolCalls[0].Function.Arguments != `{"city":"Lisbon"}` || ch.Message.Content != "Let me check." {
		t.Fatalf("choice = %+v", ch)
	}
	got := up.request(0)
	tools, _ := got["tools"].([]any)
	t0, _ := tools[0].(map[string]any)
	if got["system"] != "be brief" || got["model"] != "claude-test" || t0["name"] != "get_weather" || t0["input_schema"] == nil {
		t.Errorf("anthropic request = %v", got)
	}
	if h := up.header(0); h.Get("x-api-key") != "sk-ant" || h.Get("anthropic-version") == "" {
		t.Errorf("anthropic headers = %v", h)
	}

	// The client answers the tool call; the result goes up as tool_result.
	resp, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "claude",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("weather in Lisbon?"),
			ch.Message.ToParam(),
			openai.ToolMessage(`{"sky":"clear"}`, "toolu_1"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{tool},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "It is sunny in Lisbon." || resp.Usage.TotalTokens != 26 {
		t.Fatalf("answer = %+v usage %+v", resp.Choices[0].Message, resp.Usage)
	}
	msgs, _ := up.request(1)["messages"].([]any)
	if len(msgs) != 3 || !strings.Contains(toJSON(msgs[1]), `"tool_use"`) || !strings.Contains(toJSON(msgs[2]), `"tool_use_id":"toolu_1"`) {
		t.Errorf("mapped messages = %s", toJSON(msgs))
	}

	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "claude", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("olá")},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "Bom dia" || acc.Usage.TotalTokens != 11 {
		t.Fatalf("stream = %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}
}
