package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/conch-sh/conch/services/internal/toolresult"
)

// Scripted is the built-in deterministic model of `conch dev`, demos and load
// tests. When the last user message holds commands in backticks (or one after
// "run:", or a fenced script), it calls the shell tool with each in turn, then
// answers with a short summary that quotes each output; otherwise it answers
// with a short help text. It needs no network and no key.
type Scripted struct{}

var _ Provider = Scripted{}

// ScriptedHelp is the scripted model's answer when there is nothing to run.
const ScriptedHelp = "I am conch's built-in scripted model. Put a command in backticks (for example `ls -la`) " +
	"or after \"run:\" and I will run it with the shell tool and summarise what it printed."

var (
	fenced = regexp.MustCompile("(?s)```[a-zA-Z0-9_-]*\\n(.*?)```")
	inline = regexp.MustCompile("`([^`\\n]+)`")
	runPfx = regexp.MustCompile(`(?is)\brun:\s*(.+)$`)
)

// ScriptedCommands extracts the commands of a user message: a fenced block
// is one script; else each command in backticks, in order; else what follows
// "run:".
func ScriptedCommands(text string) []string {
	if m := fenced.FindStringSubmatch(text); m != nil {
		if cmd := strings.TrimSpace(m[1]); cmd != "" {
			return []string{cmd}
		}
	}
	var cmds []string
	for _, m := range inline.FindAllStringSubmatch(text, -1) {
		if cmd := strings.TrimSpace(m[1]); cmd != "" {
			cmds = append(cmds, cmd)
		}
	}
	if len(cmds) > 0 {
		return cmds
	}
	if m := runPfx.FindStringSubmatch(text); m != nil {
		if cmd := strings.TrimSpace(m[1]); cmd != "" {
			return []string{cmd}
		}
	}
	return nil
}

// Complete implements Provider.
func (Scripted) Complete(ctx context.Context, req *Request, onDelta func(string) error) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp := scriptedAnswer(req)
	var prompt int
	for _, m := range req.Messages {
		prompt += len(m.Content)/4 + 1
	}
	resp.Usage = Usage{PromptTokens: int64(prompt), CompletionTokens: int64(len(resp.Content)/4 + 1)}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	if onDelta != nil && resp.Content != "" {
		for _, w := range strings.SplitAfter(resp.Content, " ") {
			if err := onDelta(w); err != nil {
				return nil, err
			}
		}
	}
	return resp, nil
}

func scriptedAnswer(req *Request) *Response {
	id := func(s string) string {
		h := sha256.Sum256([]byte(fmt.Sprint(len(req.Messages)) + s))
		return hex.EncodeToString(h[:6])
	}
	var text string
	user := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			text, user = req.Messages[i].Content, i
			break
		}
	}
	cmds := ScriptedCommands(text)
	// The tool results since the user spoke: one per command run so far.
	var results []Message
	for _, m := range req.Messages[user+1:] {
		if m.Role == "tool" {
			results = append(results, m)
		}
	}
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" && len(results) >= len(cmds) {
		// Every command ran: summarise each.
		parts := make([]string, len(results))
		for i, r := range results {
			parts[i] = summarise(commandOf(req.Messages, r.ToolCallID), r.Content)
		}
		last := req.Messages[n-1]
		return &Response{ID: "scripted-" + id(last.Content), Content: strings.Join(parts, "\n\n"), FinishReason: "stop"}
	}
	if len(cmds) == 0 {
		return &Response{ID: "scripted-" + id(text), Content: ScriptedHelp, FinishReason: "stop"}
	}
	cmd := cmds[len(results)]
	tool, arg := "", ""
	for _, t := range req.Tools {
		switch t.Name {
		case "shell":
			tool, arg = "shell", "command"
		case "exec":
			if tool == "" {
				tool, arg = "exec", "command"
			}
		}
	}
	if tool == "" {
		return &Response{ID: "scripted-" + id(text), Content: "I would run `" + cmd + "`, but this request has no shell tool. Enable it with \"tools\": [{\"type\": \"shell\"}].", FinishReason: "stop"}
	}
	var args strings.Builder
	enc := json.NewEncoder(&args)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{arg: cmd})
	return &Response{
		ID:           "scripted-" + id(text),
		ToolCalls:    []ToolCall{{ID: "call_" + id(cmd), Name: tool, Arguments: strings.TrimSuffix(args.String(), "\n")}},
		FinishReason: "tool_calls",
	}
}

// commandOf finds the command of the tool call with id.
func commandOf(msgs []Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID == id {
				var a struct {
					Command string `json:"command"`
				}
				_ = json.Unmarshal([]byte(tc.Arguments), &a)
				return a.Command
			}
		}
	}
	return ""
}

func summarise(cmd, result string) string {
	r, err := toolresult.Decode(result)
	if err != nil {
		return "The tool answered:\n\n" + fence(result)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "I ran `%s`", cmd)
	switch r.Outcome.Type {
	case "exit":
		fmt.Fprintf(&b, " and it exited with code %d.", r.ExitCode())
	case "timeout":
		b.WriteString(" but it timed out.")
	default:
		fmt.Fprintf(&b, " but it could not run: %s", r.Error)
		return b.String()
	}
	if r.Stdout != "" {
		b.WriteString(" Output:\n\n" + fence(r.Stdout))
	} else if r.Outcome.Type == "exit" {
		b.WriteString(" It printed nothing.")
	}
	if r.Stderr != "" {
		b.WriteString("\n\nErrors:\n\n" + fence(r.Stderr))
	}
	return b.String()
}

func fence(s string) string {
	return "```\n" + strings.TrimRight(s, "\n") + "\n```"
}
