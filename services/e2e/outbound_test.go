package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestTenantURLsReachNothingInternal points every URL a tenant can set
// (an upstream's base_url, which the reviewer calls too, a webhook tool,
// an MCP server, an approval forwarding target and chat base URLs) at a
// canary on loopback, spelled every way, and through a redirect: a URL
// written as an address is refused on save with a 400 naming the field,
// a name or a redirect at call time naming the address class, and the
// canary is never reached.
func TestTenantURLsReachNothingInternal(t *testing.T) {
	d := startDev(t)
	var hits atomic.Int64
	canaryL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	canary := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })}
	go func() { _ = canary.Serve(canaryL) }()
	t.Cleanup(func() { _ = canary.Close() })
	port := fmt.Sprint(canaryL.Addr().(*net.TCPAddr).Port)
	// A redirector, on the address the suite's operator allows, sends
	// every request to to, keeping its path.
	redirect := func(to string) string {
		return serveModel(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
		})).URL + "/v1"
	}

	literals := []struct{ url, class string }{
		{"http://127.0.0.1:" + port + "/v1", "loopback"},
		{"http://[::ffff:127.0.0.1]:" + port + "/v1", "loopback"},
		{"http://[::1]:" + port + "/v1", "loopback"},
		{"http://10.1.2.3/v1", "private"},
		{"http://169.254.169.254/latest", "link-local"},
		{"http://[fd00:ec2::254]/v1", "private"},
		{"http://100.64.0.1/v1", "carrier-grade NAT"},
		{"http://2130706433:" + port + "/v1", "not written as one"},
		{"http://0177.0.0.1:" + port + "/v1", "not written as one"},
		{"http://127.1:" + port + "/v1", "not written as one"},
	}
	gateway := func(name, field, u string) map[string]any {
		g := map[string]any{"name": name, "upstream": map[string]any{"provider": "scripted"}}
		switch field {
		case "upstream.base_url":
			g["upstream"] = map[string]any{"provider": "openai", "model": "m", "base_url": u}
		case "tools.webhooks[0].url":
			g["tools"] = map[string]any{"webhooks": []any{map[string]any{"name": "hook", "url": u}}}
		case "tools.mcp_servers[0].url":
			g["tools"] = map[string]any{"mcp_servers": []any{map[string]any{"name": "tools", "url": u}}}
		}
		return g
	}
	fields := []string{"upstream.base_url", "tools.webhooks[0].url", "tools.mcp_servers[0].url"}

	t.Run("on save", func(t *testing.T) {
		for i, f := range fields {
			for j, l := range literals {
				code, body := d.call("POST", "/api/v1/gateways", d.Key, gateway(fmt.Sprintf("lit-%d-%d", i, j), f, l.url))
				if code != http.StatusBadRequest || !strings.Contains(string(body), f) || !strings.Contains(string(body), l.class) {
					t.Errorf("%s = %s: %d %s, want 400 naming the field and %q", f, l.url, code, body, l.class)
				}
			}
		}
		// A base URL whose query would swallow the path conch appends.
		code, body := d.call("POST", "/api/v1/gateways", d.Key, gateway("swallow", "upstream.base_url", "http://"+modelHost+":2379/v3/kv/put?x="))
		if code != http.StatusBadRequest || !strings.Contains(string(body), "upstream.base_url") {
			t.Errorf("base_url with a query: %d %s, want 400", code, body)
		}
		for _, f := range []struct{ field, url string }{
			{"targets[0].to", "http://127.0.0.1:" + port + "/hook"},
			{"channels.slack_base_url", "http://[::ffff:7f00:1]:" + port + "/api"},
			{"channels.telegram_base_url", "http://169.254.169.254/"},
		} {
			cfg := map[string]any{"enabled": true, "mode": "FORWARD_MODE_TARGETS",
				"targets": []any{map[string]any{"channel": "CHANNEL_WEBHOOK", "to": "https://hooks.example.com/x"}}, "channels": map[string]any{}}
			switch f.field {
			case "targets[0].to":
				cfg["targets"] = []any{map[string]any{"channel": "CHANNEL_WEBHOOK", "to": f.url}}
			case "channels.slack_base_url":
				cfg["channels"] = map[string]any{"slack_base_url": f.url}
			default:
				cfg["channels"] = map[string]any{"telegram_base_url": f.url}
			}
			code, body := d.call("PUT", "/api/v1/approvals/forwarding", d.Key, cfg)
			if code != http.StatusBadRequest || !strings.Contains(string(body), f.field) {
				t.Errorf("forwarding %s = %s: %d %s, want 400 naming the field", f.field, f.url, code, body)
			}
		}
	})

	t.Run("at call time", func(t *testing.T) {
		// Names are judged when dialled, on the address they resolve to;
		// a redirect's connection is judged like the first.
		targets := []struct{ name, url string }{
			{"name", "http://localhost:" + port + "/v1"},
			{"redirect", redirect("http://127.0.0.1:" + port)},
			{"redirect-mapped", redirect("http://[::ffff:127.0.0.1]:" + port)},
			{"redirect-metadata", redirect("http://169.254.169.254")},
		}
		c := client(d)
		for _, tg := range targets {
			// An upstream: the completion fails with the refusal.
			createGateway(t, d, gateway("up-"+tg.name, "upstream.base_url", tg.url))
			_, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model: "up-" + tg.name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			if msg := apiMessage(err); !strings.Contains(msg, "conch: outbound to ") || !strings.Contains(msg, "refused: ") {
				t.Errorf("upstream %s: err = %v (%s), want the refusal", tg.name, err, msg)
			}
			// An MCP server: listing its tools fails.
			createGateway(t, d, gateway("mcp-"+tg.name, "tools.mcp_servers[0].url", tg.url))
			_, err = c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model: "mcp-" + tg.name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			if msg := apiMessage(err); !strings.Contains(msg, "conch: outbound to ") || !strings.Contains(msg, "refused: ") {
				t.Errorf("mcp %s: err = %v (%s), want the refusal", tg.name, err, msg)
			}
		}
		// A webhook tool the model calls: its result is the refusal.
		calls := len(targets)
		up := newFakeUpstream(t, func(n int, _ map[string]any) (int, string) {
			if n < calls {
				return 200, openAIToolCall(fmt.Sprintf("call_%d", n), fmt.Sprintf("hook%d", n), map[string]any{})
			}
			return 200, openAIText("done")
		})
		var hooks []any
		for i, tg := range targets {
			hooks = append(hooks, map[string]any{"name": fmt.Sprintf("hook%d", i), "url": tg.url})
		}
		createGateway(t, d, map[string]any{"name": "hooks", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
			"tools": map[string]any{"webhooks": hooks}})
		resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: "hooks", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
		})
		if err != nil {
			t.Fatal(err)
		}
		var conch struct {
			ServerToolCalls []struct{ Name, Result string } `json:"server_tool_calls"`
		}
		if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil {
			t.Fatal(err)
		}
		if len(conch.ServerToolCalls) != calls {
			t.Fatalf("server_tool_calls = %+v", conch.ServerToolCalls)
		}
		for i, c := range conch.ServerToolCalls {
			want := "refused: loopback"
			if strings.Contains(targets[i].name, "metadata") {
				want = "refused: link-local"
			}
			if !strings.Contains(c.Result, want) {
				t.Errorf("webhook %s: result %q, want %q", targets[i].name, c.Result, want)
			}
		}
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("the canary was reached %d times", n)
	}
}

// apiMessage is the message of an OpenAI API error, or "".
func apiMessage(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.Message
	}
	return ""
}
