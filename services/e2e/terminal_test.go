package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A terminal through the router's WebSocket: keystrokes in as binary
// frames, a resize as a text frame, the output back, the exit last; the
// CLI's attach does the same from a pipe.
func TestTerminalWebSocket(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(d.URL, "http") + "/api/v1/sandboxes/" + sb.ID + "/terminal?rows=30&cols=90"
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	var out strings.Builder
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			typ, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v; so far %q", err, out.String())
			}
			if typ == websocket.MessageBinary {
				out.Write(b)
			} else {
				out.WriteString("<" + string(b) + ">")
			}
		}
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("echo hi-$((1+1)); stty size\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("30 90")
	if !strings.Contains(out.String(), "hi-2") {
		t.Errorf("output %q", out.String())
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"resize","rows":40,"cols":120}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("stty size; exit 5\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(`<{"type":"exit","exit_code":5}>`)
	if !strings.Contains(out.String(), "40 120") {
		t.Errorf("after the resize: %q", out.String())
	}

	// Without a key: 401, before any upgrade; no sandbox: 404.
	if _, resp, err := websocket.Dial(ctx, wsURL, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a terminal without a key: %v %v", resp, err)
	}
	if _, resp, err := websocket.Dial(ctx, strings.Replace(wsURL, sb.ID, "sb-nope", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}}); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("a terminal to no sandbox: %v %v", resp, err)
	}

	// A gateway under allowlist refuses a terminal, with its reason.
	createGateway(t, d, map[string]any{"name": "strict", "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"enabled": true}, "exec": map[string]any{"security": "allowlist", "ask": "off"}})
	status, body = d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"agent": "strict"})
	var strict struct{ ID string }
	if err := json.Unmarshal(body, &strict); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	_, resp, err := websocket.Dial(ctx, strings.Replace(wsURL, sb.ID, strict.ID, 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a terminal under allowlist: %v %v", resp, err)
	}

	// The CLI from a pipe: no raw mode, the same shell.
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	got, errOut, code := runConchInput(t, env, "echo from-cli; exit 4\n", "sandbox", "attach", sb.ID)
	if !strings.Contains(got, "from-cli") || code != 4 {
		t.Errorf("conch sandbox attach: %q %q %d", got, errOut, code)
	}
}
