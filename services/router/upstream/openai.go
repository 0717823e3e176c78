package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
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

// bodyOverrides are the top-level fields the body sets itself, whatever
// the client's Extra holds.
var bodyOverrides = map[string]bool{"model": true, "messages": true, "tools": true, "stream": true, "stream_options": true}

// toolOnlyFields are the client's fields that mean nothing without tools,
// dropped when the call offers none.
var toolOnlyFields = map[string]bool{"tool_choice": true, "parallel_tool_calls": true}

// body encodes the chat completions request: the client's other fields as
// they came (in key order), then the model, the messages (each client
// message as it came) and the tools. It is written straight into one
// buffer rather than through a generic tree, which a gateway hop would
// rebuild and sort on every call.
func (o *OpenAI) body(req *Request, stream bool) ([]byte, error) {
	keys := make([]string, 0, len(req.Extra))
	size := 64 + len(req.Model)
	for k, v := range req.Extra {
		if bodyOverrides[k] || (len(req.Tools) == 0 && toolOnlyFields[k]) {
			continue
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	msgs := make([]json.RawMessage, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = MessageJSON(m)
		size += len(msgs[i]) + 1
	}
	for _, t := range req.Tools {
		size += len(t.Name) + len(t.Description) + len(t.Parameters) + 64
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteByte('{')
	for _, k := range keys {
		writeJSONString(b, k)
		b.WriteByte(':')
		b.Write(req.Extra[k])
		b.WriteByte(',')
	}
	b.WriteString(`"model":`)
	writeJSONString(b, req.Model)
	b.WriteString(`,"messages":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte(']')
	if len(req.Tools) > 0 {
		b.WriteString(`,"tools":[`)
		for i, t := range req.Tools {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"type":"function","function":{"name":`)
			writeJSONString(b, t.Name)
			b.WriteString(`,"description":`)
			writeJSONString(b, t.Description)
			if len(t.Parameters) > 0 {
				b.WriteString(`,"parameters":`)
				b.Write(t.Parameters)
			}
			b.WriteString("}}")
		}
		b.WriteByte(']')
	}
	if stream {
		b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	b.WriteByte('}')
	if !json.Valid(b.Bytes()) {
		return nil, errors.New("a field or message is not valid JSON")
	}
	return b.Bytes(), nil
}

// writeJSONString writes s as a JSON string, escaped as encoding/json
// escapes it.
func writeJSONString(b *bytes.Buffer, s string) {
	if isPlainJSON(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// isPlainJSON reports whether s needs no escaping in a JSON string: printable
// ASCII other than the quote, the backslash and the characters encoding/json
// escapes for HTML.
func isPlainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Complete implements Provider.
func (o *OpenAI) Complete(ctx context.Context, req *Request, onDelta func(string) error) (*Response, error) {
	body, err := o.body(req, onDelta != nil)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	base := o.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	// Joined as a URL path: nothing in a base URL turns what conch
	// appends into a query or another host.
	endpoint, err := outbound.JoinPath(base, "chat/completions")
	if err != nil {
		return nil, fmt.Errorf("upstream: base_url: %w", err)
	}
	started := false
	return withRetry(ctx, o.Retry, func() bool { return started }, func() (*Response, error) {
		hreq, err := http.NewRequestWithContext(ctx, "POST", endpoint, bytes.NewReader(body))
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
	if wirejson.Lenient(b, &v) == nil && len(v.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		var s string
		switch {
		case wirejson.Lenient(v.Error, &obj) == nil && obj.Message != "":
			e.Message = obj.Message
			if obj.Type != "" {
				e.Type = obj.Type
			}
			if obj.Code != nil {
				e.Code = fmt.Sprint(obj.Code)
			}
		case wirejson.Lenient(v.Error, &s) == nil:
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

// replyWire is a chat.completion answer: what decodeOpenAI reads of it.
type replyWire struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// replyBuffers hold upstream answers while they are decoded; the decoded
// strings are copies, so a buffer is free again at once.
var replyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxReply bounds an upstream's answer.
const maxReply = 64 << 20

// readReply reads an upstream's whole answer, up to maxReply, and decodes
// it into v.
func readReply(r io.Reader, v any) error {
	buf := replyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 { // keep no huge answer alive
			buf.Reset()
			replyBuffers.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(io.LimitReader(r, maxReply)); err != nil {
		return err
	}
	return wirejson.Lenient(buf.Bytes(), v)
}

func decodeOpenAI(r io.Reader) (*Response, error) {
	var w replyWire
	if err := readReply(r, &w); err != nil {
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
		if err := wirejson.Lenient([]byte(data), &w); err != nil {
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
