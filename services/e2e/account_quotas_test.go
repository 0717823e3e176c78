package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAccountQuotas: each account's use is bounded per quota, with the
// operator's defaults and an admin's overrides; beyond one is a 429
// naming it, and GET /api/v1/quotas shows limits and usage.
func TestAccountQuotas(t *testing.T) {
	t.Parallel()
	d := startDev(t, "CONCH_QUOTA_GATEWAYS=1")
	key := newAccount(t, d, "bounded")
	var me struct {
		AccountID string `json:"account_id"`
		Quotas    []struct {
			Name        string
			Limit, Used json.Number
		}
	}
	quotas := func(t *testing.T) map[string][2]string {
		t.Helper()
		code, body := d.call("GET", "/api/v1/quotas", key, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/quotas: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &me); err != nil {
			t.Fatal(err)
		}
		out := map[string][2]string{}
		for _, q := range me.Quotas {
			out[q.Name] = [2]string{q.Used.String(), q.Limit.String()}
		}
		return out
	}
	if q := quotas(t); q["gateways"] != [2]string{"0", "1"} || q["api_keys"] != [2]string{"1", "100"} {
		t.Fatalf("quotas of a new account: %v", q)
	}
	// Only the admin gives an account its own quotas.
	set := map[string]any{"quotas": map[string]int64{"sandboxes": 2, "stored_responses": 1, "api_keys": 2, "mcp_sessions": 1}}
	if code, body := d.call("PUT", "/api/v1/accounts/"+me.AccountID+"/quotas", key, set); code != http.StatusForbidden {
		t.Fatalf("tenant setting its own quotas: %d %s", code, body)
	}
	if code, body := d.call("PUT", "/api/v1/accounts/"+me.AccountID+"/quotas", d.Key, set); code != http.StatusOK || !strings.Contains(string(body), `"sandboxes":2`) {
		t.Fatalf("admin setting quotas: %d %s", code, body)
	}
	if code, body := d.call("PUT", "/api/v1/accounts/"+me.AccountID+"/quotas", d.Key, map[string]any{"quotas": map[string]int64{"sandboxez": 1}}); code != http.StatusBadRequest {
		t.Fatalf("an unknown quota: %d %s", code, body)
	}

	exceeded := func(t *testing.T, code int, body []byte, want string) {
		t.Helper()
		if code != http.StatusTooManyRequests || !strings.Contains(string(body), want) {
			t.Fatalf("%d %s, want 429 with %q", code, body, want)
		}
	}
	// Sandboxes: two live, the third refused; two racing for the last
	// slot, one wins.
	var ids []string
	for range 2 {
		code, body := d.call("POST", "/api/v1/sandboxes", key, map[string]any{})
		if code != http.StatusOK {
			t.Fatalf("sandbox: %d %s", code, body)
		}
		var sb struct{ ID string }
		_ = json.Unmarshal(body, &sb)
		ids = append(ids, sb.ID)
	}
	code, body := d.call("POST", "/api/v1/sandboxes", key, map[string]any{})
	exceeded(t, code, body, "quota sandboxes exceeded (2 of 2)")
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+ids[0], key, nil); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() { codes[i], _ = d.call("POST", "/api/v1/sandboxes", key, map[string]any{}) })
	}
	wg.Wait()
	if !(codes[0] == http.StatusOK && codes[1] == http.StatusTooManyRequests) && !(codes[1] == http.StatusOK && codes[0] == http.StatusTooManyRequests) {
		t.Fatalf("two creates racing for the last sandbox: %v, want one 200 and one 429", codes)
	}
	if q := quotas(t); q["sandboxes"] != [2]string{"2", "2"} || q["sandbox_memory_bytes"][0] != "1073741824" {
		t.Fatalf("quotas with two sandboxes: %v", q)
	}

	// Gateways: the operator's default of one.
	gw := map[string]any{"name": "default", "upstream": map[string]any{"provider": "scripted"}}
	if code, body := d.call("POST", "/api/v1/gateways", key, gw); code != http.StatusOK {
		t.Fatalf("gateway: %d %s", code, body)
	}
	gw["name"] = "second"
	code, body = d.call("POST", "/api/v1/gateways", key, gw)
	exceeded(t, code, body, "quota gateways exceeded (1 of 1)")

	// API keys: it has one; the admin makes a second, not a third.
	if code, body := d.call("POST", "/api/v1/accounts/"+me.AccountID+"/keys", d.Key, map[string]any{}); code != http.StatusOK {
		t.Fatalf("second key: %d %s", code, body)
	}
	code, body = d.call("POST", "/api/v1/accounts/"+me.AccountID+"/keys", d.Key, map[string]any{})
	exceeded(t, code, body, "quota api_keys exceeded (2 of 2)")

	// Stored responses: one; the second is refused before the model
	// runs, and a deleted one makes room.
	resp := func() (int, []byte) {
		return d.call("POST", "/v1/responses", key, map[string]any{"model": "default", "input": "hello"})
	}
	code, body = resp()
	if code != http.StatusOK {
		t.Fatalf("response: %d %s", code, body)
	}
	var r struct{ ID string }
	_ = json.Unmarshal(body, &r)
	code, body = resp()
	exceeded(t, code, body, "quota stored_responses exceeded (1 of 1)")
	if code, body := d.call("POST", "/v1/responses", key, map[string]any{"model": "default", "input": "hello", "store": false}); code != http.StatusOK {
		t.Fatalf("a response not stored is no stored response: %d %s", code, body)
	}
	if code, body := d.call("DELETE", "/v1/responses/"+r.ID, key, nil); code != http.StatusOK {
		t.Fatalf("delete response: %d %s", code, body)
	}
	if code, body := resp(); code != http.StatusOK {
		t.Fatalf("response after a delete: %d %s", code, body)
	}
	if q := quotas(t); q["stored_responses"] != [2]string{"1", "1"} {
		t.Fatalf("quotas with one stored response: %v", q)
	}

	// MCP sessions: one open; a second initialize is refused until the
	// first ends.
	initialize := func() (int, []byte) {
		return d.call("POST", "/mcp", key, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
			"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "e2e", "version": "1"}}},
			"Accept", "application/json, text/event-stream", "Content-Type", "application/json")
	}
	cs := mcpConnect(t, d, key, "/mcp", nil)
	code, body = initialize()
	exceeded(t, code, body, "quota mcp_sessions exceeded (1 of 1)")
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body = initialize()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("initialize after the session ended: %d %s", code, body)
		}
	}
}
