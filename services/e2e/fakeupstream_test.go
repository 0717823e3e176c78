package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeUpstream is a local model server (OpenAI or Anthropic shaped) whose
// answers a test scripts; it records what it was sent. Fakes stand in only
// for upstream models, which are outside our control.
type fakeUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
	arrived  []time.Time
	// answer returns the status, headers and body (or SSE events) for the
	// n-th call.
	answer func(n int, req map[string]any) fakeAnswer
}

// fakeAnswer is one reply of a fakeUpstream.
type fakeAnswer struct {
	Status int
	Header map[string]string
	Body   string
}

func newFakeUpstream(t testing.TB, answer func(n int, req map[string]any) (int, string)) *fakeUpstream {
	t.Helper()
	return newFakeUpstreamWithHeaders(t, func(n int, req map[string]any) fakeAnswer {
		code, body := answer(n, req)
		return fakeAnswer{Status: code, Body: body}
	})
}

// newFakeUpstreamWithHeaders is newFakeUpstream for answers that need
// headers, such as Retry-After.
func newFakeUpstreamWithHeaders(t testing.TB, answer func(n int, req map[string]any) fakeAnswer) *fakeUpstream {
	t.Helper()
	f := &fakeUpstream{answer: answer}
	f.Server = serveModel(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, req)
		f.headers = append(f.headers, r.Header.Clone())
		f.arrived = append(f.arrived, time.Now())
		f.mu.Unlock()
		a := f.answer(n, req)
		code, body := a.Status, a.Body
		for k, v := range a.Header {
			w.Header().Set(k, v)
		}
		if strings.HasPrefix(body, "data:") || strings.HasPrefix(body, "event:") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeUpstream) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeUpstream) request(n int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[n]
}

// arrivals returns when each request came, in order.
func (f *fakeUpstream) arrivals() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrived...)
}

func (f *fakeUpstream) header(n int) http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[n]
}

// openAIText is a chat.completion with text content.
func openAIText(text string) string {
	b, _ := json.Marshal(map[string]any{
		"id": "up-1", "object": "chat.completion", "created": 1, "model": "up-model",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
	return string(b)
}

// openAIToolCall is a chat.completion calling one function.
func openAIToolCall(id, name string, args any) string {
	a, _ := json.Marshal(args)
	b, _ := json.Marshal(map[string]any{
		"id": "up-2", "object": "chat.completion", "created": 1, "model": "up-model",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(a)}}},
		}}},
		"usage": map[string]any{"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
	})
	return string(b)
}

// openAIStream is a streamed chat completion with text split into parts.
func openAIStream(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		c, _ := json.Marshal(map[string]any{"id": "up-s", "object": "chat.completion.chunk", "created": 1, "model": "up-model",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": p}, "finish_reason": nil}}})
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	c, _ := json.Marshal(map[string]any{"id": "up-s", "object": "chat.completion.chunk", "created": 1, "model": "up-model",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})
	fmt.Fprintf(&b, "data: %s\n\ndata: [DONE]\n\n", c)
	return b.String()
}

// lastToolResult returns the content of the last tool message of a request.
func lastToolResult(req map[string]any) string {
	msgs, _ := req["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "tool" {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
