package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	textmessage "golang.org/x/text/message"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/toolhost"
)

// Limits of the shell's per-call arguments (docs/reference/openai-api.md).
const (
	maxTimeoutSeconds = 300
)

// shellSchema is the MCP shell tool's arguments: the model tool's command,
// and the limits a client may set per call.
const shellSchema = `{"type":"object","properties":{
	"command":{"type":"string","description":"The shell command or script to run with /bin/sh -c (at most 1 MiB)."},
	"timeout_seconds":{"type":"integer","minimum":1,"maximum":300,"description":"Seconds before the command is killed, 1-300; default the gateway's."},
	"max_output_length":{"type":"integer","minimum":1,"description":"Characters of output kept; default the gateway's."},
	"workdir":{"type":"string","minLength":1,"description":"Directory to start in; default where the session's last command left off."}},
	"required":["command"],"additionalProperties":false}`

func ptr[T any](v T) *T { return &v }

// tool is one tool of a session: its MCP definition, the schema its
// arguments are checked against (nil: the tool checks them itself), and
// what runs it.
type tool struct {
	def    *mcp.Tool
	schema *jsonschema.Schema
	run    func(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolResult
}

// addTools offers the session's tools: the gateway's, as a completion
// would offer them to a model, and the workspace's file tools.
func (s *session) addTools() {
	for _, t := range s.tools() {
		s.server.AddTool(t.def, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			args := req.Params.Arguments
			if len(args) == 0 || string(args) == "null" {
				args = json.RawMessage("{}")
			}
			if t.schema != nil {
				if err := checkArguments(t.schema, args); err != nil {
					return errorResult(t.def.Name + ": " + err.Error()), nil
				}
			}
			return t.run(s.ctx(ctx), req, args), nil
		})
	}
}

// tools are the session's tools.
func (s *session) tools() []tool {
	var out []tool
	for _, ut := range s.toolbox.Tools() {
		def := &mcp.Tool{Name: ut.Name, Description: ut.Description, InputSchema: ut.Parameters}
		t := tool{def: def}
		switch ut.Name {
		case "shell":
			def.InputSchema = json.RawMessage(shellSchema)
			def.Annotations = &mcp.ToolAnnotations{Title: "Run a shell command in the sandbox", DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}
			t.run = s.runShell
		case "exec":
			def.Annotations = &mcp.ToolAnnotations{Title: "Run a command, in the background when it takes long", DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}
			t.run = s.runJSONTool
		case "process":
			def.Annotations = &mcp.ToolAnnotations{Title: "Follow background commands", DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}
			t.run = s.runTextTool
		case "read_skill":
			def.Annotations = &mcp.ToolAnnotations{Title: "Load a skill", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
			t.run = s.runTextTool
		default:
			// A direct tool of the gateway checks its own arguments.
			t.run = s.runTextTool
			out = append(out, t)
			continue
		}
		schema, err := toolhost.CompileSchema(def.InputSchema.(json.RawMessage))
		if err != nil {
			s.opts.Logger.Error("tool schema does not compile", "tool", ut.Name, "error", err)
			continue
		}
		t.schema = schema
		out = append(out, t)
	}
	if s.toolbox.Shell() != nil {
		out = append(out, s.fileTools()...)
	}
	return out
}

// runShell runs the shell tool: the shell's result
// (docs/reference/openai-api.md) as structured content, with a text rendering
// for clients that show text only.
func (s *session) runShell(ctx context.Context, req *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	var args struct {
		Command         string `json:"command"`
		TimeoutSeconds  *int32 `json:"timeout_seconds"`
		MaxOutputLength *int32 `json:"max_output_length"`
		Workdir         string `json:"workdir"`
	}
	if err := wirejson.Strict(raw, &args); err != nil {
		return errorResult("shell: " + err.Error())
	}
	sh := s.toolbox.Shell()
	if args.TimeoutSeconds != nil {
		sh.TimeoutSeconds = *args.TimeoutSeconds
	}
	if args.MaxOutputLength != nil {
		sh.MaxOutputLength = *args.MaxOutputLength
	}
	sh.Workdir = args.Workdir
	command, _ := json.Marshal(map[string]string{"command": args.Command})
	out := s.call(ctx, req, "shell", string(command), sh)
	var res shellResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return errorResult(out)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: res.text()}},
		StructuredContent: json.RawMessage(out),
		IsError:           res.Outcome.Type == "error",
	}
}

// runJSONTool runs a tool whose result is a JSON object (exec).
func (s *session) runJSONTool(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolResult {
	out := s.call(ctx, req, req.Params.Name, string(args), nil)
	var res struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if json.Unmarshal([]byte(out), &res) != nil {
		return textResult(out)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: out}},
		StructuredContent: json.RawMessage(out),
		IsError:           res.Error != "",
	}
}

// runTextTool runs a tool whose result is text, "Error: ..." when it
// failed.
func (s *session) runTextTool(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolResult {
	return textResult(s.call(ctx, req, req.Params.Name, string(args), nil))
}

// call runs one of the toolbox's tools, asking the client about pending
// approvals and telling it the call is alive, and then tells subscribers
// of changed workspace files.
func (s *session) call(ctx context.Context, req *mcp.CallToolRequest, name, args string, sh *loop.Shell) string {
	ev := s.events(ctx, req)
	out, ok := s.toolbox.Call(ctx, name, args, sh, ev)
	ev.stop()
	if !ok {
		return "Error: unknown tool " + name
	}
	s.notifyChanged(ctx)
	return out
}

func textResult(out string) *mcp.CallToolResult {
	if msg, ok := strings.CutPrefix(out, "Error: "); ok {
		return errorResult(msg)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}, IsError: true}
}

// shellResult is the shell's result of a command
// (docs/reference/openai-api.md).
type shellResult struct {
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Error   string `json:"error"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode int    `json:"exit_code"`
	} `json:"outcome"`
}

// text renders the result as a terminal would show it, with how the
// command ended on the last line.
func (r *shellResult) text() string {
	var b strings.Builder
	b.WriteString(r.Stdout)
	if r.Stderr != "" {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString("[stderr]\n" + r.Stderr)
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	switch r.Outcome.Type {
	case "exit":
		fmt.Fprintf(&b, "[exit code %d]", r.Outcome.ExitCode)
	case "timeout":
		b.WriteString("[timed out]")
	default:
		b.WriteString("[error] " + r.Error)
	}
	return b.String()
}

var printer = textmessage.NewPrinter(language.English)

// checkArguments checks args against schema; the error names each field
// that is wrong and says why.
func checkArguments(schema *jsonschema.Schema, args json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(args)))
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return errors.New("arguments must be a JSON object")
	}
	err = schema.Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		field := strings.Join(e.InstanceLocation, ".")
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				msgs = append(msgs, join(field, m)+": required")
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				msgs = append(msgs, join(field, p)+": not an argument of this tool")
			}
		default:
			if field == "" {
				field = "arguments"
			}
			msgs = append(msgs, field+": "+e.ErrorKind.LocalizedString(printer))
		}
	}
	walk(ve)
	slices.Sort(msgs)
	return errors.New(strings.Join(slices.Compact(msgs), "; "))
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// instructions tell the client what the session offers.
func instructions(g *routerv1.Gateway, tb *completion.Toolbox) string {
	var b strings.Builder
	fmt.Fprintf(&b, "conch gateway %q: ", g.GetName())
	if tb.Shell() == nil {
		b.WriteString("this gateway offers no shell. ")
	} else {
		b.WriteString("commands run in an isolated Linux sandbox kept for this MCP session; its workspace is /home/workspace")
		if tb.Persistent() {
			fmt.Fprintf(&b, ", the persistent workspace of user %q", tb.User())
		} else {
			b.WriteString(", discarded when the session ends")
		}
		b.WriteString(". The file tools and conch://workspace/{path} resources work on that workspace. ")
	}
	b.WriteString("A command that needs a human's approval waits for it.")
	return b.String()
}
