package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDev checks the foundation through the public HTTP API of `conch dev`:
// readiness, auth, that a REST call reaches each of the four services, accounts
// and keys, and a clean shutdown.
func TestDev(t *testing.T) {
	d := startDev(t)

	t.Run("health, readiness and metrics need no key", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			code, body := d.call("GET", path, "", nil)
			if code != http.StatusOK {
				t.Errorf("GET %s = %d %s, want 200", path, code, body)
			}
		}
		_, body := d.call("GET", "/readyz", "", nil)
		var ready struct {
			Status   string            `json:"status"`
			Services map[string]string `json:"services"`
		}
		if err := json.Unmarshal(body, &ready); err != nil {
			t.Fatalf("readyz body %s: %v", body, err)
		}
		for _, svc := range []string{"router", "executor", "approval", "workspace"} {
			if ready.Services[svc] != "ok" {
				t.Errorf("readyz: %s = %q, want ok", svc, ready.Services[svc])
			}
		}
		_, metrics := d.call("GET", "/metrics", "", nil)
		if !strings.Contains(string(metrics), "rpc_server_") {
			t.Errorf("/metrics has no gRPC server metrics:\n%s", tail(string(metrics), 2000))
		}
	})

	t.Run("a REST call reaches each service", func(t *testing.T) {
		tests := []struct {
			service, method, path string
			headers               []string
			wantCode              int
			wantBody              string
		}{
			{"router", "GET", "/api/v1/accounts", nil, 200, `"id":"dev"`},
			{"executor", "GET", "/api/v1/sandboxes", nil, 200, `"sandboxes":[]`},
			{"approval", "GET", "/api/v1/approvals?state=pending", nil, 200, `"approvals":[]`},
			{"workspace", "GET", "/api/v1/shell/io/list?path=/", []string{"X-Shell-User-Id", "alice"}, 200, `"entries":[]`},
		}
		for _, tt := range tests {
			code, body := d.call(tt.method, tt.path, d.Key, nil, tt.headers...)
			if code != tt.wantCode || !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("%s: %s %s = %d %s, want %d containing %q", tt.service, tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		}
	})

	t.Run("calls without a valid key get 401", func(t *testing.T) {
		auths := map[string]string{
			"none":         "",
			"wrong key":    "Bearer conch_not-a-key-at-all",
			"basic":        "Basic ZGV2OmRldg==",
			"empty bearer": "Bearer ",
			"two tokens":   "Bearer " + d.Key + " x",
		}
		paths := []struct{ method, path, shape string }{
			{"GET", "/api/v1/accounts", `"type":"authentication_error","code":"invalid_api_key"`},
			{"GET", "/api/v1/sandboxes", `"type":"authentication_error","code":"invalid_api_key"`},
			{"GET", "/v1/models", `"invalid_api_key"`},
			{"POST", "/v1/chat/completions", `"invalid_api_key"`},
		}
		for name, auth := range auths {
			for _, p := range paths {
				code, body := d.call(p.method, p.path, "", nil, "Authorization", auth)
				if code != http.StatusUnauthorized || !strings.Contains(string(body), p.shape) {
					t.Errorf("%s: %s %s = %d %s, want 401 with %s", name, p.method, p.path, code, body, p.shape)
				}
			}
		}
	})

	t.Run("accounts and keys", func(t *testing.T) {
		code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "Acme"})
		if code != http.StatusOK {
			t.Fatalf("create account = %d %s", code, body)
		}
		var acct struct{ ID, Name string }
		if err := json.Unmarshal(body, &acct); err != nil || acct.ID == "" || acct.Name != "Acme" {
			t.Fatalf("create account body %s (err %v)", body, err)
		}
		code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
		if code != http.StatusOK {
			t.Fatalf("create key = %d %s", code, body)
		}
		var key struct {
			Key   string `json:"key"`
			KeyID string `json:"key_id"`
		}
		if err := json.Unmarshal(body, &key); err != nil || key.Key == "" || key.KeyID == "" {
			t.Fatalf("create key body %s (err %v)", body, err)
		}

		// The new key authenticates, but it is not the admin's, even when
		// the client tries to smuggle the scope through grpc-gateway.
		code, body = d.call("GET", "/api/v1/sandboxes", key.Key, nil)
		if code != http.StatusOK {
			t.Errorf("account key on executor = %d %s, want 200", code, body)
		}
		code, body = d.call("GET", "/api/v1/accounts", key.Key, nil,
			"Grpc-Metadata-Conch-Admin", "true", "Grpc-Metadata-Conch-Account", "dev", "Conch-Admin", "true")
		if code != http.StatusForbidden {
			t.Errorf("account key listing accounts = %d %s, want 403", code, body)
		}

		// Bad input is refused with the field named.
		code, body = d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": ""})
		if code != http.StatusBadRequest || !strings.Contains(string(body), "name") {
			t.Errorf("empty account name = %d %s, want 400 naming name", code, body)
		}
		code, body = d.call("POST", "/api/v1/accounts/acct-missing/keys", d.Key, map[string]string{})
		if code != http.StatusNotFound {
			t.Errorf("key for missing account = %d %s, want 404", code, body)
		}
		code, body = d.call("GET", "/api/v1/sandboxes", d.Key, nil, "X-Shell-User-Id", "../bob")
		if code != http.StatusBadRequest || !strings.Contains(string(body), "X-Shell-User-Id") {
			t.Errorf("bad user id = %d %s, want 400 naming X-Shell-User-Id", code, body)
		}

		// Revoked keys stop working at once.
		code, body = d.call("DELETE", "/api/v1/accounts/"+acct.ID+"/keys/"+key.KeyID, d.Key, nil)
		if code != http.StatusOK {
			t.Fatalf("delete key = %d %s", code, body)
		}
		code, body = d.call("GET", "/api/v1/sandboxes", key.Key, nil)
		if code != http.StatusUnauthorized {
			t.Errorf("revoked key = %d %s, want 401", code, body)
		}
		code, _ = d.call("DELETE", "/api/v1/accounts/"+acct.ID+"/keys/"+key.KeyID, d.Key, nil)
		if code != http.StatusNotFound {
			t.Errorf("deleting a revoked key again = %d, want 404", code)
		}
	})

	t.Run("SIGTERM shuts down cleanly within 5s", func(t *testing.T) {
		took, err := d.stop(5 * time.Second)
		if err != nil {
			t.Fatalf("after %v: %v", took, err)
		}
		t.Logf("shutdown took %v", took)
		if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(d.URL, "http://"), time.Second); err == nil {
			conn.Close()
			t.Error("HTTP port still accepts connections after exit")
		}
		if left := processesMentioning(d.DataDir); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
	})
}

// processesMentioning lists the pids whose command line contains s.
func processesMentioning(s string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestDevAPIKeyFromEnv checks that CONCH_API_KEY becomes the dev account's
// key and is written to the data dir.
func TestDevAPIKeyFromEnv(t *testing.T) {
	const key = "conch_test_0123456789abcdef"
	d := startDev(t, "CONCH_API_KEY="+key)
	if d.Key != key {
		t.Errorf("api-key file = %q, want %q", d.Key, key)
	}
	if code, body := d.call("GET", "/api/v1/accounts", key, nil); code != http.StatusOK {
		t.Errorf("env key = %d %s, want 200", code, body)
	}
}
