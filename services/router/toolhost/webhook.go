package toolhost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// webhookTool POSTs the arguments as JSON to the tool's URL and returns the
// body.
func webhookTool(w *routerv1.WebhookTool, client *http.Client) *Tool {
	headers := w.GetHeaders()
	url := w.GetUrl()
	return &Tool{
		Name:        w.GetName(),
		Description: w.GetDescription(),
		Schema:      json.RawMessage(w.GetParametersSchema()),
		Kind:        "webhook",
		call: func(ctx context.Context, args map[string]any) (string, error) {
			body, err := json.Marshal(args)
			if err != nil {
				return "", err
			}
			req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
			if err != nil {
				return "", err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("User-Agent", "conch-toolhost")
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			return readAnswer(client.Do(req))
		},
	}
}

// readAnswer reads an HTTP answer as a tool's output: the body, capped; a
// non-2xx status is the tool's failure.
func readAnswer(resp *http.Response, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("request failed: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	out := string(b)
	if len(b) > maxOutput {
		out = string(b[:maxOutput]) + "\n[output truncated]"
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(firstN(out, 2000)))
	}
	return out, nil
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
