package openai

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// responseStream writes a streaming response as the Responses API's
// semantic events, each numbered by sequence_number. Output items are
// announced in the order outputItems renders the finished response, with
// the same ids: a turn's text as a message, each server call followed by
// its result, the client's calls last. The loop writes text while
// keep-alives come from another goroutine, so every write holds mu.
type responseStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	seq     int
	obj     map[string]any
	ids     *itemIDs
	sh      shellView
	index   int // output_index of the next item

	// text is the message being streamed, if any.
	text struct {
		open  bool
		id    string
		index int
		b     strings.Builder
	}
	// calls are the server calls announced and not yet answered, by
	// call id.
	calls map[string]pendingCall
}

type pendingCall struct {
	id    string
	index int
	call  upstream.ToolCall
}

var _ loop.Events = (*responseStream)(nil)

func newResponseStream(w http.ResponseWriter, obj map[string]any, ids *itemIDs, view shellView) *responseStream {
	f, _ := w.(http.Flusher)
	return &responseStream{w: w, flusher: f, obj: obj, ids: ids, sh: view, calls: map[string]pendingCall{}}
}

// begin sends the headers, response.created and response.in_progress.
func (s *responseStream) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	frontend.StartEvents(s.w)
	if err := s.event("response.created", map[string]any{"response": s.obj}); err != nil {
		return err
	}
	return s.event("response.in_progress", map[string]any{"response": s.obj})
}

func (s *responseStream) event(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	if _, err := s.w.Write([]byte("event: " + typ + "\ndata: " + string(b) + "\n\n")); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// added announces a new output item.
func (s *responseStream) added(item map[string]any) (int, error) {
	i := s.index
	s.index++
	return i, s.event("response.output_item.added", map[string]any{"output_index": i, "item": item})
}

func (s *responseStream) done(index int, item map[string]any) error {
	return s.event("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

// Delta implements loop.Events: text opens a message item, or goes on
// with the open one.
func (s *responseStream) Delta(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.text
	if !t.open {
		t.open, t.id = true, s.ids.next("msg_")
		t.b.Reset()
		var err error
		if t.index, err = s.added(messageItem(t.id, "", "in_progress")); err != nil {
			return err
		}
		if err := s.event("response.content_part.added", map[string]any{"item_id": t.id, "output_index": t.index, "content_index": 0, "part": outputText("")}); err != nil {
			return err
		}
	}
	t.b.WriteString(text)
	return s.event("response.output_text.delta", map[string]any{"item_id": t.id, "output_index": t.index, "content_index": 0, "delta": text, "logprobs": []any{}})
}

// closeText ends the open message item, if any.
func (s *responseStream) closeText() error {
	t := &s.text
	if !t.open {
		return nil
	}
	t.open = false
	text := t.b.String()
	if err := s.event("response.output_text.done", map[string]any{"item_id": t.id, "output_index": t.index, "content_index": 0, "text": text, "logprobs": []any{}}); err != nil {
		return err
	}
	if err := s.event("response.content_part.done", map[string]any{"item_id": t.id, "output_index": t.index, "content_index": 0, "part": outputText(text)}); err != nil {
		return err
	}
	return s.done(t.index, messageItem(t.id, text, "completed"))
}

// KeepAlive implements loop.Events with an SSE comment, which clients
// ignore.
func (s *responseStream) KeepAlive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write([]byte(": keep-alive\n\n")); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// Tool implements loop.Events: a server call is announced when it starts
// and completed with its result; a pending approval is the event
// conch.approval_pending, and the output of a running command the events
// conch.tool_output.delta, each naming the call's item.
func (s *responseStream) Tool(ev loop.ToolEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closeText(); err != nil {
		return err
	}
	call := upstream.ToolCall{ID: ev.ID, Name: ev.Name, Arguments: ev.Arguments}
	switch ev.Event {
	case "tool_call":
		p := pendingCall{call: call}
		var err error
		if call.Name == "shell" && s.sh.declared {
			p.id = s.ids.next("sh_")
			if p.index, err = s.added(shellCallItem(p.id, call, s.sh, "in_progress")); err != nil {
				return err
			}
			cmd := shellCommand(call.Arguments)
			if err := s.event("response.shell_call_command.added", map[string]any{"output_index": p.index, "command_index": 0, "command": ""}); err != nil {
				return err
			}
			if err := s.event("response.shell_call_command.delta", map[string]any{"output_index": p.index, "command_index": 0, "delta": cmd}); err != nil {
				return err
			}
			if err := s.event("response.shell_call_command.done", map[string]any{"output_index": p.index, "command_index": 0, "command": cmd}); err != nil {
				return err
			}
		} else {
			p.id = s.ids.next("mcp_")
			if p.index, err = s.added(serverToolItem(p.id, call, nil)); err != nil {
				return err
			}
			if err := s.event("response.mcp_call.in_progress", map[string]any{"item_id": p.id, "output_index": p.index}); err != nil {
				return err
			}
		}
		s.calls[call.ID] = p
	case "approval_pending":
		p := s.calls[ev.ID]
		return s.event("conch.approval_pending", map[string]any{"item_id": p.id, "output_index": p.index, "approval": ev.Approval})
	case "tool_output":
		p, ok := s.calls[ev.ID]
		if !ok {
			return nil
		}
		out := map[string]any{"item_id": p.id, "output_index": p.index, "stream": ev.Stream, "delta": ev.Output}
		if ev.Encoding != "" {
			out["encoding"] = ev.Encoding
		}
		return s.event("conch.tool_output.delta", out)
	case "tool_result":
		p, ok := s.calls[ev.ID]
		if !ok {
			return nil
		}
		delete(s.calls, ev.ID)
		if p.call.Name != "shell" || !s.sh.declared {
			result := ev.Result
			if err := s.event("response.mcp_call.completed", map[string]any{"item_id": p.id, "output_index": p.index}); err != nil {
				return err
			}
			return s.done(p.index, serverToolItem(p.id, p.call, &result))
		}
		if ev.Sandbox != "" && s.sh.environment["type"] == "container_reference" {
			s.sh.environment = map[string]any{"type": "container_reference", "container_id": ev.Sandbox}
		}
		if err := s.done(p.index, shellCallItem(p.id, p.call, s.sh, "completed")); err != nil {
			return err
		}
		out := shellOutputItem(s.ids.next("sho_"), p.call.ID, ev.Result, s.sh)
		oi, err := s.added(out)
		if err != nil {
			return err
		}
		if err := s.event("response.shell_call_output_content.done", map[string]any{"item_id": out["id"], "output_index": oi, "command_index": 0, "output": out["output"]}); err != nil {
			return err
		}
		return s.done(oi, out)
	}
	return nil
}

// complete announces the client's calls and ends the stream with the
// finished response.
func (s *responseStream) complete(obj map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeText() != nil {
		return
	}
	items, _ := obj["output"].([]map[string]any)
	for i := s.index; i < len(items); i++ {
		item := items[i]
		s.index++
		added := make(map[string]any, len(item))
		for k, v := range item {
			added[k] = v
		}
		added["status"] = "in_progress"
		if item["type"] == "function_call" {
			added["arguments"] = ""
		}
		if s.event("response.output_item.added", map[string]any{"output_index": i, "item": added}) != nil {
			return
		}
		if item["type"] == "function_call" {
			args, _ := item["arguments"].(string)
			if s.event("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": i, "delta": args}) != nil ||
				s.event("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": i, "arguments": args, "name": item["name"]}) != nil {
				return
			}
		}
		if s.done(i, item) != nil {
			return
		}
	}
	typ := "response.completed"
	switch obj["status"] {
	case "incomplete":
		typ = "response.incomplete"
	case "failed":
		// It ran, but could not be stored as asked (see notStored).
		e, _ := obj["error"].(map[string]any)
		code, _ := e["code"].(string)
		msg, _ := e["message"].(string)
		if s.errorEvent(code, msg, "store") != nil {
			return
		}
		typ = "response.failed"
	}
	_ = s.event(typ, map[string]any{"response": obj})
}

// errorEvent sends OpenAI's error event, which comes before
// response.failed.
func (s *responseStream) errorEvent(code, msg, param string) error {
	var p any
	if param != "" {
		p = param
	}
	return s.event("error", map[string]any{"code": code, "message": msg, "param": p})
}

// fail ends the stream with response.failed, the error in the response.
func (s *responseStream) fail(e apiError) {
	if e.Status == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.closeText()
	s.obj["status"] = "failed"
	code := e.Code
	if code == "" {
		code = e.Type
	}
	s.obj["error"] = map[string]any{"code": code, "message": e.Message}
	if s.errorEvent(code, e.Message, e.Param) != nil {
		return
	}
	_ = s.event("response.failed", map[string]any{"response": s.obj})
}
