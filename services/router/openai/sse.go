package openai

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/loop"
)

// sse writes a streaming completion as chat.completion.chunk events. The
// loop writes deltas while keep-alives come from another goroutine, so
// every write holds mu.
type sse struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	id      string
	created int64
	model   string
	started bool
	// wrote says text went out; toolSince, that a tool ran since: the
	// next turn's text is then set off by a blank line, as the turns are
	// joined in the final content.
	wrote, toolSince bool
}

var _ loop.Events = (*sse)(nil)

func newSSE(w http.ResponseWriter, id string, created int64, model string) *sse {
	f, _ := w.(http.Flusher)
	return &sse{w: w, flusher: f, id: id, created: created, model: model}
}

// start sends the headers and the first chunk with the role.
func (s *sse) start() error {
	if s.started {
		return nil
	}
	s.started = true
	frontend.StartEvents(s.w)
	return s.chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
}

func (s *sse) chunk(delta map[string]any, finish *string, extra map[string]any) error {
	ev := map[string]any{
		"id":      s.id,
		"object":  "chat.completion.chunk",
		"created": s.created,
		"model":   s.model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
	}
	for k, v := range extra {
		ev[k] = v
	}
	return s.data(ev)
}

func (s *sse) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write("data: " + string(b) + "\n\n")
}

func (s *sse) write(text string) error {
	if _, err := s.w.Write([]byte(text)); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// Delta implements loop.Events.
func (s *sse) Delta(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	if s.wrote && s.toolSince {
		text = "\n\n" + text
	}
	s.wrote, s.toolSince = true, false
	return s.chunk(map[string]any{"content": text}, nil, nil)
}

// KeepAlive implements loop.Events with an SSE comment, which clients
// ignore.
func (s *sse) KeepAlive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	return s.write(": keep-alive\n\n")
}

// Tool implements loop.Events: a chunk with an empty delta and a
// "conch_event" field that OpenAI clients ignore and conch chat shows. The
// "conch" field itself rides only on the last chunk, as
// docs/reference/openai-api.md says.
func (s *sse) Tool(ev loop.ToolEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	s.toolSince = true
	return s.chunk(map[string]any{}, nil, map[string]any{"conch_event": ev})
}

// finish sends client tool calls, the last chunk with finish_reason, usage
// and conch.server_tool_calls, then [DONE].
func (s *sse) finish(cres *completion.Result) {
	res := cres.Result
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return
	}
	if len(res.ToolCalls) > 0 {
		if s.chunk(map[string]any{"tool_calls": toolCallsOut(res.ToolCalls, true)}, nil, nil) != nil {
			return
		}
	}
	finish := res.FinishReason
	if s.chunk(map[string]any{}, &finish, map[string]any{"usage": usageOf(res), "conch": conchOf(cres)}) != nil {
		return
	}
	_ = s.write("data: [DONE]\n\n")
}

// fail reports an error after the stream started, as OpenAI does: the
// status is sent already, so only the error object goes out.
func (s *sse) fail(e apiError) {
	if e.Status == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.data(map[string]any{"error": e.object()})
	_ = s.write("data: [DONE]\n\n")
}
