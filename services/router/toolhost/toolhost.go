// Package toolhost runs a gateway's server-executable tools
// (docs/reference/tools.md): webhook tools, the tools of MCP servers, and the
// built-ins request, open_url and web_search. The agent loop calls them
// directly when they are model tools; sandboxes call them through the
// executor when they are moved into the shell as commands.
package toolhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// maxOutput bounds what one tool call returns, in characters.
const maxOutput = 1 << 20

// Tool is one server-executable tool.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the arguments.
	Schema json.RawMessage
	// Kind is webhook, mcp, request, open_url or web_search.
	Kind string

	schema *jsonschema.Schema
	call   func(ctx context.Context, args map[string]any) (string, error)
}

// Set is the tools of one completion.
type Set struct {
	tools   []*Tool
	byName  map[string]*Tool
	closers []func()
}

// Deps are what the tools need to reach the world.
type Deps struct {
	// HTTP calls webhooks and MCP servers, which the gateway's owner
	// chose, through the outbound guard.
	HTTP *http.Client
	// Egress calls the built-ins' targets, through the same guard with
	// shorter timeouts.
	Egress *http.Client
}

// Build assembles the tools of gateway g, listing the tools of its MCP
// servers. Close the set when the completion ends.
func Build(ctx context.Context, g *routerv1.Gateway, deps Deps) (*Set, error) {
	if deps.HTTP == nil || deps.Egress == nil {
		return nil, errors.New("toolhost: no outbound HTTP client")
	}
	s := &Set{byName: map[string]*Tool{}}
	add := func(t *Tool) error {
		if _, dup := s.byName[t.Name]; dup {
			return fmt.Errorf("tool %q is defined twice (check the gateway's MCP servers)", t.Name)
		}
		if len(t.Schema) == 0 {
			t.Schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		sch, err := CompileSchema(t.Schema)
		if err != nil {
			return fmt.Errorf("tool %q: %w", t.Name, err)
		}
		t.schema = sch
		s.tools = append(s.tools, t)
		s.byName[t.Name] = t
		return nil
	}
	for _, w := range g.GetTools().GetWebhooks() {
		if err := add(webhookTool(w, deps.HTTP)); err != nil {
			return nil, err
		}
	}
	b := g.GetTools().GetBuiltins()
	for _, t := range builtinTools(b, deps.Egress) {
		if err := add(t); err != nil {
			return nil, err
		}
	}
	for _, m := range g.GetTools().GetMcpServers() {
		tools, closeFn, err := mcpTools(ctx, m, deps.HTTP)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.closers = append(s.closers, closeFn)
		for _, t := range tools {
			if err := add(t); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// Close releases the set's MCP sessions.
func (s *Set) Close() {
	for _, c := range s.closers {
		c()
	}
	s.closers = nil
}

// Tools returns the tools in a stable order.
func (s *Set) Tools() []*Tool { return s.tools }

// Lookup returns the tool called name.
func (s *Set) Lookup(name string) (*Tool, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// Split divides the tools into model tools and tools moved into the shell,
// by the gateway's shell.tools mode.
func (s *Set) Split(st *routerv1.ShellTools) (direct, moved []*Tool) {
	for _, t := range s.tools {
		listed := slices.Contains(st.GetNames(), t.Name)
		switch {
		case st.GetMode() == routerv1.ToolsMode_TOOLS_MODE_WHITELIST && listed,
			st.GetMode() == routerv1.ToolsMode_TOOLS_MODE_BLACKLIST && !listed:
			moved = append(moved, t)
		default:
			direct = append(direct, t)
		}
	}
	return direct, moved
}

// Call validates the arguments (a JSON object) and runs the tool. A failed
// tool returns its message and isError; the error is only for a call that
// could not be made at all (unknown tool, bad arguments).
func (s *Set) Call(ctx context.Context, name, arguments string) (output string, isError bool, err error) {
	t, ok := s.byName[name]
	if !ok {
		return "", false, fmt.Errorf("unknown tool %q", name)
	}
	args, err := t.Validate(arguments)
	if err != nil {
		return "", false, err
	}
	out, err := t.call(ctx, args)
	if err != nil {
		return err.Error(), true, nil
	}
	return out, false, nil
}

// Validate parses arguments and checks them against the tool's schema.
func (t *Tool) Validate(arguments string) (map[string]any, error) {
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(arguments))
	if err != nil {
		return nil, fmt.Errorf("arguments of %s are not JSON: %v", t.Name, err)
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments of %s must be a JSON object", t.Name)
	}
	if err := t.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("arguments of %s: %s", t.Name, strings.TrimSpace(ve.Error()))
		}
		return nil, fmt.Errorf("arguments of %s: %v", t.Name, err)
	}
	return args, nil
}

// CompileSchema compiles a tool's JSON Schema for checking arguments.
func CompileSchema(schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(schema)))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("tool.json")
}
