package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeCompletions answers POST /v1/chat/completions with answer(n, request)
// for the n-th request (from 0), as an event stream when the request
// streams, and records the requests.
type fakeCompletions struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []map[string]any
}

func newFakeCompletions(t *testing.T, answer func(n int, req map[string]any) string) *fakeCompletions {
	t.Helper()
	f := &fakeCompletions{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"message": "unexpected call"}`, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(b, &req)
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, req)
		f.mu.Unlock()
		if req["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = io.WriteString(w, answer(n, req))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCompletions) request(n int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n >= len(f.requests) {
		return nil
	}
	return f.requests[n]
}

// sseOf writes chunks as the router streams them.
func sseOf(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// A streamed turn that ends on client tool calls says so, naming each call
// with its arguments, escaped; other turns say nothing of the kind.
func TestChatShowsClientToolCalls(t *testing.T) {
	t.Parallel()
	toolTurn := sseOf(
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Let me look."},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[`+
			`{"index":0,"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}},`+
			`{"index":1,"id":"c2","type":"function","function":{"name":"beep\u001b[2J","arguments":"{}"}}]},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\\n\u202e\"}"}}]},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"conch":{"server_tool_calls":[]}}`,
	)
	textTurn := sseOf(
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Sunny."},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"conch":{"server_tool_calls":[]}}`,
	)
	f := newFakeCompletions(t, func(n int, _ map[string]any) string {
		if n == 0 {
			return toolTurn
		}
		return textTurn
	})
	c, err := NewClient(&Options{Server: f.srv.URL, APIKey: "k", Output: "text"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ch := &chat{c: c, in: readLines(strings.NewReader("")), out: &out, model: "default"}
	if err := ch.turn(t.Context(), "weather?"); err != nil {
		t.Fatal(err)
	}
	want := "\nLet me look.\n" +
		`[client tool call get_weather {"city":"Paris\\n\u202e"} not run: conch chat has no client tools]` + "\n" +
		`[client tool call beep\x1b[2J {} not run: conch chat has no client tools]` + "\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("turn ending on client tool calls (-want +got):\n%s", diff)
	}
	out.Reset()
	if err := ch.turn(t.Context(), "and now?"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "\nSunny.\n" {
		t.Errorf("text turn shown as %q", got)
	}
}

// -o json prints each turn's completion object as the API answered it,
// asks for it unstreamed, keeps the conversation, and leaves stdout to the
// JSON alone.
func TestChatJSON(t *testing.T) {
	t.Parallel()
	answer := func(n int, _ map[string]any) string {
		b, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1767225600, "model": "default",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": fmt.Sprintf("answer %d", n), "refusal": nil}}},
			"usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "server_tool_use": map[string]any{"shell_commands": 0}},
			"conch": map[string]any{"server_tool_calls": []any{}},
		})
		return string(b)
	}
	f := newFakeCompletions(t, answer)
	var stdout, stderr bytes.Buffer
	args := []string{"-o", "json", "--session", "s1", "--server", f.srv.URL, "--api-key", "k"}
	if err := Chat(t.Context(), args, strings.NewReader("first\nsecond\n/quit\n"), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&stdout)
	for n := range 2 {
		var got, want map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("answer %d: %v\nstdout:\n%s", n, err, stdout.String())
		}
		_ = json.Unmarshal([]byte(answer(n, nil)), &want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("answer %d (-want +got):\n%s", n, diff)
		}
		if req := f.request(n); req["stream"] != false {
			t.Errorf("request %d asked stream %v, want false", n, req["stream"])
		}
	}
	if dec.More() {
		t.Errorf("more on stdout than two answers")
	}
	if !strings.Contains(stderr.String(), "you> ") {
		t.Errorf("the prompt should be on stderr, got %q", stderr.String())
	}
	msgs, _ := f.request(1)["messages"].([]any)
	if len(msgs) != 3 || msgs[1].(map[string]any)["content"] != "answer 0" {
		t.Errorf("second turn sent %v, want user, the first answer, user", msgs)
	}
}

// A shell call's output is shown as it comes, once: the result that follows
// adds only how the command ended.
func TestChatShowsLiveOutput(t *testing.T) {
	t.Parallel()
	turn := sseOf(
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}],"conch_event":{"event":"tool_call","id":"c1","name":"shell","arguments":"{\"command\":\"make\"}"}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}],"conch_event":{"event":"tool_output","id":"c1","name":"shell","stream":"stdout","output":"building "}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}],"conch_event":{"event":"tool_output","id":"c1","name":"shell","stream":"stdout","output":"a\nlinking\n"}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}],"conch_event":{"event":"tool_output","id":"c1","name":"shell","stream":"stderr","output":"/w==","encoding":"base64"}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}],"conch_event":{"event":"tool_result","id":"c1","name":"shell","result":"{\"stdout\":\"building a\\nlinking\\n\",\"stderr\":\"\",\"outcome\":{\"type\":\"exit\",\"exit_code\":2}}"}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"It failed."},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"conch":{"server_tool_calls":[]}}`,
	)
	f := newFakeCompletions(t, func(int, map[string]any) string { return turn })
	c, err := NewClient(&Options{Server: f.srv.URL, APIKey: "k", Output: "text"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ch := &chat{c: c, in: readLines(strings.NewReader("")), out: &out, model: "default"}
	if err := ch.turn(t.Context(), "build"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Count(got, "linking") != 1 || !strings.Contains(got, "  building a\n  linking\n  [exit 2]\n") {
		t.Errorf("turn shown as %q", got)
	}
}
