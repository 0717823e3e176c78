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
	"github.com/conch-sh/conch/services/internal/toolresult"
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
	// maxOutput counts characters, as the shell tool's limit does: up to
	// four bytes each are read, and the text is cut between characters.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4*maxOutput+1))
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	out, cut := toolresult.Cut(string(b), maxOutput)
	if cut || len(b) > 4*maxOutput {
		out += "\n[output truncated]"
	}
	if resp.StatusCode/100 != 2 {
		msg, cut := toolresult.Cut(strings.TrimSpace(out), 2000)
		if cut {
			msg += "…"
		}
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	return out, nil
}
