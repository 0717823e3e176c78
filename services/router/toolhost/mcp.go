package toolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// mcpTools connects to a streamable-HTTP MCP server and returns its tools;
// closeFn ends the session.
func mcpTools(ctx context.Context, m *routerv1.McpServer, hc *http.Client) ([]*Tool, func(), error) {
	client := *hc
	base := client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	client.Transport = headerTransport{base: base, headers: m.GetHeaders()}
	c := mcp.NewClient(&mcp.Implementation{Name: "conch", Version: "v1"}, nil)
	session, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: m.GetUrl(), HTTPClient: &client, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("mcp server %s: connect: %w", m.GetName(), err)
	}
	closeFn := func() { _ = session.Close() }
	var tools []*Tool
	var cursor string
	for {
		res, err := session.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("mcp server %s: list tools: %w", m.GetName(), err)
		}
		for _, t := range res.Tools {
			schema, err := json.Marshal(t.InputSchema)
			if err != nil || t.InputSchema == nil {
				schema = []byte(`{"type":"object"}`)
			}
			name := t.Name
			tools = append(tools, &Tool{
				Name:        name,
				Description: t.Description,
				Schema:      schema,
				Kind:        "mcp",
				call: func(ctx context.Context, args map[string]any) (string, error) {
					r, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
					if err != nil {
						return "", fmt.Errorf("mcp server %s: %w", m.GetName(), err)
					}
					out := mcpText(r)
					if r.IsError {
						return "", fmt.Errorf("%s", out)
					}
					return out, nil
				},
			})
		}
		if res.NextCursor == "" {
			return tools, closeFn, nil
		}
		cursor = res.NextCursor
	}
}

// mcpText renders a tool result as text: its text contents, else its
// structured content as JSON.
func mcpText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 && r.StructuredContent != nil {
		b, _ := json.Marshal(r.StructuredContent)
		return string(b)
	}
	return strings.Join(parts, "\n")
}
