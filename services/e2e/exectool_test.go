package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestExecTool drives the rich exec and process tools: a command that moves
// to the background after yieldMs, followed with process poll (which waits
// for new output), log, write and kill.
func TestExecTool(t *testing.T) {
	d := startDev(t)
	calls := []struct{ tool, args string }{
		{"exec", `{"command":"echo now"}`},
		{"exec", `{"command":"echo started; sleep 0.5; echo finished","yieldMs":200}`},
		{"process", `{"action":"list"}`},
		{"process", `{"action":"poll","sessionId":"$1"}`},
		{"exec", `{"command":"read line; echo got $line","background":true}`},
		{"process", `{"action":"write","sessionId":"$4","data":"hello\n"}`},
		{"process", `{"action":"poll","sessionId":"$4"}`},
		{"process", `{"action":"log","sessionId":"$4"}`},
		{"exec", `{"command":"sleep 60","background":true}`},
		{"process", `{"action":"kill","sessionId":"$8"}`},
		{"exec", `{"command":"true","host":"gateway"}`},
		{"exec", `{"command":"env","env":{"LD_PRELOAD":"/tmp/x.so"}}`},
	}
	var results []string
	sessions := map[int]string{}
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n > 0 {
			results = append(results, lastToolResult(req))
			var r struct {
				SessionID string `json:"sessionId"`
			}
			if json.Unmarshal([]byte(results[n-1]), &r) == nil {
				sessions[n-1] = r.SessionID
			}
		}
		if n >= len(calls) {
			return 200, openAIText("done")
		}
		args := calls[n].args
		for i, id := range sessions {
			args = strings.ReplaceAll(args, fmt.Sprintf("$%d", i), id)
		}
		return 200, openAIToolCall(fmt.Sprintf("call_%d", n), calls[n].tool, json.RawMessage(args))
	})
	createGateway(t, d, map[string]any{"name": "rich", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
	code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
		"model": "rich", "messages": []map[string]string{{"role": "user", "content": "go"}}, "tools": []map[string]string{{"type": "exec"}},
	})
	if code != 200 {
		t.Fatalf("completion = %d %s", code, body)
	}
	if len(results) != len(calls) {
		t.Fatalf("got %d results: %q", len(results), results)
	}
	want := []string{
		`"status":"completed"`,
		`"status":"running"`,
		`"processes":[`,
		`finished`,
		`"status":"running"`,
		`{"ok":true}`,
		`got hello`,
		`got hello`,
		`"status":"running"`,
		`"state":"exited"`,
		`host gateway is not allowed`,
		`LD_PRELOAD`,
	}
	for i, w := range want {
		if !strings.Contains(results[i], w) {
			t.Errorf("%s %s = %s, want it to contain %s", calls[i].tool, calls[i].args, results[i], w)
		}
	}
	if !strings.Contains(results[1], `"stdout":"started\n"`) {
		t.Errorf("backgrounded exec must return the output so far: %s", results[1])
	}
}
