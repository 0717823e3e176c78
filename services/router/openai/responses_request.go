package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

// responsesFields are the types of the Responses API's standard fields
// that conch reads or passes on; as in chat completions, a field of the
// wrong type is a 400 naming it, and a field conch does not know passes to
// the upstream unchecked.
var responsesFields = map[string]jsonKind{
	"temperature":          kindNumber,
	"top_p":                kindNumber,
	"max_output_tokens":    kindInteger,
	"parallel_tool_calls":  kindBoolean,
	"store":                kindBoolean,
	"stream":               kindBoolean,
	"background":           kindBoolean,
	"instructions":         kindString,
	"previous_response_id": kindString,
	"user":                 kindString,
	"service_tier":         kindString,
	"truncation":           kindString,
	"prompt_cache_key":     kindString,
	"safety_identifier":    kindString,
	"metadata":             kindObject,
	"text":                 kindObject,
	"reasoning":            kindObject,
	"stream_options":       kindObject,
	"include":              kindArray,
	"tool_choice":          kindStringOrObject,
}

// responsesRequest is a parsed POST /v1/responses.
type responsesRequest struct {
	completion.Request
	Stream       bool
	Store        bool
	Instructions *string
	PreviousID   string
	// Input are the request's input items, normalised (a string input is
	// one user message item), for GET .../input_items.
	Input []map[string]any
	// Top are the top-level fields the response object echoes.
	Top map[string]json.RawMessage
	// Tools are the request's tools as given, echoed in the response.
	Tools []json.RawMessage
}

// parseResponsesRequest parses and checks a request body. The messages it
// returns are this request's input only; previous_response_id is resolved
// by the caller.
func parseResponsesRequest(body []byte) (*responsesRequest, error) {
	var top map[string]json.RawMessage
	if err := wirejson.Strict(body, &top); err != nil {
		return nil, badField("", "request body is not a JSON object: %v", err)
	}
	if top == nil {
		return nil, badField("", "request body is not a JSON object")
	}
	r := &responsesRequest{Request: completion.Request{Extra: map[string]json.RawMessage{}}, Store: true, Top: top}
	for k, v := range top {
		if want, ok := responsesFields[k]; ok {
			if err := checkKind(k, v, want); err != nil {
				return nil, err
			}
		}
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		var err error
		switch k {
		case "model":
			if wirejson.Strict(v, &r.Model) != nil || r.Model == "" {
				return nil, badField("model", "must be a non-empty string naming a gateway")
			}
		case "input":
			err = r.parseInput(v)
		case "tools":
			err = r.parseTools(v)
		case "stream":
			_ = wirejson.Strict(v, &r.Stream)
		case "store":
			_ = wirejson.Strict(v, &r.Store)
		case "instructions":
			r.Instructions = new(string)
			_ = wirejson.Strict(v, r.Instructions)
		case "previous_response_id":
			_ = wirejson.Strict(v, &r.PreviousID)
		case "user":
			_ = wirejson.Strict(v, &r.User)
			r.Extra["user"] = v
		case "max_output_tokens":
			r.Extra["max_completion_tokens"] = v
		case "tool_choice":
			err = r.toolChoice(v)
		case "text":
			err = r.textFormat(v)
		case "reasoning":
			var rs struct {
				Effort json.RawMessage `json:"effort"`
			}
			if wirejson.Strict(v, &rs) == nil && len(rs.Effort) > 0 && string(rs.Effort) != "null" {
				r.Extra["reasoning_effort"] = rs.Effort
			}
		case "temperature", "top_p", "parallel_tool_calls", "service_tier", "prompt_cache_key", "safety_identifier":
			r.Extra[k] = v
		case "background":
			if string(v) == "true" {
				return nil, badField("background", "conch answers every response in the request; send it without background")
			}
		case "metadata", "include", "truncation", "stream_options":
			// Conch's own, or the Responses API's only: not for a chat
			// completions upstream.
		default:
			r.Extra[k] = v
		}
		if err != nil {
			return nil, err
		}
	}
	if r.Model == "" {
		return nil, badField("model", "is required")
	}
	if len(r.Messages) == 0 && r.PreviousID == "" {
		return nil, badField("input", "is required")
	}
	return r, nil
}

// toolChoice maps the Responses API's tool_choice to chat completions'.
func (r *responsesRequest) toolChoice(v json.RawMessage) error {
	if v[0] == '"' {
		r.Extra["tool_choice"] = v
		return nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := wirejson.Strict(v, &tc); err != nil {
		return badField("tool_choice", "must be a string or an object with a type")
	}
	switch tc.Type {
	case "function":
		if tc.Name == "" {
			return badField("tool_choice.name", "is required for a function")
		}
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		r.Extra["tool_choice"] = b
	case "shell":
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": "shell"}})
		r.Extra["tool_choice"] = b
	default:
		return badField("tool_choice.type", "must be function or shell, got %q", tc.Type)
	}
	return nil
}

// textFormat maps text.format to chat completions' response_format.
func (r *responsesRequest) textFormat(v json.RawMessage) error {
	var t struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"format"`
	}
	if err := wirejson.Strict(v, &t); err != nil {
		return badField("text", "must be an object with a format")
	}
	if t.Format == nil {
		return nil
	}
	switch t.Format.Type {
	case "text":
	case "json_object":
		r.Extra["response_format"] = json.RawMessage(`{"type":"json_object"}`)
	case "json_schema":
		schema := map[string]any{"name": t.Format.Name, "schema": t.Format.Schema}
		if t.Format.Strict != nil {
			schema["strict"] = *t.Format.Strict
		}
		b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": schema})
		r.Extra["response_format"] = b
	default:
		return badField("text.format.type", "must be text, json_object or json_schema, got %q", t.Format.Type)
	}
	return nil
}

func (r *responsesRequest) parseTools(raw json.RawMessage) error {
	if err := wirejson.Strict(raw, &r.Tools); err != nil {
		return badField("tools", "must be an array")
	}
	return parseToolList(raw, &r.Request, ".name", func(field string, t json.RawMessage) (upstream.Tool, error) {
		var fn struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := wirejson.Strict(t, &fn); err != nil {
			return upstream.Tool{}, badField(field, "must be a function tool: %v", err)
		}
		return upstream.Tool{Name: fn.Name, Description: fn.Description, Parameters: fn.Parameters}, nil
	}, r.parseShell)
}

// parseShell reads {"type": "shell", "environment": {...}} with conch's
// limits.
func (r *responsesRequest) parseShell(field string, raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := wirejson.Strict(raw, &fields); err != nil {
		return badField(field, "must be an object")
	}
	env := fields["environment"]
	delete(fields, "environment")
	// The rest are the limits chat completions' shell tool takes.
	limits, _ := json.Marshal(fields)
	sh, err := parseShellTool(field, limits)
	if err != nil {
		return err
	}
	r.Shell, r.ShellField = sh, field
	if len(env) == 0 || string(env) == "null" {
		return nil
	}
	var e struct {
		Type        string          `json:"type"`
		ContainerID string          `json:"container_id"`
		Skills      json.RawMessage `json:"skills"`
	}
	if err := wirejson.Strict(env, &e); err != nil {
		return badField(field+".environment", "must be an object with a type")
	}
	switch e.Type {
	case "container_auto":
		// The container made for the request mounts them.
		if r.Skills, err = ParseSkillReferences(field+".environment.skills", e.Skills); err != nil {
			return err
		}
		r.SkillsField = field + ".environment.skills"
	case "container_reference":
		if e.ContainerID == "" {
			return badField(field+".environment.container_id", "is required for a container_reference")
		}
		r.Container, r.ContainerField = e.ContainerID, field+".environment.container_id"
	case "local":
		r.ShellLocal = true
	default:
		return badField(field+".environment.type", "must be container_auto, container_reference or local, got %q", e.Type)
	}
	return nil
}

// parseInput reads input: a string (one user message) or a list of items.
func (r *responsesRequest) parseInput(raw json.RawMessage) error {
	if raw[0] == '"' {
		var text string
		_ = wirejson.Strict(raw, &text)
		r.Input = []map[string]any{{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}}
		r.Messages = []upstream.Message{{Role: "user", Content: text}}
		return nil
	}
	var items []json.RawMessage
	if err := wirejson.Strict(raw, &items); err != nil {
		return badField("input", "must be a string or an array of items")
	}
	c := &conversation{}
	for i, item := range items {
		field := fmt.Sprintf("input[%d]", i)
		var m map[string]any
		if err := wirejson.Strict(item, &m); err != nil {
			return badField(field, "must be an object")
		}
		if err := c.add(field, m); err != nil {
			return err
		}
		r.Input = append(r.Input, m)
	}
	r.Messages = c.msgs
	return nil
}

// conversation turns Responses API items into chat messages: calls join
// the assistant message just before them, results follow as tool
// messages.
type conversation struct {
	msgs []upstream.Message
	// open says the last message is an assistant message that calls may
	// still join.
	open bool
}

func (c *conversation) call(tc upstream.ToolCall) {
	if !c.open {
		c.msgs = append(c.msgs, upstream.Message{Role: "assistant"})
		c.open = true
	}
	last := &c.msgs[len(c.msgs)-1]
	last.ToolCalls = append(last.ToolCalls, tc)
}

func (c *conversation) result(id, content string) {
	c.msgs = append(c.msgs, upstream.Message{Role: "tool", ToolCallID: id, Content: content})
	c.open = false
}

func (c *conversation) add(field string, m map[string]any) error {
	str := func(k string) string { s, _ := m[k].(string); return s }
	typ := str("type")
	if typ == "" && m["role"] != nil {
		typ = "message"
	}
	switch typ {
	case "message":
		role := str("role")
		switch role {
		case "user", "system", "developer", "assistant":
		default:
			return badField(field+".role", "must be user, system, developer or assistant, got %q", role)
		}
		text, err := contentText(field+".content", m["content"])
		if err != nil {
			return err
		}
		c.msgs = append(c.msgs, upstream.Message{Role: role, Content: text})
		c.open = role == "assistant"
	case "function_call":
		if str("call_id") == "" || str("name") == "" {
			return badField(field, "a function_call needs call_id and name")
		}
		c.call(upstream.ToolCall{ID: str("call_id"), Name: str("name"), Arguments: str("arguments")})
	case "function_call_output":
		if str("call_id") == "" {
			return badField(field+".call_id", "is required")
		}
		text, err := contentText(field+".output", m["output"])
		if err != nil {
			return err
		}
		c.result(str("call_id"), text)
	case "shell_call":
		var action struct {
			Commands []string `json:"commands"`
		}
		b, _ := json.Marshal(m["action"])
		if wirejson.Strict(b, &action) != nil || len(action.Commands) == 0 || str("call_id") == "" {
			return badField(field, "a shell_call needs call_id and action.commands")
		}
		args, _ := json.Marshal(map[string]string{"command": strings.Join(action.Commands, "\n")})
		c.call(upstream.ToolCall{ID: str("call_id"), Name: "shell", Arguments: string(args)})
	case "shell_call_output":
		if str("call_id") == "" {
			return badField(field+".call_id", "is required")
		}
		out, err := shellOutputResult(field+".output", m["output"])
		if err != nil {
			return err
		}
		c.result(str("call_id"), out)
	case "mcp_call":
		// A server tool conch ran, echoed back by the client.
		if str("id") == "" || str("name") == "" {
			return badField(field, "an mcp_call needs id and name")
		}
		c.call(upstream.ToolCall{ID: str("id"), Name: str("name"), Arguments: str("arguments")})
		out := str("output")
		if e := str("error"); e != "" {
			out = "Error: " + e
		}
		c.result(str("id"), out)
	case "reasoning":
		// Reasoning items cannot be given back to a chat completions
		// upstream; the model reasons again.
	default:
		return badField(field+".type", "must be message, function_call, function_call_output, shell_call, shell_call_output, mcp_call or reasoning, got %q", typ)
	}
	return nil
}

// contentText is the text of a message's content: a string or a list of
// text parts.
func contentText(field string, v any) (string, error) {
	switch c := v.(type) {
	case string:
		return c, nil
	case nil:
		return "", nil
	case []any:
		var b strings.Builder
		for i, p := range c {
			part, _ := p.(map[string]any)
			typ, _ := part["type"].(string)
			switch typ {
			case "input_text", "output_text", "text":
				text, _ := part["text"].(string)
				b.WriteString(text)
			case "refusal":
				text, _ := part["refusal"].(string)
				b.WriteString(text)
			default:
				return "", badField(fmt.Sprintf("%s[%d].type", field, i), "must be input_text or output_text, got %q (conch passes text only)", typ)
			}
		}
		return b.String(), nil
	}
	return "", badField(field, "must be a string or an array of content parts")
}

// shellOutputResult is a shell_call_output's output as the shell tool's
// result JSON, the shape the model sees for a command conch runs.
func shellOutputResult(field string, v any) (string, error) {
	b, _ := json.Marshal(v)
	var outs []struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Outcome struct {
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
		} `json:"outcome"`
	}
	if err := wirejson.Strict(b, &outs); err != nil {
		return "", badField(field, "must be an array of {stdout, stderr, outcome}")
	}
	var res struct {
		Stdout  string         `json:"stdout"`
		Stderr  string         `json:"stderr"`
		Outcome map[string]any `json:"outcome"`
	}
	res.Outcome = map[string]any{"type": "exit", "exit_code": 0}
	for _, o := range outs {
		res.Stdout += o.Stdout
		res.Stderr += o.Stderr
		switch o.Outcome.Type {
		case "timeout":
			res.Outcome = map[string]any{"type": "timeout"}
		case "exit":
			code := 0
			if o.Outcome.ExitCode != nil {
				code = *o.Outcome.ExitCode
			}
			res.Outcome = map[string]any{"type": "exit", "exit_code": code}
		default:
			return "", badField(field, "outcome.type must be exit or timeout, got %q", o.Outcome.Type)
		}
	}
	out, _ := json.Marshal(res)
	return string(out), nil
}
