package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// DefaultOpenAIBaseURL is OpenAI's API.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// OpenAI calls any OpenAI-compatible chat completions server (OpenAI, vLLM,
// Ollama, ...).
type OpenAI struct {
	BaseURL string
	APIKey  string
	Client  *http.Client
	Retry   RetryPolicy
}

var _ Provider = (*OpenAI)(nil)

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    *string         `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Refusal    json.RawMessage `json:"refusal,omitempty"`
}

// MessageJSON encodes m in OpenAI's shape (Raw when set).
func MessageJSON(m Message) json.RawMessage {
	if len(m.Raw) > 0 {
		return m.Raw
	}
	w := wireMessage{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID}
	if m.Content != "" || len(m.ToolCalls) == 0 {
		c := m.Content
		w.Content = &c
	}
	for _, tc := range m.ToolCalls {
		var wt wireToolCall
		wt.ID, wt.Type = tc.ID, "function"
		wt.Function.Name, wt.Function.Arguments = tc.Name, tc.Arguments
		w.ToolCalls = append(w.ToolCalls, wt)
	}
	b, _ := json.Marshal(w) // cannot fail: plain strings
	return b
}

func (o *OpenAI) body(req *Request, stream bool) ([]byte, error) {
	body := make(map[string]any, len(req.Extra)+5)
	for k, v := range req.Extra {
		body[k] = v
	}
	body["model"] = req.Model
	msgs := make([]json.RawMessage, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = MessageJSON(m)
	}
	body["messages"] = msgs
	if len(req.Tools) > 0 {
		tools := make([]map[string]any, len(req.Tools))
		for i, t := range req.Tools {
			fn := map[string]any{"name": t.Name, "description": t.Description}
			if len(t.Parameters) > 0 {
				fn["parameters"] = t.Parameters
			}
			tools[i] = map[string]any{"type": "function", "function": fn}
		}
		body["tools"] = tools
	} else {
		delete(body, "tools")
		delete(body, "tool_choice")
		delete(body, "parallel_tool_calls")
	}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	} else {
		delete(body, "stream")
		delete(body, "stream_options")
	}
	return json.Marshal(body)
}

// Complete implements Provider.
func (o *OpenAI) Complete(ctx context.Context, req *Request, onDelta func(string) error) (*Response, error) {
	body, err := o.body(req, onDelta != nil)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	base := strings.TrimRight(o.BaseURL, "/")
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	started := false
	return withRetry(ctx, o.Retry, func() bool { return started }, func() (*Response, error) {
		hreq, err := http.NewRequestWithContext(ctx, "POST", base+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		if o.APIKey != "" {
			hreq.Header.Set("Authorization", "Bearer "+o.APIKey)
		}
		if onDelta != nil {
			hreq.Header.Set("Accept", "text/event-stream")
		}
		resp, err := o.Client.Do(hreq)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, readError(resp, o.APIKey)
		}
		if onDelta == nil {
			return decodeOpenAI(resp.Body)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			// An upstream that does not stream answers in one piece.
			r, err := decodeOpenAI(resp.Body)
			if err == nil && r.Content != "" {
				started = true
				err = onDelta(r.Content)
			}
			return r, err
		}
		return decodeOpenAIStream(resp.Body, func(s string) error {
			started = true
			return onDelta(s)
		})
	})
}

// readError turns an error answer into *Error, keeping the upstream's
// message and how long it asked to wait. The gateway's key is cut from the
// message: an upstream may echo the key it refused, and the message goes
// to the caller, who must never see it.
func readError(resp *http.Response, key string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b)), Type: "upstream_error"}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &v) == nil && len(v.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			e.Message = obj.Message
			if obj.Type != "" {
				e.Type = obj.Type
			}
			if obj.Code != nil {
				e.Code = fmt.Sprint(obj.Code)
			}
		case json.Unmarshal(v.Error, &s) == nil:
			e.Message = s
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if key != "" {
		e.Message = strings.ReplaceAll(e.Message, key, "[redacted]")
	}
	e.RetryAfter = retryAfter(resp.Header, time.Now())
	return e
}

type wireResponse struct {
	ID      string `json:"id"`
	Choices []struct {
		Message      wireMessage `json:"message"`
		Delta        wireMessage `json:"delta"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

func decodeOpenAI(r io.Reader) (*Response, error) {
	var w wireResponse
	if err := json.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&w); err != nil {
		return nil, &Error{Status: http.StatusBadGateway, Message: "upstream answered with invalid JSON: " + err.Error(), Type: "upstream_error"}
	}
	if len(w.Choices) == 0 {
		return nil, &Error{Status: http.StatusBadGateway, Message: "upstream answered with no choices", Type: "upstream_error"}
	}
	c := w.Choices[0]
	resp := &Response{ID: w.ID, FinishReason: c.FinishReason}
	if c.Message.Content != nil {
		resp.Content = *c.Message.Content
	}
	for _, tc := range c.Message.ToolCalls {
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if w.Usage != nil {
		resp.Usage = *w.Usage
	}
	return resp, nil
}

// decodeOpenAIStream reads server-sent chat.completion.chunk events,
// assembling tool calls by index.
func decodeOpenAIStream(r io.Reader, onDelta func(string) error) (*Response, error) {
	resp := &Response{}
	calls := map[int]*ToolCall{}
	var content strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var w wireResponse
		if err := json.Unmarshal([]byte(data), &w); err != nil {
			return nil, &Error{Status: http.StatusBadGateway, Message: "upstream sent an invalid stream chunk: " + err.Error(), Type: "upstream_error"}
		}
		if w.ID != "" {
			resp.ID = w.ID
		}
		if w.Usage != nil {
			resp.Usage = *w.Usage
		}
		for _, c := range w.Choices {
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				content.WriteString(*c.Delta.Content)
				if err := onDelta(*c.Delta.Content); err != nil {
					return nil, err
				}
			}
			for i, tc := range c.Delta.ToolCalls {
				idx := i
				if tc.Index != nil {
					idx = *tc.Index
				}
				call := calls[idx]
				if call == nil {
					call = &ToolCall{}
					calls[idx] = call
				}
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Name += tc.Function.Name
				call.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != "" {
				resp.FinishReason = c.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("upstream: read stream: %w", err)
	}
	resp.Content = content.String()
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		resp.ToolCalls = append(resp.ToolCalls, *calls[i])
	}
	return resp, nil
}
