package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// TestUpstreamFailures: what an upstream's failure looks like to the
// caller. A refused gateway key is the gateway's fault, not the caller's
// (502, never 401); an upstream's Retry-After is honoured and passed on,
// with the upstream requests of one call bounded.
func TestUpstreamFailures(t *testing.T) {
	d := startDev(t)
	ctx := t.Context()
	const upstreamKey = "sk-upstream-very-secret-0123456789"

	var mu sync.Mutex
	seen := map[string]int{} // requests per user text
	up := newFakeUpstreamWithHeaders(t, func(n int, req map[string]any) fakeAnswer {
		msgs, _ := req["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		text, _ := last["content"].(string)
		mu.Lock()
		seen[text]++
		nth := seen[text]
		mu.Unlock()
		switch {
		case text == "refuse":
			// As OpenAI does, the refusal quotes the key it was given.
			return fakeAnswer{Status: 401, Body: `{"error": {"message": "Incorrect API key provided: ` + upstreamKey + `.", "type": "invalid_request_error", "code": "invalid_api_key"}}`}
		case text == "limit long":
			return fakeAnswer{Status: 429, Header: map[string]string{"Retry-After": "7"}, Body: `{"error": {"message": "slow down", "type": "rate_limit_error"}}`}
		case text == "limit short" && nth == 1:
			return fakeAnswer{Status: 429, Header: map[string]string{"Retry-After": "1"}, Body: `{"error": {"message": "slow down", "type": "rate_limit_error"}}`}
		default:
			return fakeAnswer{Status: 200, Body: openAIText("upstream says hi")}
		}
	})
	createGateway(t, d, map[string]any{
		"name":     "up",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "up-model", "api_key": upstreamKey},
	})
	chat := func(text string) map[string]any {
		return map[string]any{"model": "up", "messages": []map[string]any{{"role": "user", "content": text}}}
	}
	type apiErr struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	decode := func(t *testing.T, body []byte) apiErr {
		t.Helper()
		var e apiErr
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("body %s is not an OpenAI error: %v", body, err)
		}
		return e
	}

	t.Run("a refused upstream key is a 502 naming the gateway", func(t *testing.T) {
		code, body := d.call("POST", "/v1/chat/completions", d.Key, chat("refuse"))
		e := decode(t, body)
		if code != http.StatusBadGateway || e.Error.Type != "upstream_error" {
			t.Fatalf("= %d %s, want 502 upstream_error", code, body)
		}
		for _, want := range []string{"gateway up", "401", "Incorrect API key provided"} {
			if !strings.Contains(e.Error.Message, want) {
				t.Errorf("message %q does not say %q", e.Error.Message, want)
			}
		}
		if strings.Contains(string(body), upstreamKey) {
			t.Errorf("answer %s holds the upstream's key", body)
		}
	})

	t.Run("an SDK sees a server error, not an authentication error", func(t *testing.T) {
		c := client(d)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "up", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refuse")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Type != "upstream_error" {
			t.Fatalf("err = %v, want a 502 upstream_error", err)
		}
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "up", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refuse")},
		})
		for stream.Next() {
		}
		if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway {
			t.Fatalf("streaming err = %v, want a 502", err)
		}
	})

	t.Run("a long Retry-After is passed on at once", func(t *testing.T) {
		before := up.calls()
		code, h, body := d.do("POST", "/v1/chat/completions", d.Key, chat("limit long"))
		if code != http.StatusTooManyRequests || h.Get("Retry-After") != "7" || !strings.Contains(decode(t, body).Error.Message, "slow down") {
			t.Fatalf("= %d (Retry-After %q) %s, want 429 with Retry-After 7", code, h.Get("Retry-After"), body)
		}
		// Seven seconds is longer than conch waits itself: it gives up on
		// the first answer and leaves the waiting to the client.
		if n := up.calls() - before; n != 1 {
			t.Errorf("one call made %d upstream requests, want 1", n)
		}
	})

	t.Run("a short Retry-After is waited out", func(t *testing.T) {
		before := up.calls()
		code, _, body := d.do("POST", "/v1/chat/completions", d.Key, chat("limit short"))
		if code != http.StatusOK || !strings.Contains(string(body), "upstream says hi") {
			t.Fatalf("= %d %s, want the answer after a retry", code, body)
		}
		at := up.arrivals()[before:]
		if len(at) != 2 {
			t.Fatalf("upstream got %d requests, want 2", len(at))
		}
		// Not before the second the upstream asked for; the upper bound
		// only allows for a slow machine.
		if gap := at[1].Sub(at[0]); gap < time.Second || gap > 10*time.Second {
			t.Errorf("retried %v after the 429, want at least 1s", gap)
		}
	})

	t.Run("a mistyped field is a 400 naming it", func(t *testing.T) {
		before := up.calls()
		req := chat("hi")
		req["temperature"] = "hot"
		code, body := d.call("POST", "/v1/chat/completions", d.Key, req)
		e := decode(t, body)
		if code != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != "temperature" ||
			!strings.Contains(e.Error.Message, "temperature") {
			t.Fatalf("= %d %s, want 400 with param temperature", code, body)
		}
		if n := up.calls() - before; n != 0 {
			t.Errorf("the upstream was called %d times for a refused request", n)
		}
	})
}
