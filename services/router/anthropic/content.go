package anthropic

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/toolresult"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// The block types and names of a server tool's call and result.
const (
	// bashTool is the code execution tool's bash sub-tool: conch's shell.
	bashTool   = "bash_code_execution"
	bashResult = "bash_code_execution_tool_result"
	// editorTool is the code execution tool's file editor, conch's
	// loop.EditorTool (of the same name).
	editorTool   = loop.EditorTool
	editorResult = "text_editor_code_execution_tool_result"
	// mcpUse and mcpResult carry conch's other server tools (webhooks,
	// MCP tools, built-ins), as Anthropic's MCP connector shows the calls
	// of a server it reached: calls the server made and answered.
	mcpUse    = "mcp_tool_use"
	mcpResult = "mcp_tool_result"
	// conchServer is the server_name of those calls.
	conchServer = "conch"

	errTimeExceeded = "execution_time_exceeded"
)

// serverCallBlock is the block of a server tool call: server_tool_use for
// the shell, mcp_tool_use for conch's other tools.
func serverCallBlock(call upstream.ToolCall) map[string]any {
	if call.Name == "shell" {
		return map[string]any{"type": "server_tool_use", "id": call.ID, "name": bashTool,
			"input": map[string]any{"command": shellCommand(call.Arguments)}, "caller": map[string]any{"type": "direct"}}
	}
	if call.Name == editorTool {
		return map[string]any{"type": "server_tool_use", "id": call.ID, "name": editorTool, "input": inputOf(call.Arguments), "caller": map[string]any{"type": "direct"}}
	}
	return map[string]any{"type": mcpUse, "id": call.ID, "name": call.Name, "server_name": conchServer, "input": inputOf(call.Arguments)}
}

// editorTypes are the content types of an editor result in Anthropic's
// blocks, by the loop's EditorResult type. The fields are the same.
var editorTypes = map[string]string{
	"view":        "text_editor_code_execution_view_result",
	"create":      "text_editor_code_execution_create_result",
	"str_replace": "text_editor_code_execution_str_replace_result",
	"error":       "text_editor_code_execution_tool_result_error",
}

// editorContent turns the editor's result JSON into the content of a
// text_editor_code_execution_tool_result.
func editorContent(result string) map[string]any {
	var c map[string]any
	if json.Unmarshal([]byte(result), &c) != nil || c == nil {
		return map[string]any{"type": editorTypes["error"], "error_code": "unavailable", "error_message": result}
	}
	typ, _ := c["type"].(string)
	if editorTypes[typ] == "" {
		return map[string]any{"type": editorTypes["error"], "error_code": "unavailable", "error_message": result}
	}
	c["type"] = editorTypes[typ]
	return c
}

// serverResultBlock is the block of a server tool's result.
func serverResultBlock(call upstream.ToolCall, result string) map[string]any {
	switch call.Name {
	case "shell":
		return map[string]any{"type": bashResult, "tool_use_id": call.ID, "content": bashContent(result)}
	case editorTool:
		return map[string]any{"type": editorResult, "tool_use_id": call.ID, "content": editorContent(result)}
	}
	return map[string]any{"type": mcpResult, "tool_use_id": call.ID, "is_error": strings.HasPrefix(result, "Error:"),
		"content": []any{map[string]any{"type": "text", "text": result}}}
}

// shellCommand is the command of a shell call's arguments.
func shellCommand(arguments string) string {
	var a struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal([]byte(arguments), &a)
	return a.Command
}

// inputOf is a call's arguments as the JSON object a block's input is;
// arguments that are no object become {"arguments": "..."}.
func inputOf(arguments string) any {
	var in map[string]any
	if json.Unmarshal([]byte(arguments), &in) != nil || in == nil {
		return map[string]any{"arguments": arguments}
	}
	return in
}

// bashContent turns the shell tool's result JSON into the content of a
// bash_code_execution_tool_result: the command's output and return code,
// or a timeout as the tool's execution_time_exceeded error. A command
// conch refused or could not run has no return code of its own: it is
// reported as 126 ("cannot execute") with conch's reason on stderr, as on
// the Responses API.
func bashContent(result string) map[string]any {
	out := map[string]any{"type": "bash_code_execution_result", "stdout": "", "stderr": "", "return_code": 126, "content": []any{}}
	r, err := toolresult.Decode(result)
	if err != nil {
		out["stderr"] = "conch: " + result
		return out
	}
	out["stdout"], out["stderr"] = r.Stdout, r.Stderr
	switch r.Outcome.Type {
	case "exit":
		out["return_code"] = r.ExitCode()
	case "timeout":
		return map[string]any{"type": "bash_code_execution_tool_result_error", "error_code": errTimeExceeded}
	default:
		out["stderr"] = strings.TrimPrefix(r.Stderr+"\nconch: "+r.Error, "\n")
	}
	return out
}

// contentOf renders a completion as content blocks in the order a stream
// announces them: each turn's text, each server call followed by its
// result, and the client's calls last, as tool_use blocks.
func contentOf(res *loop.Result) []map[string]any {
	client, results := res.Answers()
	blocks := []map[string]any{}
	// A resumed turn starts with the results of the calls a paused one
	// left unanswered: their calls are in the conversation already.
	calls := map[string]upstream.ToolCall{}
	for _, c := range res.ServerToolCalls {
		calls[c.ID] = upstream.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	resumed := true
	for _, m := range res.Turn {
		if m.Role == "tool" && resumed {
			if c, ok := calls[m.ToolCallID]; ok {
				blocks = append(blocks, serverResultBlock(c, m.Content))
			}
			continue
		}
		resumed = false
		if m.Role != "assistant" {
			continue
		}
		if m.Content != "" {
			blocks = append(blocks, textBlock(m.Content))
		}
		for _, c := range m.ToolCalls {
			if client[c.ID] {
				continue
			}
			blocks = append(blocks, serverCallBlock(c))
			if out, ran := results[c.ID]; ran {
				blocks = append(blocks, serverResultBlock(c, out))
			}
		}
	}
	for _, c := range res.ToolCalls {
		blocks = append(blocks, toolUseBlock(c))
	}
	return blocks
}

func textBlock(text string) map[string]any {
	return map[string]any{"type": "text", "text": text}
}

func toolUseBlock(c upstream.ToolCall) map[string]any {
	return map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": inputOf(c.Arguments)}
}

// stopReason is Anthropic's stop_reason for a completion's finish reason.
func stopReason(finish string) string {
	switch finish {
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	case "content_filter":
		return "refusal"
	case loop.PauseTurn:
		return loop.PauseTurn
	}
	return "end_turn"
}

// usageOf is the Messages API's usage, with the server tools' counts.
func usageOf(res *loop.Result) map[string]any {
	return map[string]any{
		"input_tokens": res.Usage.PromptTokens, "output_tokens": res.Usage.CompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"server_tool_use": map[string]any{"web_search_requests": 0, "web_fetch_requests": 0, "code_execution_requests": res.ShellCommands},
		"service_tier":    "standard",
	}
}

// containerOf is the container a completion's shell ran in, with the time
// it ends unless used again (its idle lifetime); nil when none ran.
func containerOf(res *completion.Result, idle time.Duration, now time.Time) any {
	if res.Sandbox == "" {
		return nil
	}
	var skills []map[string]any // null when none, as Anthropic answers
	for _, m := range res.Skills {
		skills = append(skills, map[string]any{"type": "custom", "skill_id": m.ID, "version": m.Version})
	}
	return map[string]any{"id": res.Sandbox, "expires_at": now.Add(idle).UTC().Format(time.RFC3339), "skills": skills}
}

// message is the Messages API's answer to a completion.
func message(id, model string, cres *completion.Result, container any) map[string]any {
	res := cres.Result
	return map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": contentOf(res), "stop_reason": stopReason(res.FinishReason), "stop_sequence": nil,
		"usage": usageOf(res), "container": container, "conch": conchOf(cres),
	}
}

// conchOf is what conch adds to a message, as on the OpenAI API: its
// egress and what it says of the user's workspace.
func conchOf(cres *completion.Result) map[string]any {
	c := map[string]any{}
	if len(cres.Egress) > 0 || cres.EgressOmitted > 0 {
		c["egress"], c["egress_omitted"] = cres.Egress, cres.EgressOmitted
	}
	if cres.Workspace != nil {
		c["workspace"] = cres.Workspace
	}
	return c
}
