package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
)

// DefaultAnthropicBaseURL is Anthropic's API.
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// anthropicVersion is the Messages API version conch speaks.
const anthropicVersion = "2023-06-01"

// Anthropic calls Anthropic's Messages API, mapping OpenAI-shaped messages
// and tool calls both ways.
type Anthropic struct {
	BaseURL string
	APIKey  string
	Client  *http.Client
	Retry   RetryPolicy
}

var _ Provider = (*Anthropic)(nil)

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	Source    *imageSource    `json:"source,omitempty"`
}

// imageSource is an image block's source: base64 data or a URL.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// userBlocks are the blocks of a user message: its text, or, when the
// client sent content parts (Raw), each text and image part in order. An
// image is an OpenAI image_url part, a data: URL of base64 data or an
// http(s) URL; other parts are not sent.
func userBlocks(m Message) []anthropicBlock {
	var raw struct {
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		} `json:"content"`
	}
	if len(m.Raw) == 0 || wirejson.Lenient(m.Raw, &raw) != nil || len(raw.Content) == 0 {
		return []anthropicBlock{{Type: "text", Text: nonEmpty(m.Content)}}
	}
	var blocks []anthropicBlock
	for _, p := range raw.Content {
		switch p.Type {
		case "text":
			if p.Text != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: p.Text})
			}
		case "image_url":
			if src := imageSourceOf(p.ImageURL.URL); src != nil {
				blocks = append(blocks, anthropicBlock{Type: "image", Source: src})
			}
		}
	}
	if len(blocks) == 0 {
		return []anthropicBlock{{Type: "text", Text: nonEmpty(m.Content)}}
	}
	return blocks
}

// imageSourceOf is the source of an image part's URL; nil for a URL that
// is neither a base64 data: URL nor http(s).
func imageSourceOf(u string) *imageSource {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mediaType, data, ok := strings.Cut(rest, ";base64,")
		if !ok {
			return nil
		}
		return &imageSource{Type: "base64", MediaType: mediaType, Data: data}
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return &imageSource{Type: "url", URL: u}
	}
	return nil
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

// body maps an OpenAI-shaped request to a Messages API request.
func (a *Anthropic) body(req *Request, stream bool) ([]byte, error) {
	var system []string
	var msgs []anthropicMessage
	appendBlocks := func(role string, blocks ...anthropicBlock) {
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, anthropicMessage{Role: role, Content: blocks})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, m.Content)
		case "user":
			appendBlocks("user", userBlocks(m)...)
		case "assistant":
			var blocks []anthropicBlock
			if m.Content != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				input := json.RawMessage(tc.Arguments)
				if !json.Valid(input) || len(bytes.TrimSpace(input)) == 0 {
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: input})
			}
			if len(blocks) > 0 {
				appendBlocks("assistant", blocks...)
			}
		case "tool":
			appendBlocks("user", anthropicBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: nonEmpty(m.Content)})
		default:
			return nil, &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("messages: role %q cannot be sent to an anthropic upstream", m.Role), Type: "invalid_request_error"}
		}
	}
	body := map[string]any{"model": req.Model, "messages": msgs, "max_tokens": 4096}
	if len(system) > 0 {
		body["system"] = strings.Join(system, "\n\n")
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := req.Extra[k]; ok {
			body["max_tokens"] = v
		}
	}
	for _, k := range []string{"temperature", "top_p", "top_k", "metadata"} {
		if v, ok := req.Extra[k]; ok {
			body[k] = v
		}
	}
	if v, ok := req.Extra["stop"]; ok {
		var one string
		var many []string
		switch {
		case wirejson.Strict(v, &one) == nil:
			body["stop_sequences"] = []string{one}
		case wirejson.Strict(v, &many) == nil:
			body["stop_sequences"] = many
		}
	}
	if len(req.Tools) > 0 {
		tools := make([]map[string]any, len(req.Tools))
		for i, t := range req.Tools {
			schema := t.Parameters
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			tools[i] = map[string]any{"name": t.Name, "description": t.Description, "input_schema": schema}
		}
		body["tools"] = tools
		if tc, ok := req.Extra["tool_choice"]; ok {
			if choice := anthropicToolChoice(tc); choice != nil {
				body["tool_choice"] = choice
			}
		}
	}
	if stream {
		body["stream"] = true
	}
	return json.Marshal(body)
}

func nonEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

func anthropicToolChoice(raw json.RawMessage) map[string]any {
	var s string
	if wirejson.Strict(raw, &s) == nil {
		switch s {
		case "auto":
			return map[string]any{"type": "auto"}
		case "none":
			return map[string]any{"type": "none"}
		case "required":
			return map[string]any{"type": "any"}
		}
		return nil
	}
	var obj struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if wirejson.Strict(raw, &obj) == nil && obj.Function.Name != "" {
		return map[string]any{"type": "tool", "name": obj.Function.Name}
	}
	return nil
}

// Complete implements Provider.
func (a *Anthropic) Complete(ctx context.Context, req *Request, onDelta func(string) error) (*Response, error) {
	body, err := a.body(req, onDelta != nil)
	if err != nil {
		return nil, err
	}
	endpoint, err := a.endpoint("v1/messages")
	if err != nil {
		return nil, err
	}
	started := false
	return withRetry(ctx, a.Retry, func() bool { return started }, func() (*Response, error) {
		hreq, err := http.NewRequestWithContext(ctx, "POST", endpoint, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		a.headers(hreq)
		resp, err := a.Client.Do(hreq)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, readError(resp, a.APIKey)
		}
		if onDelta == nil {
			return decodeAnthropic(resp.Body)
		}
		return decodeAnthropicStream(resp.Body, func(s string) error {
			started = true
			return onDelta(s)
		})
	})
}

type anthropicUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

func (u anthropicUsage) usage() Usage {
	return Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

func finishReason(stop string) string {
	switch stop {
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	case "refusal":
		return "content_filter"
	default:
		return "stop"
	}
}

func decodeAnthropic(r io.Reader) (*Response, error) {
	var w struct {
		ID         string           `json:"id"`
		Content    []anthropicBlock `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      anthropicUsage   `json:"usage"`
	}
	if err := readReply(r, &w); err != nil {
		return nil, &Error{Status: http.StatusBadGateway, Message: "upstream answered with invalid JSON: " + err.Error(), Type: "upstream_error"}
	}
	resp := &Response{ID: w.ID, FinishReason: finishReason(w.StopReason), Usage: w.Usage.usage()}
	var text strings.Builder
	for _, b := range w.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
		}
	}
	resp.Content = text.String()
	return resp, nil
}

// decodeAnthropicStream reads the Messages API's server-sent events.
func decodeAnthropicStream(r io.Reader, onDelta func(string) error) (*Response, error) {
	resp := &Response{}
	var text strings.Builder
	var usage anthropicUsage
	blocks := map[int]*ToolCall{}
	var order []int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID    string         `json:"id"`
				Usage anthropicUsage `json:"usage"`
			} `json:"message"`
			ContentBlock anthropicBlock `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anthropicUsage `json:"usage"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := wirejson.Lenient([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return nil, &Error{Status: http.StatusBadGateway, Message: "upstream sent an invalid stream event: " + err.Error(), Type: "upstream_error"}
		}
		switch ev.Type {
		case "message_start":
			resp.ID = ev.Message.ID
			usage.InputTokens = ev.Message.Usage.InputTokens
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				blocks[ev.Index] = &ToolCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}
				order = append(order, ev.Index)
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				text.WriteString(ev.Delta.Text)
				if err := onDelta(ev.Delta.Text); err != nil {
					return nil, err
				}
			case "input_json_delta":
				if b := blocks[ev.Index]; b != nil {
					b.Arguments += ev.Delta.PartialJSON
				}
			}
		case "message_delta":
			resp.FinishReason = finishReason(ev.Delta.StopReason)
			if ev.Usage != nil {
				usage.OutputTokens = ev.Usage.OutputTokens
			}
		case "error":
			msg := "upstream stream failed"
			if ev.Error != nil {
				msg = ev.Error.Message
			}
			return nil, &Error{Status: http.StatusBadGateway, Message: msg, Type: "upstream_error"}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("upstream: read stream: %w", err)
	}
	resp.Content = text.String()
	for _, i := range order {
		tc := *blocks[i]
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
		resp.ToolCalls = append(resp.ToolCalls, tc)
	}
	resp.Usage = usage.usage()
	return resp, nil
}

// endpoint is path under the upstream's base URL, joined as a URL path:
// nothing in a base URL turns what conch appends into a query or another
// host.
func (a *Anthropic) endpoint(path string) (string, error) {
	base := a.BaseURL
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	u, err := outbound.JoinPath(base, path)
	if err != nil {
		return "", fmt.Errorf("upstream: base_url: %w", err)
	}
	return u, nil
}

func (a *Anthropic) headers(hreq *http.Request) {
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("anthropic-version", anthropicVersion)
	if a.APIKey != "" {
		hreq.Header.Set("x-api-key", a.APIKey)
	}
}

// TokenCounter is an upstream that counts a request's input tokens.
type TokenCounter interface {
	CountTokens(ctx context.Context, req *Request) (int64, error)
}

var _ TokenCounter = (*Anthropic)(nil)

// CountTokens asks Anthropic's count_tokens endpoint for the input tokens
// of req as Complete would send it.
func (a *Anthropic) CountTokens(ctx context.Context, req *Request) (int64, error) {
	full, err := a.body(req, false)
	if err != nil {
		return 0, err
	}
	// count_tokens takes the request but what only generation reads.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(full, &fields); err != nil {
		return 0, err
	}
	for _, k := range []string{"max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "metadata", "stream"} {
		delete(fields, k)
	}
	body, _ := json.Marshal(fields)
	endpoint, err := a.endpoint("v1/messages/count_tokens")
	if err != nil {
		return 0, err
	}
	return withRetry(ctx, a.Retry, nil, func() (int64, error) {
		hreq, err := http.NewRequestWithContext(ctx, "POST", endpoint, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		a.headers(hreq)
		resp, err := a.Client.Do(hreq)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return 0, readError(resp, a.APIKey)
		}
		var out struct {
			InputTokens int64 `json:"input_tokens"`
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return 0, err
		}
		if err := wirejson.Lenient(b, &out); err != nil {
			return 0, fmt.Errorf("upstream: count_tokens answer: %w", err)
		}
		return out.InputTokens, nil
	})
}
