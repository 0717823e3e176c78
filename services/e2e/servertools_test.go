package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
)

// startWebhook serves get_users: it answers CSV filtered by the posted
// arguments and records the Authorization header it got.
func startWebhook(t *testing.T) (*httptest.Server, *string) {
	t.Helper()
	var auth string
	srv := serveModel(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		var args struct {
			Filter string `json:"filter"`
			Format string `json:"format"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &args); err != nil {
			http.Error(w, "bad arguments", 400)
			return
		}
		if args.Filter == "explode" {
			http.Error(w, "user directory is down", 503)
			return
		}
		fmt.Fprint(w, "id,name,status\n1,John Doe,active\n2,Jane Roe,active\n")
	}))
	return srv, &auth
}

// startMCP serves an MCP server with one tool, add.
func startMCP(t *testing.T) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "v1"}, nil)
	type in struct {
		A int `json:"a" jsonschema:"first addend"`
		B int `json:"b" jsonschema:"second addend"`
	}
	type out struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers"}, func(_ context.Context, _ *mcp.CallToolRequest, i in) (*mcp.CallToolResult, out, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(i.A + i.B)}}}, out{Sum: i.A + i.B}, nil
	})
	srv := serveModel(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	return srv
}

// TestDirectServerTools checks webhook, MCP, skill and built-in tools offered
// to the model directly and run by the router's loop.
func TestDirectServerTools(t *testing.T) {
	d := startDev(t)
	hook, hookAuth := startWebhook(t)
	mcpSrv := startMCP(t)

	calls := []struct{ name, args string }{
		{"get_users", `{"filter":"active"}`},
		{"get_users", `{"filter":5}`},
		{"get_users", `{"filter":"explode"}`},
		{"add", `{"a":2,"b":3}`},
		{"read_skill", `{"name":"deploy"}`},
		{"request", `{"url":"http://127.0.0.1:1/"}`},
		{"request", `{"url":"http://internal.example.com/","method":"GET"}`},
	}
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n < len(calls) {
			return 200, openAIToolCall(fmt.Sprintf("call_%d", n), calls[n].name, json.RawMessage(calls[n].args))
		}
		return 200, openAIText("done")
	})
	createGateway(t, d, map[string]any{
		"name":     "tools",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
		"tools": map[string]any{
			"webhooks": []any{map[string]any{
				"name": "get_users", "description": "List users", "url": hook.URL, "headers": map[string]string{"Authorization": "Bearer hook-secret"},
				"parameters_schema": `{"type":"object","properties":{"filter":{"type":"string"},"format":{"type":"string","enum":["csv","json"]}}}`,
			}},
			"mcp_servers": []any{map[string]any{"name": "calc", "url": mcpSrv.URL}},
			"builtins":    map[string]any{"request": true, "allowed_domains": []string{"*.example.com"}},
		},
		"skills": []any{map[string]any{"name": "deploy", "description": "How to deploy", "content": "1. build\n2. ship"}},
	})

	c := client(d)
	resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "tools", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "done" {
		t.Fatalf("answer = %q", resp.Choices[0].Message.Content)
	}
	var conch struct {
		ServerToolCalls []struct{ ID, Name, Arguments, Result string } `json:"server_tool_calls"`
	}
	if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"1,John Doe,active",
		"Error: arguments of get_users",
		"Error: HTTP 503: user directory is down",
		"5",
		"1. build\n2. ship",
		"Error: url: 127.0.0.1 is not in the gateway's allowed domains",
		"Error: request failed", // resolves to nothing reachable or public: refused either way
	}
	if len(conch.ServerToolCalls) != len(want) {
		t.Fatalf("server_tool_calls = %+v", conch.ServerToolCalls)
	}
	for i, w := range want {
		if got := conch.ServerToolCalls[i].Result; !strings.Contains(got, w) {
			t.Errorf("call %d (%s) result = %q, want it to contain %q", i, calls[i].name, got, w)
		}
	}
	if *hookAuth != "Bearer hook-secret" {
		t.Errorf("webhook got Authorization %q", *hookAuth)
	}
	// The model saw every result, and the tools as functions.
	if got := lastToolResult(up.request(4)); got != "5" {
		t.Errorf("tool message after add = %q", got)
	}
	tools, _ := up.request(0)["tools"].([]any)
	names := map[string]bool{}
	for _, tl := range tools {
		fn, _ := tl.(map[string]any)["function"].(map[string]any)
		names[fn["name"].(string)] = true
	}
	for _, n := range []string{"get_users", "add", "read_skill", "request"} {
		if !names[n] {
			t.Errorf("model was not offered %s; got %v", n, names)
		}
	}
}
