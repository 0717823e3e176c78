package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Scripted is the built-in deterministic model of `conch dev` and demos. When
// the last user message holds a command in backticks (or after "run:"), it
// calls the shell tool with it, then answers with a short summary that quotes
// the output; otherwise it answers with a short help text. It needs no
// network and no key.
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

// ScriptedCommand extracts the command of a user message, if any.
func ScriptedCommand(text string) (string, bool) {
	for _, re := range []*regexp.Regexp{fenced, inline, runPfx} {
		if m := re.FindStringSubmatch(text); m != nil {
			if cmd := strings.TrimSpace(m[1]); cmd != "" {
				return cmd, true
			}
		}
	}
	return "", false
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
	// After a tool result, summarise it.
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
		last := req.Messages[n-1]
		return &Response{ID: "scripted-" + id(last.Content), Content: summarise(commandOf(req.Messages, last.ToolCallID), last.Content), FinishReason: "stop"}
	}
	var text string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			text = req.Messages[i].Content
			break
		}
	}
	cmd, ok := ScriptedCommand(text)
	if !ok {
		return &Response{ID: "scripted-" + id(text), Content: ScriptedHelp, FinishReason: "stop"}
	}
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
	var r struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Error   string `json:"error"`
		Outcome struct {
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
		} `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(result), &r); err != nil {
		return "The tool answered:\n\n" + fence(result)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "I ran `%s`", cmd)
	switch r.Outcome.Type {
	case "exit":
		code := 0
		if r.Outcome.ExitCode != nil {
			code = *r.Outcome.ExitCode
		}
		fmt.Fprintf(&b, " and it exited with code %d.", code)
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
