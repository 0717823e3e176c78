package openai

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Output items come in the order a stream announces them: a turn's text,
// each server call followed by its result (even when the model made
// several at once), the client's calls last.
func TestOutputItemsOrder(t *testing.T) {
	t.Parallel()
	sh := func(id, cmd string) upstream.ToolCall {
		return upstream.ToolCall{ID: id, Name: "shell", Arguments: `{"command":"` + cmd + `"}`}
	}
	client := upstream.ToolCall{ID: "c1", Name: "get_weather", Arguments: "{}"}
	res := &completion.Result{Sandbox: "sb-1", Result: &loop.Result{
		ToolCalls: []upstream.ToolCall{client},
		Turn: []upstream.Message{
			{Role: "assistant", Content: "two at once", ToolCalls: []upstream.ToolCall{sh("s1", "ls"), sh("s2", "rm x"), {ID: "w1", Name: "get_users", Arguments: "{}"}}},
			{Role: "tool", ToolCallID: "s1", Content: `{"stdout":"a\n","stderr":"","outcome":{"type":"exit","exit_code":0}}`},
			{Role: "tool", ToolCallID: "s2", Content: `{"stdout":"","stderr":"","outcome":{"type":"error"},"error":"Command not allowed"}`},
			{Role: "tool", ToolCallID: "w1", Content: "1,John"},
			{Role: "assistant", Content: "now yours", ToolCalls: []upstream.ToolCall{client}},
		},
	}}
	items := outputItems(res, &itemIDs{response: "resp_1"}, newShellView(res.Sandbox, &loop.Shell{TimeoutSeconds: 5, MaxOutputLength: 100}, false, true))
	var got []string
	for _, it := range items {
		d := it["type"].(string)
		if c, ok := it["call_id"].(string); ok {
			d += ":" + c
		}
		got = append(got, d)
	}
	want := "message,shell_call:s1,shell_call_output:s1,shell_call:s2,shell_call_output:s2,mcp_call,message,function_call:c1"
	if strings.Join(got, ",") != want {
		t.Fatalf("items\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	refused := items[4]["output"].([]any)[0].(map[string]any)
	if refused["stderr"] != "conch: Command not allowed" || refused["outcome"].(map[string]any)["exit_code"] != 126 {
		t.Errorf("a refused command reads %v", refused)
	}
	if items[5]["output"] != "1,John" || items[5]["status"] != "completed" {
		t.Errorf("server tool item %v", items[5])
	}
	// A shell the client did not declare is the gateway's: its calls are
	// conch's server calls, with the result as their output.
	undeclared := outputItems(res, &itemIDs{response: "resp_1"}, newShellView(res.Sandbox, nil, false, false))
	var kinds []string
	for _, it := range undeclared {
		kinds = append(kinds, it["type"].(string))
	}
	if want := "message,mcp_call,mcp_call,mcp_call,message,function_call"; strings.Join(kinds, ",") != want {
		t.Fatalf("items of an undeclared shell %s, want %s", strings.Join(kinds, ","), want)
	}
	if it := undeclared[1]; it["name"] != "shell" || it["server_label"] != "conch" || it["arguments"] != `{"command":"ls"}` || !strings.Contains(it["output"].(string), `"stdout":"a\n"`) {
		t.Errorf("an undeclared shell's call %v", it)
	}
	// Ids are the response's: the same on every rendering, distinct.
	again := outputItems(res, &itemIDs{response: "resp_1"}, newShellView(res.Sandbox, nil, false, true))
	seen := map[any]bool{}
	for i := range items {
		if items[i]["id"] != again[i]["id"] || seen[items[i]["id"]] {
			t.Fatalf("item %d id %v / %v", i, items[i]["id"], again[i]["id"])
		}
		seen[items[i]["id"]] = true
	}
}
