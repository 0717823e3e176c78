package anthropic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// codeExecutionTools are the versions of Anthropic's code execution tool
// that give the model bash in a container: conch runs them in its
// sandbox. The first one, code_execution_20250522, ran Python only and is
// refused with a pointer to these.
var codeExecutionTools = map[string]bool{
	"code_execution_20250825": true,
	"code_execution_20260120": true,
	"code_execution_20260521": true,
}

// clientTool is one of Anthropic's client tools, the tools the client
// itself runs, as a model that does not know it by type sees it: its calls
// come back to the client as tool_use blocks.
type clientTool struct{ description, schema string }

const (
	bashSchema = `{"type":"object","properties":{"command":{"type":"string","description":"The bash command to run."},` +
		`"restart":{"type":"boolean","description":"Restart the bash session."}}}`
	textEditorSchema = `{"type":"object","required":["command","path"],"properties":{` +
		`"command":{"type":"string","enum":["view","create","str_replace","insert","undo_edit"]},` +
		`"path":{"type":"string","description":"Absolute path of the file or directory."},` +
		`"file_text":{"type":"string","description":"create: the file's content."},` +
		`"old_str":{"type":"string","description":"str_replace: the text to replace, which must occur once."},` +
		`"new_str":{"type":"string","description":"str_replace and insert: the new text."},` +
		`"insert_line":{"type":"integer","description":"insert: the line after which to insert."},` +
		`"view_range":{"type":"array","items":{"type":"integer"},"description":"view: the first and last line."}}}`
)

var (
	bashClientTool = clientTool{"Run a command in a persistent bash session on the user's machine.", bashSchema}
	textEditorTool = clientTool{"View, create and edit files on the user's machine.", textEditorSchema}
)

// clientTools are Anthropic's client tools by type.
var clientTools = map[string]clientTool{
	"bash_20241022":        bashClientTool,
	"bash_20250124":        bashClientTool,
	"text_editor_20250124": textEditorTool,
	"text_editor_20250429": textEditorTool,
	"text_editor_20250728": textEditorTool,
}

// messagesFields are the types of the Messages API's fields that conch
// reads or passes on: a field of the wrong type is a 400 naming it.
var messagesFields = map[string]string{
	"model": "string", "max_tokens": "number", "stream": "boolean", "temperature": "number",
	"top_p": "number", "top_k": "number", "stop_sequences": "array", "metadata": "object",
	"service_tier": "string", "thinking": "object", "tool_choice": "object", "tools": "array",
	"messages": "array", "container": "string or object",
}

// request is a parsed POST /v1/messages.
type request struct {
	completion.Request
	Stream bool
}

func badField(field, format string, args ...any) *completion.FieldError {
	return completion.BadField(field, format, args...)
}

// parse parses and checks a request body; generate says it asks for a
// message, which needs max_tokens (count_tokens takes none).
func parse(body []byte, generate bool) (*request, error) {
	var top map[string]json.RawMessage
	if err := wirejson.Strict(body, &top); err != nil || top == nil {
		return nil, badField("", "request body is not a JSON object")
	}
	r := &request{Request: completion.Request{Extra: map[string]json.RawMessage{}}}
	var system []upstream.Message
	// In order, so that of two bad fields the same one is named each time.
	for _, k := range slices.Sorted(maps.Keys(top)) {
		v := top[k]
		if string(bytes.TrimSpace(v)) == "null" {
			delete(top, k)
			continue
		}
		if want, ok := messagesFields[k]; ok && !strings.Contains(want, jsonType(v)) {
			return nil, badField(k, "must be %s %s, got %s", article(want), want, jsonType(v))
		}
		var err error
		switch k {
		case "model":
			_ = wirejson.Strict(v, &r.Model)
		case "messages":
			err = r.parseMessages(v)
		case "system":
			system, err = parseSystem(v)
		case "tools":
			err = r.parseTools(v)
		case "tool_choice":
			err = r.toolChoice(v)
		case "stream":
			_ = wirejson.Strict(v, &r.Stream)
		case "max_tokens", "temperature", "top_p", "top_k":
			r.Extra[k] = v
		case "stop_sequences":
			r.Extra["stop"] = v
		case "metadata":
			err = r.metadata(v)
		case "container":
			err = r.container(v)
		case "thinking", "service_tier", "context_management", "mcp_servers":
			// Anthropic's own; a chat completions upstream takes none of
			// them, and conch's loop keeps no thinking blocks.
		default:
			return nil, badField(k, "unknown field of a Messages request")
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case r.Model == "":
		return nil, badField("model", "is required: the name of a gateway")
	case len(r.Messages) == 0:
		return nil, badField("messages", "is required and must not be empty")
	case generate && top["max_tokens"] == nil:
		return nil, badField("max_tokens", "is required")
	}
	r.Messages = append(system, r.Messages...)
	return r, nil
}

// jsonType names the JSON type of v as the field table does.
func jsonType(v json.RawMessage) string {
	switch b := bytes.TrimSpace(v); {
	case len(b) == 0:
		return "nothing"
	case b[0] == '"':
		return "string"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "boolean"
	case b[0] == 'n':
		return "null"
	}
	return "number"
}

func article(word string) string {
	if strings.IndexByte("aeio", word[0]) >= 0 {
		return "an"
	}
	return "a"
}

// parseSystem reads the system prompt: a string or a list of text blocks.
func parseSystem(v json.RawMessage) ([]upstream.Message, error) {
	text, err := textOf("system", v)
	if err != nil || text == "" {
		return nil, err
	}
	return []upstream.Message{{Role: "system", Content: text}}, nil
}

// textOf is the text of a content given as a string or as text blocks.
func textOf(field string, v json.RawMessage) (string, error) {
	var s string
	if wirejson.Strict(v, &s) == nil {
		return s, nil
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := wirejson.Strict(v, &blocks); err != nil {
		return "", badField(field, "must be a string or an array of text blocks")
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", badField(fmt.Sprintf("%s[%d].type", field, i), "must be text, got %q", bl.Type)
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// block is a content block of a message, with the fields of every type
// conch reads.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    json.RawMessage `json:"source"`
}

// parseMessages turns the conversation into chat messages: an assistant
// message's tool_use and server_tool_use blocks become its tool calls, the
// results that answer them (tool_result in the user's next message,
// bash_code_execution_tool_result in the assistant's own) tool messages.
func (r *request) parseMessages(v json.RawMessage) error {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := wirejson.Strict(v, &msgs); err != nil {
		return badField("messages", "must be an array of {role, content}")
	}
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return badField(field+".role", "must be user or assistant, got %q", m.Role)
		}
		var text string
		if wirejson.Strict(m.Content, &text) == nil {
			r.Messages = append(r.Messages, upstream.Message{Role: m.Role, Content: text})
			continue
		}
		var blocks []block
		if err := wirejson.Strict(m.Content, &blocks); err != nil {
			return badField(field+".content", "must be a string or an array of content blocks")
		}
		if err := r.addBlocks(field+".content", m.Role, blocks); err != nil {
			return err
		}
	}
	return nil
}

// addBlocks adds the blocks of one message in their order: text joins the
// message of its role, a call joins the assistant message, a result is a
// tool message.
func (r *request) addBlocks(field, role string, blocks []block) error {
	open := false // the last message is this one's, and text and calls may join it
	msg := func() *upstream.Message {
		if !open {
			r.Messages = append(r.Messages, upstream.Message{Role: role})
			open = true
		}
		return &r.Messages[len(r.Messages)-1]
	}
	// parts are the content parts, in OpenAI's shape, of the user
	// messages that hold an image, by index: such a message is sent
	// upstream with them (upstream.Message.Raw), its text alone
	// otherwise.
	parts := map[int][]any{}
	imaged := map[int]bool{}
	defer func() {
		for i := range imaged {
			r.Messages[i].Raw, _ = json.Marshal(map[string]any{"role": "user", "content": parts[i]})
		}
	}()
	for i, b := range blocks {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case b.Type == "text":
			m := msg()
			m.Content += b.Text
			if role == "user" {
				n := len(r.Messages) - 1
				parts[n] = append(parts[n], map[string]any{"type": "text", "text": b.Text})
			}
		case b.Type == "image" && role == "user":
			url, err := imageURL(at+".source", b.Source)
			if err != nil {
				return err
			}
			msg()
			n := len(r.Messages) - 1
			parts[n] = append(parts[n], map[string]any{"type": "image_url", "image_url": map[string]string{"url": url}})
			imaged[n] = true
		case (b.Type == "tool_use" || b.Type == "server_tool_use") && role == "assistant":
			call, err := callOf(at, b)
			if err != nil {
				return err
			}
			m := msg()
			m.ToolCalls = append(m.ToolCalls, call)
		case b.Type == "tool_result" && role == "user":
			if b.ToolUseID == "" {
				return badField(at+".tool_use_id", "is required")
			}
			text, err := resultText(at+".content", b.Content)
			if err != nil {
				return err
			}
			if b.IsError {
				text = "Error: " + text
			}
			r.Messages = append(r.Messages, upstream.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
			open = false
		case (b.Type == bashResult || b.Type == editorResult || b.Type == mcpResult) && role == "assistant":
			if b.ToolUseID == "" {
				return badField(at+".tool_use_id", "is required")
			}
			out, err := serverResult(at+".content", b)
			if err != nil {
				return err
			}
			r.Messages = append(r.Messages, upstream.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: out})
			open = false
		case b.Type == "thinking" || b.Type == "redacted_thinking":
			// A chat completions upstream takes no thinking back; the
			// model thinks again.
		case b.Type == "document":
			return badField(at+".type", "conch passes text and images to the model, not document blocks")
		default:
			return badField(at+".type", "is not a content block a %s message may hold here: %q", role, b.Type)
		}
	}
	return nil
}

// imageMediaTypes are the image types Anthropic's API takes.
var imageMediaTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// imageURL is an image block's source as the URL of OpenAI's image part:
// a data: URL of a base64 image, or the http(s) URL the upstream fetches.
func imageURL(field string, v json.RawMessage) (string, error) {
	var src struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	}
	if err := wirejson.Strict(v, &src); err != nil {
		return "", badField(field, "must be an image source object")
	}
	switch src.Type {
	case "base64":
		if !imageMediaTypes[src.MediaType] {
			return "", badField(field+".media_type", "must be image/jpeg, image/png, image/gif or image/webp, got %q", src.MediaType)
		}
		if _, err := base64.StdEncoding.DecodeString(src.Data); err != nil || src.Data == "" {
			return "", badField(field+".data", "must be the image in base64")
		}
		return "data:" + src.MediaType + ";base64," + src.Data, nil
	case "url":
		if u, err := url.Parse(src.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", badField(field+".url", "must be an http or https URL")
		}
		return src.URL, nil
	}
	return "", badField(field+".type", "must be base64 or url, got %q", src.Type)
}

// callOf is the tool call of a tool_use or server_tool_use block. A
// bash_code_execution call is conch's shell; another server tool is
// conch's tool of that name (mcp_tool_use blocks name theirs the same way).
func callOf(field string, b block) (upstream.ToolCall, error) {
	if b.ID == "" || b.Name == "" {
		return upstream.ToolCall{}, badField(field, "a %s block needs id and name", b.Type)
	}
	input := b.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	call := upstream.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(input)}
	if b.Type == "server_tool_use" {
		switch b.Name {
		case bashTool:
			var in struct {
				Command string `json:"command"`
			}
			if err := wirejson.Strict(input, &in); err != nil || in.Command == "" {
				return upstream.ToolCall{}, badField(field+".input", "a bash_code_execution call needs a command")
			}
			args, _ := json.Marshal(map[string]string{"command": in.Command})
			call.Name, call.Arguments = "shell", string(args)
		case editorTool:
		default:
			return upstream.ToolCall{}, badField(field+".name", "conch runs bash_code_execution and text_editor_code_execution only, got %q", b.Name)
		}
	}
	return call, nil
}

// resultText is the text of a tool_result's content: a string or text
// blocks.
func resultText(field string, v json.RawMessage) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	return textOf(field, v)
}

// serverResult is what the model saw of a server tool's result, rebuilt
// from its block: the shell's result JSON for bash_code_execution, the
// tool's output for conch's other tools.
func serverResult(field string, b block) (string, error) {
	if b.Type == editorResult {
		return editorResultOf(field, b.Content)
	}
	if b.Type == mcpResult {
		text, err := resultText(field, b.Content)
		if b.IsError {
			text = "Error: " + text
		}
		return text, err
	}
	var c struct {
		Type       string `json:"type"`
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
		ReturnCode int    `json:"return_code"`
		ErrorCode  string `json:"error_code"`
	}
	if err := wirejson.Strict(b.Content, &c); err != nil {
		return "", badField(field, "must be a bash_code_execution_result or its error")
	}
	res := map[string]any{"stdout": c.Stdout, "stderr": c.Stderr, "outcome": map[string]any{"type": "exit", "exit_code": c.ReturnCode}}
	switch c.Type {
	case "bash_code_execution_result":
	case "bash_code_execution_tool_result_error":
		res = map[string]any{"stdout": "", "stderr": "", "error": c.ErrorCode, "outcome": map[string]any{"type": "error"}}
		if c.ErrorCode == errTimeExceeded {
			res["outcome"] = map[string]any{"type": "timeout"}
		}
	default:
		return "", badField(field+".type", "must be bash_code_execution_result or bash_code_execution_tool_result_error, got %q", c.Type)
	}
	out, _ := json.Marshal(res)
	return string(out), nil
}

// editorResultOf is the editor's result JSON, as the model saw it, of a
// text_editor_code_execution_tool_result's content.
func editorResultOf(field string, v json.RawMessage) (string, error) {
	var c map[string]any
	if err := wirejson.Strict(v, &c); err != nil || c == nil {
		return "", badField(field, "must be a text_editor_code_execution result object")
	}
	for typ, anthropic := range editorTypes {
		if c["type"] == anthropic {
			c["type"] = typ
			b, _ := json.Marshal(c)
			var res loop.EditorResult
			if err := wirejson.Strict(b, &res); err != nil {
				return "", badField(field, "is not a %s: %v", anthropic, err)
			}
			out, _ := json.Marshal(res)
			return string(out), nil
		}
	}
	return "", badField(field+".type", "must be a text_editor_code_execution result type, got %v", c["type"])
}

// parseTools reads the tools: custom tools and Anthropic's client tools
// are the client's to run; the code execution tool is conch's shell.
func (r *request) parseTools(v json.RawMessage) error {
	var list []json.RawMessage
	if err := wirejson.Strict(v, &list); err != nil {
		return badField("tools", "must be an array")
	}
	seen := map[string]bool{}
	for i, raw := range list {
		field := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := wirejson.Strict(raw, &t); err != nil {
			return badField(field, "must be a tool object")
		}
		switch {
		case t.Type == "" || t.Type == "custom":
			if len(t.InputSchema) == 0 {
				return badField(field+".input_schema", "is required")
			}
			if err := completion.CheckClientTool(field+".name", t.Name, seen); err != nil {
				return err
			}
			r.ClientTools = append(r.ClientTools, upstream.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
		case codeExecutionTools[t.Type]:
			if r.Shell != nil {
				return badField(field, "the code execution tool is given twice")
			}
			r.Shell, r.ShellField, r.Editor = &completion.ShellTool{}, field, true
		case clientTools[t.Type] != (clientTool{}):
			if err := completion.CheckClientTool(field+".name", t.Name, seen); err != nil {
				return err
			}
			ct := clientTools[t.Type]
			r.ClientTools = append(r.ClientTools, upstream.Tool{Name: t.Name, Description: ct.description, Parameters: json.RawMessage(ct.schema)})
		case t.Type == "code_execution_20250522":
			return badField(field+".type", "code_execution_20250522 ran Python only; conch serves code_execution_20250825 and later (bash in conch's sandbox)")
		default:
			return badField(field+".type", "conch does not serve the %q tool; give custom tools, bash, text_editor or code_execution_20250825 and later", t.Type)
		}
	}
	return nil
}

// toolChoice maps Anthropic's tool_choice to chat completions'.
func (r *request) toolChoice(v json.RawMessage) error {
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
	}
	if err := wirejson.Strict(v, &tc); err != nil {
		return badField("tool_choice", "must be an object with a type")
	}
	var choice any
	switch tc.Type {
	case "auto", "none":
		choice = tc.Type
	case "any":
		choice = "required"
	case "tool":
		if tc.Name == "" {
			return badField("tool_choice.name", "is required for type tool")
		}
		choice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
	default:
		return badField("tool_choice.type", "must be auto, any, tool or none, got %q", tc.Type)
	}
	r.Extra["tool_choice"], _ = json.Marshal(choice)
	if tc.DisableParallelToolUse != nil {
		r.Extra["parallel_tool_calls"], _ = json.Marshal(!*tc.DisableParallelToolUse)
	}
	return nil
}

// metadata reads metadata.user_id, conch's end user: the owner of a
// persistent workspace.
func (r *request) metadata(v json.RawMessage) error {
	var m struct {
		UserID *string `json:"user_id"`
	}
	if err := wirejson.Strict(v, &m); err != nil {
		return badField("metadata", "must be an object")
	}
	if m.UserID == nil {
		return nil
	}
	if !tenant.ValidUserID(*m.UserID) {
		return badField("metadata.user_id", "must be "+tenant.UserIDRule)
	}
	r.User = *m.UserID
	return nil
}

// container reads container: a container's id, or {id, skills}. Skills
// are mounted in a new sandbox: naming them with a container's id is
// refused when the completion runs.
func (r *request) container(v json.RawMessage) error {
	var id string
	if wirejson.Strict(v, &id) == nil {
		r.Container, r.ContainerField = id, "container"
		return nil
	}
	var c struct {
		ID     string            `json:"id"`
		Skills []json.RawMessage `json:"skills"`
	}
	if err := wirejson.Strict(v, &c); err != nil {
		return badField("container", "must be a container id or {id, skills}")
	}
	if c.ID != "" {
		r.Container, r.ContainerField = c.ID, "container.id"
	}
	for i, raw := range c.Skills {
		field := fmt.Sprintf("container.skills[%d]", i)
		var sk struct {
			Type    string  `json:"type"`
			SkillID string  `json:"skill_id"`
			Version *string `json:"version"`
		}
		if err := wirejson.Strict(raw, &sk); err != nil {
			return badField(field, "must be {type, skill_id, version}")
		}
		switch sk.Type {
		case "custom":
		case "anthropic":
			return badField(field+".type", "conch serves no skills of Anthropic's; upload the skill with /v1/skills and name it as custom")
		default:
			return badField(field+".type", "must be custom, got %q", sk.Type)
		}
		if sk.SkillID == "" {
			return badField(field+".skill_id", "is required")
		}
		// Anthropic's version is the newest unless one is named.
		version := "latest"
		if sk.Version != nil {
			version = *sk.Version
		}
		r.Skills = append(r.Skills, completion.SkillRef{ID: sk.SkillID, Version: version, Field: field})
	}
	r.SkillsField = "container.skills"
	return nil
}
