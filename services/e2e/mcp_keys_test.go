package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMCPActsAsEachRequestsKey: an MCP session acts as the key of each
// request, not of the one that opened it. Another key of the account
// may use the session; revoking the key that opened it ends the session
// (and its sandbox) on its own, and a revoked key is refused at once.
func TestMCPActsAsEachRequestsKey(t *testing.T) {
	d := startDev(t)
	code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "mcp-keys"})
	var acct struct{ ID string }
	if err := json.Unmarshal(body, &acct); code != http.StatusOK || err != nil {
		t.Fatalf("create account = %d %s", code, body)
	}
	newKey := func() (key, id string) {
		t.Helper()
		code, body := d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
		var k struct {
			Key   string `json:"key"`
			KeyID string `json:"key_id"`
		}
		if err := json.Unmarshal(body, &k); code != http.StatusOK || err != nil {
			t.Fatalf("create key = %d %s", code, body)
		}
		return k.Key, k.KeyID
	}
	opener, openerID := newKey()
	other, _ := newKey()
	if code, body := d.call("POST", "/api/v1/gateways", opener, map[string]any{"name": "default", "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true}}); code != http.StatusOK {
		t.Fatalf("create gateway = %d %s", code, body)
	}
	cs := mcpConnect(t, d, opener, "/mcp", nil)
	if r := shell(t, t.Context(), cs, "echo opened"); r.Stdout != "opened\n" {
		t.Fatalf("shell = %+v", r)
	}
	// The account's view, as the other key sees it.
	tenant := &dev{t: t, URL: d.URL, Key: other}
	if !sessionHasSandbox(t, tenant, cs.ID()) {
		t.Fatal("the session has no sandbox")
	}
	post := func(key, msg string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/mcp", bytes.NewReader([]byte(msg)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	if code, body := post(other, list); code != http.StatusOK || !strings.Contains(body, "shell") {
		t.Fatalf("another key of the account on the session = %d %s", code, body)
	}
	if code, body := d.call("DELETE", "/api/v1/accounts/"+acct.ID+"/keys/"+openerID, d.Key, nil); code != http.StatusOK {
		t.Fatalf("revoke = %d %s", code, body)
	}
	if code, _ := post(opener, list); code != http.StatusUnauthorized {
		t.Errorf("the revoked key = %d, want 401", code)
	}
	// The session it opened ends with it, and so does its sandbox.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := post(other, list)
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session of a revoked key = %d %s, want 404", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for sessionHasSandbox(t, tenant, cs.ID()) {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox of a revoked key's session is still up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
