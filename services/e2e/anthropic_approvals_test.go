package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
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

// TestMessagesPauseTurn: a message without a stream whose command waits
// for an approval longer than the router's approval pause (1 s here)
// answers stop_reason pause_turn, the call without its result. Sent back
// as Anthropic's clients do, the conversation goes on: paused again while
// the approval is pending, then with the command's result once a human
// allowed it, the command having run once.
func TestMessagesPauseTurn(t *testing.T) {
	d := startDev(t, "CONCH_APPROVAL_PAUSE=1s")
	createGateway(t, d, map[string]any{"name": "asks", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	c := anthropic.NewClient(option.WithBaseURL(d.URL), option.WithAPIKey(d.Key), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "asks", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("run: uname -r"))},
		Tools:    []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}},
	}
	types := func(m *anthropic.Message) string {
		var ts []string
		for _, b := range m.Content {
			ts = append(ts, b.Type)
		}
		return strings.Join(ts, ",")
	}

	first, err := c.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if first.StopReason != anthropic.StopReasonPauseTurn || types(first) != "server_tool_use" || first.Container.ID == "" {
		t.Fatalf("first: stop %q, content %s, container %q", first.StopReason, types(first), first.Container.ID)
	}
	params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(first.Container.ID)}
	params.Messages = append(params.Messages, first.ToParam())

	again, err := c.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if again.StopReason != anthropic.StopReasonPauseTurn || types(again) != "" {
		t.Fatalf("still pending: stop %q, content %s", again.StopReason, types(again))
	}

	if code := <-allowWhenPending(t, d, "uname -r", func(pendingApproval) {}); code != 200 {
		t.Fatalf("approval answered with %d", code)
	}
	params.Messages = append(params.Messages, again.ToParam())
	done, err := c.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if done.StopReason != anthropic.StopReasonEndTurn || types(done) != "bash_code_execution_tool_result,text" {
		t.Fatalf("resumed: stop %q, content %s", done.StopReason, types(done))
	}
	res := done.Content[0].AsBashCodeExecutionToolResult().Content
	if res.ReturnCode != 0 || res.Stdout == "" || !strings.Contains(done.Content[1].Text, "exited with code 0") {
		t.Errorf("resumed result %+v, text %q", res, done.Content[1].Text)
	}
	// One approval was asked for, across the three requests: the command
	// was judged, and ran, once.
	code, body := d.call("GET", "/api/v1/audit?limit=100", d.Key, nil)
	var audit struct {
		Records []struct {
			Command    string `json:"command"`
			ApprovalID string `json:"approval_id"`
		} `json:"records"`
	}
	if err := json.Unmarshal(body, &audit); code != 200 || err != nil {
		t.Fatalf("audit %d: %s", code, body)
	}
	approvals := map[string]bool{}
	for _, r := range audit.Records {
		if r.Command == "uname -r" {
			approvals[r.ApprovalID] = true
		}
	}
	if len(approvals) != 1 {
		t.Errorf("the command was asked about %d times (%v), want once", len(approvals), approvals)
	}
}

// TestMessagesCountTokens: count_tokens asks an Anthropic upstream for
// the input tokens of what conch would send it — the conversation and
// conch's own tools, without generation's fields — and answers 501 for
// an upstream that cannot count, raised by the SDK as its own error.
func TestMessagesCountTokens(t *testing.T) {
	var seen struct {
		path, key string
		body      map[string]any
	}
	var mu sync.Mutex
	up := serveModel(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen.path, seen.key = r.URL.Path, r.Header.Get("X-Api-Key")
		_ = json.NewDecoder(r.Body).Decode(&seen.body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens": 321}`)
	}))
	d := startDev(t)
	createGateway(t, d, map[string]any{"name": "claude", "upstream": map[string]any{"provider": "anthropic", "model": "claude-x", "base_url": up.URL, "api_key": "sk-up"},
		"shell": map[string]any{"enabled": true}})
	c := anthropic.NewClient(option.WithBaseURL(d.URL), option.WithAPIKey(d.Key), option.WithMaxRetries(0))
	count, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    "claude",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("how many?"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	tools, _ := json.Marshal(seen.body["tools"])
	_, hasMax := seen.body["max_tokens"]
	if count.InputTokens != 321 || seen.path != "/v1/messages/count_tokens" || seen.key != "sk-up" || seen.body["model"] != "claude-x" ||
		hasMax || !strings.Contains(string(tools), `"name":"shell"`) {
		t.Errorf("counted %d; upstream saw %s with key %q: %v", count.InputTokens, seen.path, seen.key, seen.body)
	}
	mu.Unlock()

	_, err = c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    "default",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("how many?"))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotImplemented || !strings.Contains(apiErr.Error(), "does not count tokens") {
		t.Errorf("the scripted model's count: %v", err)
	}
}
