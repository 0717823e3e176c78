package e2e

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestMessagesApprovals: a command of the code execution tool that the
// gateway's policy asks a human about waits for the answer on the
// Messages API as on the others, driven here with Anthropic's Go SDK: a
// stream stays open and carries the approval as an event the SDK passes
// over, then the command's result; a command the human denies is a
// result with return code 126 and conch's reason, and the model goes on.
func TestMessagesApprovals(t *testing.T) {
	d := startDev(t)
	createGateway(t, d, map[string]any{"name": "asks", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	c := anthropic.NewClient(option.WithBaseURL(d.URL), option.WithAPIKey(d.Key), option.WithMaxRetries(0))
	params := func(prompt string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{
			Model: "asks", MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
			Tools:    []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}},
		}
	}

	t.Run("allowed while the stream waits", func(t *testing.T) {
		answered := allowWhenPending(t, d, "uname -s", func(pendingApproval) {})
		stream := c.Messages.NewStreaming(t.Context(), params("run: uname -s"))
		var msg anthropic.Message
		var events []string
		for stream.Next() {
			ev := stream.Current()
			events = append(events, ev.Type)
			if err := msg.Accumulate(ev); err != nil {
				t.Fatalf("accumulate %s: %v", ev.Type, err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if code := <-answered; code != 200 {
			t.Fatalf("approval answered with %d", code)
		}
		if !strings.Contains(strings.Join(events, ","), "conch_event") {
			t.Errorf("events %v: no conch_event for the approval", events)
		}
		var stdout string
		for _, b := range msg.Content {
			if b.Type == "bash_code_execution_tool_result" {
				stdout = b.AsBashCodeExecutionToolResult().Content.Stdout
			}
		}
		if stdout != "Linux\n" || msg.StopReason != anthropic.StopReasonEndTurn {
			t.Errorf("stdout %q, stop %q, content %+v", stdout, msg.StopReason, msg.Content)
		}
	})

	t.Run("denied", func(t *testing.T) {
		answered := answerWhenPending(t, d, "uname -m", "deny", func(pendingApproval) {})
		msg, err := c.Messages.New(t.Context(), params("run: uname -m"))
		if err != nil {
			t.Fatal(err)
		}
		if code := <-answered; code != 200 {
			t.Fatalf("approval answered with %d", code)
		}
		var res anthropic.BashCodeExecutionResultBlock
		var text string
		for _, b := range msg.Content {
			switch b.Type {
			case "bash_code_execution_tool_result":
				res = b.AsBashCodeExecutionToolResult().Content.AsResponseBashCodeExecutionResultBlock()
			case "text":
				text += b.Text
			}
		}
		if res.ReturnCode != 126 || !strings.Contains(res.Stderr, "conch: ") || !strings.Contains(text, "could not run") {
			t.Errorf("result %+v, text %q", res, text)
		}
	})
}
