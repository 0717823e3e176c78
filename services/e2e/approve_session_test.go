package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestApproveInTheConversation forwards approvals to the session that asked
// (mode session): a streamed completion shows its pending approval as text
// with how to answer, and the conversation's user answers with /approve in
// the same session — not from another session, and not when the account
// does not forward to sessions.
func TestApproveInTheConversation(t *testing.T) {
	d := startDev(t)
	createGateway(t, d, map[string]any{"name": "in-chat", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	forwarding := func(mode string) {
		t.Helper()
		if code, body := d.call("PUT", "/api/v1/approvals/forwarding", d.Key, map[string]any{"enabled": true, "mode": mode}); code != http.StatusOK {
			t.Fatalf("put forwarding = %d %s", code, body)
		}
	}
	forwarding("session")

	// stream starts a streamed completion in session and sends the id of
	// the approval it asks for, then the whole stream once it ends.
	stream := func(session, command string) (<-chan string, <-chan string) {
		ids, all := make(chan string, 1), make(chan string, 1)
		b, _ := json.Marshal(map[string]any{"model": "in-chat", "stream": true,
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}}, "tools": []map[string]string{{"type": "shell"}}})
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/v1/chat/completions", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+d.Key)
			req.Header.Set("X-Conch-Session-Id", session)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				all <- err.Error()
				return
			}
			defer resp.Body.Close()
			var text strings.Builder
			re := regexp.MustCompile(`Exec approval request \(id: ([A-Za-z0-9_-]+)\)`)
			sent := false
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := strings.TrimPrefix(sc.Text(), "data: ")
				var chunk struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
				}
				if json.Unmarshal([]byte(line), &chunk) == nil && len(chunk.Choices) > 0 {
					text.WriteString(chunk.Choices[0].Delta.Content)
				}
				if m := re.FindStringSubmatch(text.String()); m != nil && !sent {
					sent = true
					if !strings.Contains(text.String(), "/approve "+m[1]+" allow-once") {
						t.Errorf("the notice does not say how to answer: %q", text.String())
					}
					ids <- m[1]
				}
				text.WriteString("\n" + line)
			}
			all <- text.String()
		}()
		return ids, all
	}
	say := func(session, text string) string {
		t.Helper()
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{"model": "in-chat",
			"messages": []map[string]string{{"role": "user", "content": text}}}, "X-Conch-Session-Id", session)
		if code != http.StatusOK {
			t.Fatalf("say %q = %d %s", text, code, body)
		}
		return string(body)
	}
	await := func(ids <-chan string) string {
		t.Helper()
		select {
		case id := <-ids:
			return id
		case <-time.After(30 * time.Second):
			t.Fatal("no approval notice in the stream")
		}
		return ""
	}
	marker := fmt.Sprintf("/tmp/conch-e2e-in-chat-%d", time.Now().UnixNano())

	ids, all := stream("conv-1", "touch "+marker)
	id := await(ids)
	if out := say("conv-2", "/approve "+id+" allow-once"); !strings.Contains(out, "refused") || !strings.Contains(out, "not found") {
		t.Fatalf("another session answered: %s", out)
	}
	if out := say("conv-1", "/approve "+id+" maybe"); !strings.Contains(out, "refused") {
		t.Fatalf("a bad decision: %s", out)
	}
	if out := say("conv-1", "/approve "+id+" allow-once"); !strings.Contains(out, "allowed once") {
		t.Fatalf("/approve in the session: %s", out)
	}
	if out := <-all; !strings.Contains(out, `\"exit_code\":0`) {
		t.Fatalf("the approved command did not run: %s", out)
	}

	ids, all = stream("conv-1", "touch "+marker+"-denied")
	id = await(ids)
	if out := say("conv-1", "/approve "+id+" deny"); !strings.Contains(out, "denied") {
		t.Fatalf("/approve deny: %s", out)
	}
	if out := <-all; !strings.Contains(out, "Command not allowed by exec policy") {
		t.Fatalf("the denied command: %s", out)
	}

	// With forwarding to targets only, the conversation does not answer.
	forwarding("targets")
	if out := say("conv-1", "/approve "+id+" allow-once"); !strings.Contains(out, "not session or both") {
		t.Fatalf("/approve with mode targets: %s", out)
	}
}
