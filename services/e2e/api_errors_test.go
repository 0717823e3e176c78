package e2e

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// apiError is the envelope of every error of /api/v1.
type apiError struct {
	Error *struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// rawCall sends body as it is, valid JSON or not.
func (d *dev) rawCall(method, path, key, body string, headers ...string) (int, http.Header, []byte) {
	d.t.Helper()
	return d.send(method, path, key, strings.NewReader(body), headers...)
}

// leaks are what no answer shows: protobuf's, gRPC's and Go's words, and
// the cluster's addresses.
var leaks = regexp.MustCompile(`proto:|rpc error|(?i:grpc)|desc = |transport: |\.go:\d|\b[a-z]+v1\.[A-Z]|\bGo (struct|value)\b|\b\d{1,3}(\.\d{1,3}){3}:\d+\b`)

// TestAPIErrorEnvelope: every error of /api/v1, from the router, from the
// service behind it or from grpc-gateway, is {"error": {"type", "code",
// "message", "param"}} with its status, and says nothing of conch's
// insides; the file API's downloads answer their errors so too.
func TestAPIErrorEnvelope(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	other := newAccount(t, d, "other")
	var me struct {
		AccountID string `json:"account_id"`
	}
	if _, body := d.call("GET", "/api/v1/quotas", other, nil); json.Unmarshal(body, &me) != nil || me.AccountID == "" {
		t.Fatalf("quotas of the other account: %s", body)
	}
	if code, body := d.call("PUT", "/api/v1/accounts/"+me.AccountID+"/quotas", d.Key, map[string]any{"quotas": map[string]int64{"gateways": 1}}); code != http.StatusOK {
		t.Fatalf("set quotas: %d %s", code, body)
	}
	gw := `{"name": "%s", "upstream": {"provider": "scripted"}}`
	if code, _, body := d.rawCall("POST", "/api/v1/gateways", other, strings.Replace(gw, "%s", "first", 1)); code != http.StatusOK {
		t.Fatalf("gateway: %d %s", code, body)
	}
	sandbox := newSandbox(t, d, map[string]any{})

	tests := []struct {
		name, method, path, key, body string
		headers                       []string
		status                        int
		typ, code, param, message     string
	}{
		{"unknown field", "POST", "/api/v1/sandboxes", d.Key, `{"usr": "alice"}`, nil,
			400, "invalid_request_error", "invalid_argument", "usr", `unknown field "usr"`},
		{"bad JSON", "POST", "/api/v1/gateways", d.Key, `{"name": "x"`, nil,
			400, "invalid_request_error", "invalid_argument", "", "request body is not valid JSON"},
		{"wrong type", "POST", "/api/v1/sandboxes", d.Key, `{"persistent": "yes"}`, nil,
			400, "invalid_request_error", "invalid_argument", "persistent", "persistent: want true or false"},
		{"a field the executor refuses", "POST", "/api/v1/sandboxes", d.Key, `{"limits": {"pids": 1000000}}`, nil,
			400, "invalid_request_error", "invalid_argument", "limits.pids", "limits.pids: 1000000 is above the ceiling"},
		{"a document the approval service refuses", "PUT", "/api/v1/exec-approvals", d.Key, `{"version": 2}`, nil,
			400, "invalid_request_error", "invalid_argument", "version", "version: want 1"},
		{"unknown path", "GET", "/api/v1/sandboxez", d.Key, "", nil,
			404, "not_found_error", "not_found", "", "unknown path GET /api/v1/sandboxez"},
		{"no auth", "GET", "/api/v1/sandboxes", "", "", nil,
			401, "authentication_error", "invalid_api_key", "", "Authorization"},
		{"admin only", "POST", "/api/v1/accounts", other, `{"name": "x"}`, nil,
			403, "permission_error", "permission_denied", "", "admin"},
		{"another account's sandbox", "GET", "/api/v1/sandboxes/" + sandbox, other, "", nil,
			404, "not_found_error", "not_found", "", sandbox},
		{"another account's sandbox, deleted", "DELETE", "/api/v1/sandboxes/" + sandbox, other, "", nil,
			404, "not_found_error", "not_found", "", sandbox},
		{"quota exceeded", "POST", "/api/v1/gateways", other, strings.Replace(gw, "%s", "second", 1), nil,
			429, "rate_limit_error", "quota_exceeded", "", "quota gateways exceeded (1 of 1)"},
		{"a download of nothing", "GET", "/api/v1/shell/io/download?path=/none.txt", d.Key, "", []string{"X-Shell-User-Id", "alice"},
			404, "not_found_error", "not_found", "", "none.txt"},
		{"a download without its path", "GET", "/api/v1/shell/io/download", d.Key, "", []string{"X-Shell-User-Id", "alice"},
			400, "invalid_request_error", "invalid_argument", "path", "path: exactly one"},
		{"a bad user header", "GET", "/api/v1/shell/io/list?path=/", d.Key, "", []string{"X-Shell-User-Id", "../x"},
			400, "invalid_request_error", "invalid_argument", "X-Shell-User-Id", "X-Shell-User-Id: must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, body := d.rawCall(tt.method, tt.path, tt.key, tt.body, tt.headers...)
			if m := leaks.FindString(string(body)); m != "" {
				t.Errorf("the answer shows %q: %s", m, body)
			}
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || h.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s (%s) is not the envelope: %v", code, body, h.Get("Content-Type"), err)
			}
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if code != tt.status || e.Error.Type != tt.typ || e.Error.Code != tt.code || param != tt.param || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("%d %s, want %d %s %s param %q with %q", code, body, tt.status, tt.typ, tt.code, tt.param, tt.message)
			}
		})
	}
}
