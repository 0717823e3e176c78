package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/conch-sh/conch/services/internal/toolresult"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// itemIDs names a response's output items: the n-th item of response id
// always gets the same id, so the items a stream announced are those of
// the finished response.
type itemIDs struct {
	response string
	n        int
}

func (ids *itemIDs) next(prefix string) string {
	sum := sha256.Sum256([]byte(ids.response + "/" + strconv.Itoa(ids.n)))
	ids.n++
	return prefix + hex.EncodeToString(sum[:12])
}

// shellView describes the shell for output items: its limits, where it
// ran, and how its calls appear.
type shellView struct {
	timeoutMS, maxOutput int64
	// environment is the shell_call's environment: the container the
	// shell ran in, or the client's machine.
	environment map[string]any
	// declared says the client declared the shell tool. Its calls are
	// then OpenAI's shell_call and shell_call_output items. A shell only
	// the gateway enables is conch's, as its other server tools are: its
	// calls are mcp_call items of server "conch", which SDKs read as
	// calls the server made and answered (a shell_call the client never
	// declared reads to the Agents SDK as an action it must run, and it
	// fails).
	declared bool
}

// newShellView is the view of a shell (nil: none) that ran in sandbox
// ("" until known), or on the client's machine when local.
func newShellView(sandbox string, sh *loop.Shell, local, declared bool) shellView {
	v := shellView{environment: map[string]any{"type": "container_reference", "container_id": sandbox}, declared: declared || local}
	if local {
		v.environment = map[string]any{"type": "local"}
	}
	if sh != nil {
		v.timeoutMS, v.maxOutput = int64(sh.TimeoutSeconds)*1000, int64(sh.MaxOutputLength)
	}
	return v
}

// messageItem is an assistant message of output text.
func messageItem(id, text, status string) map[string]any {
	content := []any{}
	if status == "completed" || text != "" {
		content = append(content, outputText(text))
	}
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// shellCommand is the command of a shell tool call's arguments.
func shellCommand(arguments string) string {
	var a struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal([]byte(arguments), &a)
	return a.Command
}

func shellCallItem(id string, call upstream.ToolCall, sh shellView, status string) map[string]any {
	return map[string]any{
		"type": "shell_call", "id": id, "call_id": call.ID, "status": status,
		"action":      map[string]any{"commands": []string{shellCommand(call.Arguments)}, "timeout_ms": sh.timeoutMS, "max_output_length": sh.maxOutput},
		"environment": sh.environment,
	}
}

// shellOutputItem turns the shell tool's result JSON into OpenAI's
// shell_call_output. A command conch refused or could not run has no exit
// in OpenAI's terms: it is reported as exit code 126 ("cannot execute")
// with conch's reason on stderr.
func shellOutputItem(id, callID, result string, sh shellView) map[string]any {
	out := map[string]any{"stdout": "", "stderr": "", "outcome": map[string]any{"type": "exit", "exit_code": 126}}
	if r, err := toolresult.Decode(result); err != nil {
		out["stderr"] = "conch: " + result
	} else {
		out["stdout"], out["stderr"] = r.Stdout, r.Stderr
		switch r.Outcome.Type {
		case "exit":
			out["outcome"] = map[string]any{"type": "exit", "exit_code": r.ExitCode()}
		case "timeout":
			out["outcome"] = map[string]any{"type": "timeout"}
		default:
			out["stderr"] = strings.TrimPrefix(r.Stderr+"\nconch: "+r.Error, "\n")
		}
	}
	return map[string]any{"type": "shell_call_output", "id": id, "call_id": callID, "status": "completed", "output": []any{out}, "max_output_length": sh.maxOutput}
}

// serverToolItem is a server tool other than the shell (a webhook, an MCP
// tool, a built-in, exec, read_skill) with its result, as OpenAI's
// mcp_call: a call the server made and answered itself.
func serverToolItem(id string, call upstream.ToolCall, output *string) map[string]any {
	item := map[string]any{"type": "mcp_call", "id": id, "server_label": "conch", "name": call.Name, "arguments": call.Arguments, "output": nil, "error": nil, "status": "in_progress"}
	if output != nil {
		item["output"], item["status"] = *output, "completed"
	}
	return item
}

func functionCallItem(id string, call upstream.ToolCall, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": call.ID, "name": call.Name, "arguments": call.Arguments, "status": status}
}

// outputItems renders a completion as output items, in the order a stream
// announces them: each turn's text, each server call followed by its
// result, and the client's calls last.
func outputItems(res *completion.Result, ids *itemIDs, sh shellView) []map[string]any {
	client, results := res.Answers()
	items := []map[string]any{}
	for _, m := range res.Turn {
		if m.Role != "assistant" {
			continue
		}
		if m.Content != "" {
			items = append(items, messageItem(ids.next("msg_"), m.Content, "completed"))
		}
		for _, c := range m.ToolCalls {
			if client[c.ID] {
				continue
			}
			out, ran := results[c.ID]
			if c.Name == "shell" && sh.declared {
				items = append(items, shellCallItem(ids.next("sh_"), c, sh, "completed"))
				if ran {
					items = append(items, shellOutputItem(ids.next("sho_"), c.ID, out, sh))
				}
				continue
			}
			var output *string
			if ran {
				output = &out
			}
			items = append(items, serverToolItem(ids.next("mcp_"), c, output))
		}
	}
	for _, c := range res.ToolCalls {
		items = append(items, clientCallItem(ids, c, sh))
	}
	return items
}

// clientCallItem is a call the client answers: a function, or a shell
// command the client runs.
func clientCallItem(ids *itemIDs, c upstream.ToolCall, sh shellView) map[string]any {
	if c.Name == "shell" {
		return shellCallItem(ids.next("sh_"), c, sh, "completed")
	}
	return functionCallItem(ids.next("fc_"), c, "completed")
}

// responseUsage is the Responses API's usage, with conch's count of shell
// commands.
func responseUsage(res *loop.Result) map[string]any {
	u := res.Usage
	return map[string]any{
		"input_tokens": u.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": u.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": u.TotalTokens, "server_tool_use": map[string]any{"shell_commands": res.ShellCommands},
	}
}

// statusOf is a finished response's status and incomplete_details.
func statusOf(res *loop.Result) (string, any) {
	switch res.FinishReason {
	case "length":
		return "incomplete", map[string]any{"reason": "max_output_tokens"}
	case "content_filter":
		return "incomplete", map[string]any{"reason": "content_filter"}
	}
	return "completed", nil
}

// outputTextOf joins the text of the output's messages, as the SDKs'
// output_text does.
func outputTextOf(items []map[string]any) string {
	var parts []string
	for _, it := range items {
		if it["type"] != "message" {
			continue
		}
		for _, c := range it["content"].([]any) {
			if p, ok := c.(map[string]any); ok && p["type"] == "output_text" {
				parts = append(parts, p["text"].(string))
			}
		}
	}
	return strings.Join(parts, "")
}
