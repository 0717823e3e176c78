package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runChat runs conch chat against d with args and stdin.
func runChat(t *testing.T, d *dev, stdin string, args ...string) string {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"chat"}, args...)...)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("conch chat %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestChatCLI(t *testing.T) {
	d := startDev(t)
	if out := runChat(t, d, "", "-m", "hello"); !strings.Contains(out, "scripted model") {
		t.Errorf("one-shot answer:\n%s", out)
	}
	// A chat's own session ends with it: no sandbox is left waiting for
	// its idle timeout, one-shot or interactive.
	if out := runChat(t, d, "", "--shell", "-m", "run: true"); !strings.Contains(out, "true") {
		t.Errorf("one-shot shell answer:\n%s", out)
	}
	runChat(t, d, "run: true\n/quit\n", "--shell")
	if code, body := d.call("GET", "/api/v1/sandboxes", d.Key, nil); code != http.StatusOK || strings.Contains(string(body), `"session":"chat-`) {
		t.Errorf("sandboxes after chats ended: %d %s", code, body)
	}

	// Server tool calls show as they run; terminal escapes in their output
	// are shown, not obeyed.
	hook, _ := startWebhook(t)
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n%2 == 0 {
			return 200, openAIToolCall("c1", "get_users", json.RawMessage(`{"filter":"active"}`))
		}
		return 200, openAIStream("There are ", "2 active users.\x1b[2J")
	})
	createGateway(t, d, map[string]any{
		"name":     "crm",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
		"tools": map[string]any{"webhooks": []any{map[string]any{
			"name": "get_users", "url": hook.URL,
			"parameters_schema": `{"type":"object","properties":{"filter":{"type":"string"}}}`,
		}}},
	})
	out := runChat(t, d, "who is active?\nand now?\n/quit\n", "--model", "crm")
	for _, want := range []string{`[get_users {"filter":"active"}]`, "1,John Doe,active", "There are 2 active users.\\x1b[2J"} {
		if !strings.Contains(out, want) {
			t.Errorf("chat output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "[get_users") != 2 || strings.Contains(out, "\x1b") {
		t.Errorf("want two turns and no raw escape:\n%q", out)
	}
	// The second turn carried the first turn's history.
	msgs, _ := up.request(2)["messages"].([]any)
	if len(msgs) != 3 {
		t.Errorf("second turn sent %d messages, want 3 (user, assistant, user)", len(msgs))
	}
}

// A model that ends its turn on a client tool call is shown as such, not
// as an empty answer; -o json prints the completion object instead.
func TestChatCLIClientToolCall(t *testing.T) {
	d := startDev(t)
	up := newFakeUpstream(t, func(int, map[string]any) (int, string) {
		return 200, openAIToolCall("c1", "get_weather", map[string]any{"city": "Paris\x1b[2J"})
	})
	createGateway(t, d, map[string]any{
		"name":     "client-tools",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
	})
	out := runChat(t, d, "", "--model", "client-tools", "-m", "weather?")
	if want := `[client tool call get_weather {"city":"Paris\\u001b[2J"} not run: conch chat has no client tools]`; !strings.Contains(out, want) || strings.Contains(out, "\x1b") {
		t.Errorf("chat output lacks %q or holds a raw escape:\n%q", want, out)
	}

	out = runChat(t, d, "", "--model", "client-tools", "-m", "weather?", "-o", "json")
	var resp struct {
		Object  string `json:"object"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				ToolCalls []struct {
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Conch struct {
			ServerToolCalls []any `json:"server_tool_calls"`
		} `json:"conch"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("-o json printed something else than one JSON object: %v\n%s", err, out)
	}
	if resp.Object != "chat.completion" || len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "tool_calls" ||
		len(resp.Choices[0].Message.ToolCalls) != 1 || resp.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" ||
		resp.Conch.ServerToolCalls == nil {
		t.Errorf("-o json answer = %+v\n%s", resp, out)
	}
}

// conch chat waiting at its approval prompt notices an answer given
// elsewhere (here the REST API), says so, and moves on: the command runs
// and the turn ends though nobody typed at the prompt.
func TestChatCLIApprovalAnsweredElsewhere(t *testing.T) {
	d := startDev(t)
	createGateway(t, d, map[string]any{"name": "asks", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	command := "uname -s"
	answered := allowWhenPending(t, d, command, func(pendingApproval) {})

	// A chat that never notices the answer would wait at its prompt
	// forever: it is killed after a minute.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "chat", "--model", "asks", "--shell", "-m", "run: "+command)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	// The prompt's input stays open: only an answer from elsewhere can
	// end the wait.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("conch chat: %v\n%s", err, out)
	}
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("resolve = %d; chat said:\n%s", code, out)
	}
	for _, want := range []string{"approval needed", "answered elsewhere: allowed by key:", "Linux"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
