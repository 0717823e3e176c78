package anthropic

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// stream writes a streaming message as Anthropic's server-sent events:
// message_start, each content block's content_block_start, _delta and
// _stop, message_delta with the stop reason and usage, and message_stop;
// ping while a tool runs. The blocks are those of the message a
// non-streaming request gets, in the same order. The loop writes while
// keep-alives come from another goroutine, so every write holds mu.
type stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	// msg is message_start's message: the id and model, no content yet.
	msg     map[string]any
	started bool
	// next is the index of the next block; text is the open text block's
	// index, -1 when none is open.
	next, text int
	// calls are the server calls announced, by id, for their results.
	calls map[string]upstream.ToolCall
}

var _ loop.Events = (*stream)(nil)

func newStream(w http.ResponseWriter, id, model string) *stream {
	f, _ := w.(http.Flusher)
	msg := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "container": nil,
		"usage": map[string]any{"input_tokens": 0, "output_tokens": 0},
	}
	return &stream{w: w, flusher: f, msg: msg, text: -1, calls: map[string]upstream.ToolCall{}}
}

// start sends the headers and message_start.
func (s *stream) start() error {
	if s.started {
		return nil
	}
	s.started = true
	frontend.StartEvents(s.w)
	return s.event("message_start", map[string]any{"message": s.msg})
}

// event writes one event; data's type is the event's name, as Anthropic
// sends it.
func (s *stream) event(name string, data map[string]any) error {
	data["type"] = name
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if _, err := s.w.Write([]byte("event: " + name + "\ndata: " + string(b) + "\n\n")); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// block writes a whole block: its start with the block, a delta with its
// input when it has one (a tool call's input streams as JSON, as the SDKs
// expect, and starts out empty), and its stop.
func (s *stream) block(b map[string]any) error {
	i := s.next
	s.next++
	start := b
	input, hasInput := b["input"]
	if hasInput {
		start = map[string]any{}
		for k, v := range b {
			start[k] = v
		}
		start["input"] = map[string]any{}
	}
	if err := s.event("content_block_start", map[string]any{"index": i, "content_block": start}); err != nil {
		return err
	}
	if hasInput {
		js, _ := json.Marshal(input)
		if err := s.event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(js)}}); err != nil {
			return err
		}
	}
	return s.event("content_block_stop", map[string]any{"index": i})
}

// closeText ends the open text block, if any.
func (s *stream) closeText() error {
	if s.text < 0 {
		return nil
	}
	i := s.text
	s.text = -1
	return s.event("content_block_stop", map[string]any{"index": i})
}

// Delta implements loop.Events: text, in the open text block or a new one.
func (s *stream) Delta(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	if s.text < 0 {
		s.text = s.next
		s.next++
		if err := s.event("content_block_start", map[string]any{"index": s.text, "content_block": textBlock("")}); err != nil {
			return err
		}
	}
	return s.event("content_block_delta", map[string]any{"index": s.text, "delta": map[string]any{"type": "text_delta", "text": text}})
}

// KeepAlive implements loop.Events with Anthropic's ping event.
func (s *stream) KeepAlive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	return s.event("ping", map[string]any{})
}

// Tool implements loop.Events: a server call is its block, its result the
// result's block. An approval the call waits for is a conch_event, an
// event type the SDKs pass over and conch's clients show.
func (s *stream) Tool(ev loop.ToolEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	if err := s.closeText(); err != nil {
		return err
	}
	switch ev.Event {
	case "tool_call":
		call := upstream.ToolCall{ID: ev.ID, Name: ev.Name, Arguments: ev.Arguments}
		s.calls[ev.ID] = call
		return s.block(serverCallBlock(call))
	case "tool_result":
		// A call a paused message announced has no call here.
		call, ok := s.calls[ev.ID]
		if !ok {
			call = upstream.ToolCall{ID: ev.ID, Name: ev.Name}
		}
		return s.block(serverResultBlock(call, ev.Result))
	}
	return s.event("conch_event", map[string]any{"conch_event": ev})
}

// finish sends the client's tool calls, message_delta and message_stop.
func (s *stream) finish(cres *completion.Result, container any) {
	res := cres.Result
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.start() != nil || s.closeText() != nil {
		return
	}
	for _, c := range res.ToolCalls {
		if s.block(toolUseBlock(c)) != nil {
			return
		}
	}
	delta := map[string]any{"stop_reason": stopReason(res.FinishReason), "stop_sequence": nil, "container": container}
	if s.event("message_delta", map[string]any{"delta": delta, "usage": usageOf(res), "conch": conchOf(cres)}) != nil {
		return
	}
	_ = s.event("message_stop", map[string]any{})
}

// fail reports an error after the stream started, as Anthropic does: an
// error event.
func (s *stream) fail(e apiError) {
	if e.Status == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.event("error", map[string]any{"error": e.body()["error"]})
}
