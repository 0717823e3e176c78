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

// A browser opens a terminal with a short-lived token a key asked for,
// which opens that one sandbox's terminal, as that key, until it expires
// or the key is revoked.
func TestTerminalToken(t *testing.T) {
	d := startDev(t)
	code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "browser"})
	var acct struct{ ID string }
	if err := json.Unmarshal(body, &acct); code != 200 || err != nil {
		t.Fatalf("create account = %d %s", code, body)
	}
	code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
	var k struct {
		Key   string
		KeyID string `json:"key_id"`
	}
	if err := json.Unmarshal(body, &k); code != 200 || err != nil {
		t.Fatalf("create key = %d %s", code, body)
	}
	sandbox := func(key string) string {
		t.Helper()
		status, body := d.call("POST", "/api/v1/sandboxes", key, map[string]any{})
		var sb struct{ ID string }
		if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
			t.Fatalf("create = %d %s", status, body)
		}
		return sb.ID
	}
	mine, theirs := sandbox(k.Key), sandbox(d.Key)
	type minted struct {
		Token     string
		URL       string
		ExpiresAt time.Time `json:"expires_at"`
	}
	mint := func(key, id string, body any) (int, minted, string) {
		t.Helper()
		status, raw := d.call("POST", "/api/v1/sandboxes/"+id+"/terminal:token", key, body)
		var m minted
		if status == 200 {
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
		}
		return status, m, string(raw)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(d.URL, "http")
	dial := func(path string) (*websocket.Conn, int) {
		t.Helper()
		c, resp, err := websocket.Dial(ctx, ws+path, nil)
		if err != nil {
			if resp == nil {
				t.Fatalf("dial %s: %v", path, err)
			}
			return nil, resp.StatusCode
		}
		return c, http.StatusSwitchingProtocols
	}

	status, m, raw := mint(k.Key, mine, nil)
	if status != 200 || !strings.HasPrefix(m.URL, "/api/v1/sandboxes/"+mine+"/terminal?token=") || time.Until(m.ExpiresAt) > time.Minute+time.Second || time.Until(m.ExpiresAt) < 50*time.Second {
		t.Fatalf("mint = %d %s", status, raw)
	}
	c, code := dial(m.URL)
	if c == nil {
		t.Fatalf("a terminal by token: %d", code)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("echo by-$((2*3)); exit\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "by-6") {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v; so far %q", err, out.String())
		}
		out.Write(b)
	}
	c.CloseNow()

	_, shortTok, _ := mint(k.Key, mine, map[string]any{"expires_in_seconds": 1})
	tok := strings.TrimPrefix(m.URL, "/api/v1/sandboxes/"+mine+"/terminal?token=")
	for _, tc := range []struct {
		name string
		path string
		want int
	}{
		{"for another sandbox", "/api/v1/sandboxes/" + theirs + "/terminal?token=" + tok, http.StatusForbidden},
		{"changed", m.URL[:len(m.URL)-2] + "xx", http.StatusUnauthorized},
		{"empty", "/api/v1/sandboxes/" + mine + "/terminal?token=", http.StatusUnauthorized},
	} {
		if c, code := dial(tc.path); c != nil || code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	time.Sleep(2100 * time.Millisecond)
	if c, code := dial(shortTok.URL); c != nil || code != http.StatusUnauthorized {
		t.Errorf("an expired token: %d, want 401", code)
	}
	for _, tc := range []struct {
		name, key, id string
		body          any
		want          int
	}{
		{"another account's sandbox", k.Key, theirs, nil, http.StatusNotFound},
		{"no key", "", mine, nil, http.StatusUnauthorized},
		{"too long", k.Key, mine, map[string]any{"expires_in_seconds": 601}, http.StatusBadRequest},
		{"negative", k.Key, mine, map[string]any{"expires_in_seconds": -1}, http.StatusBadRequest},
		{"unknown field", k.Key, mine, map[string]any{"ttl": 5}, http.StatusBadRequest},
	} {
		if status, _, raw := mint(tc.key, tc.id, tc.body); status != tc.want {
			t.Errorf("mint for %s = %d %s, want %d", tc.name, status, raw, tc.want)
		}
	}
	// A revoked key's tokens open nothing.
	if code, body := d.call("DELETE", "/api/v1/accounts/"+acct.ID+"/keys/"+k.KeyID, d.Key, nil); code != 200 {
		t.Fatalf("revoke = %d %s", code, body)
	}
	if c, code := dial(m.URL); c != nil || code != http.StatusUnauthorized {
		t.Errorf("a revoked key's token: %d, want 401", code)
	}
}
