package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// jsonSets adds raw top-level fields to a request.
func jsonSets(m map[string]any) []option.RequestOption {
	var opts []option.RequestOption
	for k, v := range m {
		opts = append(opts, option.WithJSONSet(k, v))
	}
	return opts
}

// turnScript is a fake upstream that, in each completion, runs the next
// command once and then answers "done".
func turnScript(t *testing.T, commands ...string) *fakeUpstream {
	t.Helper()
	next := 0
	return newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		if last["role"] == "tool" || next >= len(commands) {
			return 200, openAIText("done")
		}
		next++
		return 200, openAIToolCall(fmt.Sprintf("call_%d", n), "shell", map[string]string{"command": commands[next-1]})
	})
}

// shellScript is a fake upstream that calls the shell once per command, in
// order, then answers "done".
func shellScript(t *testing.T, commands ...string) *fakeUpstream {
	t.Helper()
	return newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n < len(commands) {
			return 200, openAIToolCall(fmt.Sprintf("call_%d", n), "shell", map[string]string{"command": commands[n]})
		}
		return 200, openAIText("done")
	})
}

type shellResult struct {
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Error   string `json:"error"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode *int   `json:"exit_code"`
	} `json:"outcome"`
}

// completeShell runs one completion on gateway and returns each shell
// result.
func completeShell(t *testing.T, d *dev, gateway string, body map[string]any, opts ...option.RequestOption) ([]shellResult, *openai.ChatCompletion) {
	t.Helper()
	c := client(d, opts...)
	params := openai.ChatCompletionNewParams{Model: gateway, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")}}
	resp, err := c.Chat.Completions.New(t.Context(), params, jsonSets(body)...)
	if err != nil {
		t.Fatal(err)
	}
	var conch struct {
		ServerToolCalls []struct{ Name, Result string } `json:"server_tool_calls"`
	}
	if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil {
		t.Fatal(err)
	}
	var out []shellResult
	for _, c := range conch.ServerToolCalls {
		var r shellResult
		if err := json.Unmarshal([]byte(c.Result), &r); err != nil {
			t.Fatalf("result %q: %v", c.Result, err)
		}
		out = append(out, r)
	}
	return out, resp
}

func TestMovedTools(t *testing.T) {
	d := startDev(t)
	hook, _ := startWebhook(t)
	mcpSrv := startMCP(t)
	tools := map[string]any{
		"webhooks": []any{map[string]any{
			"name": "get_users", "description": "List the users of the CRM.", "url": hook.URL,
			"parameters_schema": `{"type":"object","properties":{"filter":{"type":"string","enum":["active","inactive","explode"],"description":"which users"},"format":{"type":"string","default":"json"}},"required":["filter"]}`,
		}},
		"mcp_servers": []any{map[string]any{"name": "calc", "url": mcpSrv.URL}},
	}
	commands := []string{
		"get-users --help",
		`get-users --filter active --format csv | grep "John Doe" | awk -F, '{print $1, $2}'`,
		"get_users --filter everyone",
		"get-users --filter active --nope 1",
		"add --a 2 --b 40",
		"get-users --filter explode",
		"ls /run/conch/tools | sort | tr '\\n' ' '",
	}
	up := shellScript(t, commands...)
	createGateway(t, d, map[string]any{
		"name":     "crm",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
		"shell":    map[string]any{"enabled": true, "tools": map[string]any{"mode": "blacklist", "names": []string{}}},
		"tools":    tools,
	})
	results, _ := completeShell(t, d, "crm", nil)
	if len(results) != len(commands) {
		t.Fatalf("got %d results: %+v", len(results), results)
	}
	check := func(i int, code int, stdout, stderr string) {
		t.Helper()
		r := results[i]
		if r.Outcome.Type != "exit" || r.Outcome.ExitCode == nil || *r.Outcome.ExitCode != code ||
			!strings.Contains(r.Stdout, stdout) || !strings.Contains(r.Stderr, stderr) {
			t.Errorf("%q = %+v (exit %v), want exit %d, stdout with %q, stderr with %q", commands[i], r, r.Outcome.ExitCode, code, stdout, stderr)
		}
	}
	check(0, 0, "--filter string", "")
	check(0, 0, "List the users of the CRM.", "")
	check(0, 0, "one of: active, inactive, explode", "")
	check(1, 0, "1 John Doe\n", "")
	check(2, 2, "", "not one of active, inactive, explode")
	check(3, 2, "", "unknown flag --nope")
	check(4, 0, "42", "")
	check(5, 1, "", "user directory is down")
	check(6, 0, "add get-users get_users manifest.json sock", "")

	// The model sees the moved tools in the shell's description, not as
	// functions.
	toolsSent, _ := up.request(0)["tools"].([]any)
	if len(toolsSent) != 1 {
		t.Errorf("model was offered %d tools, want only shell: %v", len(toolsSent), toolsSent)
	}
	desc := toJSON(toolsSent[0])
	if !strings.Contains(desc, "get_users") || !strings.Contains(desc, "add") {
		t.Errorf("shell description does not name the commands: %s", desc)
	}

	// whitelist moves only the listed tools; the others stay functions.
	up2 := shellScript(t, "ls /run/conch/tools | tr '\\n' ' '")
	createGateway(t, d, map[string]any{
		"name":     "crm2",
		"upstream": map[string]any{"provider": "openai", "base_url": up2.URL, "model": "m"},
		"shell":    map[string]any{"enabled": true, "tools": map[string]any{"mode": "whitelist", "names": []string{"add"}}},
		"tools":    tools,
	})
	results, _ = completeShell(t, d, "crm2", nil)
	if len(results) != 1 || strings.Contains(results[0].Stdout, "get") || !strings.Contains(results[0].Stdout, "add") {
		t.Errorf("whitelist sandbox tools = %+v", results)
	}
	names := map[string]bool{}
	toolsSent, _ = up2.request(0)["tools"].([]any)
	for _, tl := range toolsSent {
		fn, _ := tl.(map[string]any)["function"].(map[string]any)
		names[fn["name"].(string)] = true
	}
	if !names["shell"] || !names["get_users"] || names["add"] {
		t.Errorf("whitelist model tools = %v, want shell and get_users", names)
	}
}

// TestMovedToolsAutoAllowed runs moved tools' commands in allowlist mode
// without an allowlist entry exactly when the agent's autoAllowSkills is on.
func TestMovedToolsAutoAllowed(t *testing.T) {
	d := startDev(t)
	mcpSrv := startMCP(t)
	for _, auto := range []bool{true, false} {
		name := fmt.Sprintf("skills-%v", auto)
		up := shellScript(t, "add --a 2 --b 40")
		createGateway(t, d, map[string]any{
			"name":     name,
			"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
			"shell":    map[string]any{"enabled": true, "tools": map[string]any{"mode": "blacklist", "names": []string{}}},
			"tools":    map[string]any{"mcp_servers": []any{map[string]any{"name": "calc", "url": mcpSrv.URL}}},
			"exec":     map[string]any{"security": "allowlist", "ask": "off"},
		})
		code, body := d.call("GET", "/api/v1/exec-approvals", d.Key, nil)
		var doc map[string]any
		if code != 200 || json.Unmarshal(body, &doc) != nil {
			t.Fatalf("get exec-approvals = %d %s", code, body)
		}
		agents, _ := doc["agents"].(map[string]any)
		if agents == nil {
			agents = map[string]any{}
		}
		agents[name] = map[string]any{"autoAllowSkills": auto}
		doc["agents"] = agents
		if code, body := d.call("PUT", "/api/v1/exec-approvals", d.Key, doc); code != 200 {
			t.Fatalf("put exec-approvals = %d %s", code, body)
		}
		results, _ := completeShell(t, d, name, nil)
		if len(results) != 1 {
			t.Fatalf("%s: %+v", name, results)
		}
		r := results[0]
		ran := r.Outcome.Type == "exit" && strings.Contains(r.Stdout, "42")
		if ran != auto || (!auto && !strings.Contains(r.Error, "Command not allowed by exec policy")) {
			t.Errorf("autoAllowSkills %v: %+v", auto, r)
		}
	}
}
