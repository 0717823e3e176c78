package toolhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/html"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/toolresult"
)

// allowedURL checks a built-in's target against the gateway's domain
// allowlist ("example.com" or "*.example.com").
func allowedURL(raw string, domains []string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url: want an absolute http:// or https:// URL, got %q", raw)
	}
	if u.User != nil {
		return nil, errors.New("url: credentials in the URL are not allowed")
	}
	host := strings.ToLower(u.Hostname())
	if list, err := egress.NewAllowlist(domains); err == nil && list.Match(host) {
		return u, nil
	}
	if len(domains) == 0 {
		return nil, fmt.Errorf("url: %s is not allowed: the gateway allows no domains for built-in tools", host)
	}
	return nil, fmt.Errorf("url: %s is not in the gateway's allowed domains (%s)", host, strings.Join(domains, ", "))
}

// withAllowlist returns c with a redirect check against the allowlist.
func withAllowlist(c *http.Client, domains []string) *http.Client {
	cc := *c
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		_, err := allowedURL(req.URL.String(), domains)
		return err
	}
	return &cc
}

func builtinTools(b *routerv1.BuiltinTools, egress *http.Client) []*Tool {
	client := withAllowlist(egress, b.GetAllowedDomains())
	domains := b.GetAllowedDomains()
	var tools []*Tool
	if b.GetRequest() {
		tools = append(tools, &Tool{
			Name:        "request",
			Description: "Make an HTTP request and return the status and body. Only the gateway's allowed domains are reachable.",
			Schema: json.RawMessage(`{"type":"object","properties":{
				"url":{"type":"string","description":"absolute http(s) URL"},
				"method":{"type":"string","enum":["GET","POST","PUT","PATCH","DELETE","HEAD"],"default":"GET","description":"HTTP method"},
				"headers":{"type":"object","additionalProperties":{"type":"string"},"description":"request headers"},
				"body":{"type":"string","description":"request body"}},
				"required":["url"],"additionalProperties":false}`),
			Kind: "request",
			call: func(ctx context.Context, args map[string]any) (string, error) {
				u, err := allowedURL(str(args["url"]), domains)
				if err != nil {
					return "", err
				}
				method := str(args["method"])
				if method == "" {
					method = "GET"
				}
				req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(str(args["body"])))
				if err != nil {
					return "", err
				}
				if h, ok := args["headers"].(map[string]any); ok {
					for k, v := range h {
						req.Header.Set(k, str(v))
					}
				}
				resp, err := client.Do(req)
				if err != nil {
					return "", fmt.Errorf("request failed: %w", err)
				}
				status := resp.Status
				body, err := readAnswer(resp, nil)
				if err != nil {
					return "", err
				}
				return "HTTP " + status + "\n\n" + body, nil
			},
		})
	}
	if b.GetOpenUrl() {
		tools = append(tools, &Tool{
			Name:        "open_url",
			Description: "Fetch a web page and return its text. Only the gateway's allowed domains are reachable.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","description":"absolute http(s) URL"}},"required":["url"],"additionalProperties":false}`),
			Kind:        "open_url",
			call: func(ctx context.Context, args map[string]any) (string, error) {
				u, err := allowedURL(str(args["url"]), domains)
				if err != nil {
					return "", err
				}
				req, err := http.NewRequestWithContext(ctx, "GET", u.String(), nil)
				if err != nil {
					return "", err
				}
				body, err := readAnswer(client.Do(req))
				if err != nil {
					return "", err
				}
				return pageText(body), nil
			},
		})
	}
	if b.GetWebSearch() {
		endpoint := b.GetWebSearchUrl()
		tools = append(tools, &Tool{
			Name:        "web_search",
			Description: "Search the web and return the results.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"what to search for"}},"required":["query"],"additionalProperties":false}`),
			Kind:        "web_search",
			call: func(ctx context.Context, args map[string]any) (string, error) {
				u, err := allowedURL(endpoint, domains)
				if err != nil {
					return "", fmt.Errorf("web_search endpoint: %w", err)
				}
				q := u.Query()
				q.Set("q", str(args["query"]))
				u.RawQuery = q.Encode()
				req, err := http.NewRequestWithContext(ctx, "GET", u.String(), nil)
				if err != nil {
					return "", err
				}
				return readAnswer(client.Do(req))
			},
		})
	}
	return tools
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// pageText extracts the visible text of an HTML page; other content is
// returned as is.
func pageText(body string) string {
	if head, _ := toolresult.Cut(body, 1024); !strings.Contains(strings.ToLower(head), "<") {
		return body
	}
	z := html.NewTokenizer(strings.NewReader(body))
	var b strings.Builder
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.TrimSpace(b.String())
		case html.StartTagToken:
			if name, _ := z.TagName(); string(name) == "script" || string(name) == "style" {
				skip++
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style":
				if skip > 0 {
					skip--
				}
			case "p", "div", "li", "h1", "h2", "h3", "h4", "tr", "br":
				b.WriteString("\n")
			}
		case html.TextToken:
			if skip == 0 {
				if t := strings.TrimSpace(string(z.Text())); t != "" {
					b.WriteString(t)
					b.WriteString(" ")
				}
			}
		}
	}
}
