package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

func badField(field, format string, args ...any) *completion.FieldError {
	return completion.BadField(field, format, args...)
}

// jsonKind is the JSON type a standard request field must have.
type jsonKind int

const (
	kindNumber jsonKind = iota
	kindInteger
	kindBoolean
	kindString
	kindObject
	kindArray
	kindStringOrObject  // tool_choice, function_call
	kindStringOrStrings // stop
)

var kindWords = map[jsonKind]string{
	kindNumber:          "a number",
	kindInteger:         "an integer",
	kindBoolean:         "a boolean",
	kindString:          "a string",
	kindObject:          "an object",
	kindArray:           "an array",
	kindStringOrObject:  "a string or an object",
	kindStringOrStrings: "a string or an array of strings",
}

// standardFields are the types of the fields of OpenAI's chat completion
// request that conch passes upstream without reading. Their types are
// checked here, so a client learns which field is wrong from conch rather
// than from an upstream that may reject it obscurely or, worse, ignore it.
// Ranges are left to the upstream: they differ between providers (an
// Anthropic temperature stops at 1, OpenAI's at 2).
var standardFields = map[string]jsonKind{
	"temperature":           kindNumber,
	"top_p":                 kindNumber,
	"frequency_penalty":     kindNumber,
	"presence_penalty":      kindNumber,
	"n":                     kindInteger,
	"max_tokens":            kindInteger,
	"max_completion_tokens": kindInteger,
	"seed":                  kindInteger,
	"top_logprobs":          kindInteger,
	"logprobs":              kindBoolean,
	"parallel_tool_calls":   kindBoolean,
	"store":                 kindBoolean,
	"service_tier":          kindString,
	"reasoning_effort":      kindString,
	"verbosity":             kindString,
	"prompt_cache_key":      kindString,
	"safety_identifier":     kindString,
	"logit_bias":            kindObject,
	"metadata":              kindObject,
	"response_format":       kindObject,
	"prediction":            kindObject,
	"audio":                 kindObject,
	"web_search_options":    kindObject,
	"modalities":            kindArray,
	"functions":             kindArray,
	"tool_choice":           kindStringOrObject,
	"function_call":         kindStringOrObject,
	"stop":                  kindStringOrStrings,
}

// checkType reports a standard field whose value has the wrong JSON type.
// null is accepted for every field, as OpenAI accepts it for "not given";
// fields conch does not know pass unchecked to the upstream.
func checkType(field string, v json.RawMessage) error {
	want, ok := standardFields[field]
	if !ok {
		return nil
	}
	return checkKind(field, v, want)
}

// checkKind reports a value of field that is not of the JSON type want;
// null is accepted.
func checkKind(field string, v json.RawMessage, want jsonKind) error {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	var okType bool
	switch want {
	case kindNumber:
		var f float64
		okType = wirejson.Strict(v, &f) == nil
	case kindInteger:
		var n int64
		okType = wirejson.Strict(v, &n) == nil
	case kindBoolean:
		okType = string(v) == "true" || string(v) == "false"
	case kindString:
		okType = v[0] == '"'
	case kindObject:
		okType = v[0] == '{'
	case kindArray:
		okType = v[0] == '['
	case kindStringOrObject:
		okType = v[0] == '"' || v[0] == '{'
	case kindStringOrStrings:
		var many []string
		okType = v[0] == '"' || wirejson.Strict(v, &many) == nil
	}
	if !okType {
		return badField(field, "must be %s, got %s", kindWords[want], jsonTypeOf(v))
	}
	return nil
}

// jsonTypeOf names the JSON type of v for an error message.
func jsonTypeOf(v json.RawMessage) string {
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "the number " + string(v)
}

// chatRequest is a parsed /v1/chat/completions request.
type chatRequest struct {
	completion.Request
	Stream       bool
	IncludeUsage bool
}

// parseRequest parses and validates a request body.
func parseRequest(body []byte) (*chatRequest, error) {
	var top map[string]json.RawMessage
	if err := wirejson.Strict(body, &top); err != nil {
		return nil, badField("", "request body is not a JSON object: %v", err)
	}
	r := &chatRequest{Request: completion.Request{Extra: make(map[string]json.RawMessage, len(top))}}
	for k, v := range top {
		switch k {
		case "model":
			if wirejson.Strict(v, &r.Model) != nil || r.Model == "" {
				return nil, badField("model", "must be a non-empty string naming a gateway")
			}
		case "stream":
			if string(v) != "null" && wirejson.Strict(v, &r.Stream) != nil {
				return nil, badField("stream", "must be a boolean")
			}
		case "stream_options":
			var so struct {
				IncludeUsage *json.RawMessage `json:"include_usage"`
			}
			if string(v) != "null" && wirejson.Strict(v, &so) != nil {
				return nil, badField("stream_options", "must be an object")
			}
			if so.IncludeUsage != nil && string(*so.IncludeUsage) != "null" && wirejson.Strict(*so.IncludeUsage, &r.IncludeUsage) != nil {
				return nil, badField("stream_options.include_usage", "must be a boolean")
			}
		case "user":
			if string(v) != "null" && wirejson.Strict(v, &r.User) != nil {
				return nil, badField("user", "must be a string")
			}
			r.Extra[k] = v
		case "messages":
			msgs, err := parseMessages(v)
			if err != nil {
				return nil, err
			}
			r.Messages = msgs
		case "tools":
			if err := r.parseTools(v); err != nil {
				return nil, err
			}
		default:
			if err := checkType(k, v); err != nil {
				return nil, err
			}
			r.Extra[k] = v
		}
	}
	if r.Model == "" {
		return nil, badField("model", "is required")
	}
	if len(r.Messages) == 0 {
		return nil, badField("messages", "must be a non-empty array")
	}
	return r, nil
}

func parseMessages(raw json.RawMessage) ([]upstream.Message, error) {
	var list []json.RawMessage
	if err := wirejson.Strict(raw, &list); err != nil {
		return nil, badField("messages", "must be an array of message objects")
	}
	out := make([]upstream.Message, 0, len(list))
	for i, m := range list {
		field := fmt.Sprintf("messages[%d]", i)
		var w struct {
			Role      *string         `json:"role"`
			Content   json.RawMessage `json:"content"`
			Name      string          `json:"name"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		}
		if err := wirejson.Strict(m, &w); err != nil {
			return nil, badField(field, "must be a message object: %v", err)
		}
		if w.Role == nil {
			return nil, badField(field+".role", "is required")
		}
		switch *w.Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			return nil, badField(field+".role", "must be system, developer, user, assistant or tool, got %q", *w.Role)
		}
		if *w.Role == "tool" && w.ToolCallID == "" {
			return nil, badField(field+".tool_call_id", "is required for a tool message")
		}
		msg := upstream.Message{Role: *w.Role, Content: upstream.ContentText(w.Content), Name: w.Name, ToolCallID: w.ToolCallID, Raw: m}
		for _, tc := range w.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, upstream.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		out = append(out, msg)
	}
	return out, nil
}

func (r *chatRequest) parseTools(raw json.RawMessage) error {
	return parseToolList(raw, &r.Request, ".function.name", func(field string, t json.RawMessage) (upstream.Tool, error) {
		var fn struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := wirejson.Strict(t, &fn); err != nil {
			return upstream.Tool{}, badField(field+".function", "must be an object: %v", err)
		}
		return upstream.Tool{Name: fn.Function.Name, Description: fn.Function.Description, Parameters: fn.Function.Parameters}, nil
	}, func(field string, t json.RawMessage) error {
		sh, err := parseShellTool(field, t)
		r.Shell, r.ShellField = sh, field
		return err
	})
}

// parseToolList reads a request's tools into req: function tools (decoded
// by function, the one shape the two APIs disagree on; nameSuffix is
// where their name is, for errors) become client tools, checked the same
// way; conch's shell (parsed by shell) and exec are the server's.
func parseToolList(raw json.RawMessage, req *completion.Request, nameSuffix string,
	function func(field string, t json.RawMessage) (upstream.Tool, error), shell func(field string, t json.RawMessage) error) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	var list []json.RawMessage
	if err := wirejson.Strict(raw, &list); err != nil {
		return badField("tools", "must be an array")
	}
	seen := map[string]bool{}
	for i, t := range list {
		field := fmt.Sprintf("tools[%d]", i)
		var head struct {
			Type string `json:"type"`
		}
		if err := wirejson.Strict(t, &head); err != nil {
			return badField(field, "must be an object with a type")
		}
		switch head.Type {
		case "function":
			fn, err := function(field, t)
			if err != nil {
				return err
			}
			if err := completion.CheckClientTool(field+nameSuffix, fn.Name, seen); err != nil {
				return err
			}
			req.ClientTools = append(req.ClientTools, fn)
		case "shell":
			if req.Shell != nil {
				return badField(field, "the shell tool is given twice")
			}
			if err := shell(field, t); err != nil {
				return err
			}
		case "exec":
			req.Exec = true
		case "":
			return badField(field+".type", "is required")
		default:
			return badField(field+".type", "must be function, shell or exec, got %q", head.Type)
		}
	}
	return nil
}

// parseShellNetwork reads {"allowed_domains": [...], "ports": [...]}, a
// narrowing of the gateway's network that the completion checks.
func parseShellNetwork(field string, raw json.RawMessage) (*completion.ShellNetwork, error) {
	var fields map[string]json.RawMessage
	if err := wirejson.Strict(raw, &fields); err != nil {
		return nil, badField(field, "must be an object")
	}
	n := &completion.ShellNetwork{}
	for k, v := range fields {
		switch k {
		case "allowed_domains":
			if err := wirejson.Strict(v, &n.AllowedDomains); err != nil {
				return nil, badField(field+".allowed_domains", "must be an array of strings")
			}
			if n.AllowedDomains == nil {
				n.AllowedDomains = []string{}
			}
		case "ports":
			if err := wirejson.Strict(v, &n.Ports); err != nil {
				return nil, badField(field+".ports", "must be an array of port numbers")
			}
			if n.Ports == nil {
				n.Ports = []int32{}
			}
		default:
			return nil, badField(field+"."+k, "unknown field of the shell tool's network")
		}
	}
	return n, nil
}

func parseShellTool(field string, raw json.RawMessage) (*completion.ShellTool, error) {
	var fields map[string]json.RawMessage
	if err := wirejson.Strict(raw, &fields); err != nil {
		return nil, badField(field, "must be an object")
	}
	sh := &completion.ShellTool{}
	for k, v := range fields {
		var dst **int64
		switch k {
		case "type":
			continue
		case "max_uses":
			dst = &sh.MaxUses
		case "timeout_seconds":
			dst = &sh.TimeoutSeconds
		case "max_output_length":
			dst = &sh.MaxOutputLength
		case "network":
			if string(v) == "null" {
				continue
			}
			n, err := parseShellNetwork(field+".network", v)
			if err != nil {
				return nil, err
			}
			sh.Network = n
			continue
		default:
			return nil, badField(field+"."+k, "unknown field of the shell tool")
		}
		if string(v) == "null" {
			continue
		}
		var n int64
		if err := wirejson.Strict(v, &n); err != nil {
			return nil, badField(field+"."+k, "must be an integer")
		}
		*dst = &n
	}
	switch {
	case sh.MaxUses != nil && *sh.MaxUses < 0:
		return nil, badField(field+".max_uses", "must not be negative (0 or absent: no limit), got %d", *sh.MaxUses)
	case sh.TimeoutSeconds != nil && (*sh.TimeoutSeconds < 1 || *sh.TimeoutSeconds > 300):
		return nil, badField(field+".timeout_seconds", "must be 1 to 300, got %d", *sh.TimeoutSeconds)
	case sh.MaxOutputLength != nil && (*sh.MaxOutputLength < 1 || *sh.MaxOutputLength > contract.MaxOutputLength):
		return nil, badField(field+".max_output_length", "must be 1 to %d, got %d", contract.MaxOutputLength, *sh.MaxOutputLength)
	}
	return sh, nil
}
