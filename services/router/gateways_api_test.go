package router

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/gateways"
)

// gatewayREST serves GatewayService's REST routes in process, with the
// router's JSON codec and errors.
func gatewayREST(t *testing.T) http.Handler {
	t.Helper()
	mux := runtime.NewServeMux(gatewayMuxOptions(nil)...)
	store, err := gateways.New(etcdxtest.StartForTest(t), sealtest.Keyring(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := &gatewayServer{store: store}
	if err := routerv1.RegisterGatewayServiceHandlerServer(t.Context(), mux, srv); err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), tenant.Scope{Account: "acme"})))
	})
}

// PATCH changes only the fields its body (or its update_mask) names; PUT
// replaces the whole gateway. Both keep secrets they do not set.
func TestGatewayPatchREST(t *testing.T) {
	t.Parallel()
	h := gatewayREST(t)
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, rec.Code, rec.Body, err)
		}
		return rec.Code, out
	}
	const full = `{"name": "prod",
		"upstream": {"provider": "openai", "model": "gpt-4.1", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-secret"},
		"shell": {"enabled": false, "timeout_seconds": 30, "allow_request": false},
		"max_iterations": 7}`

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		// want holds fields of the answer, as dotted paths; for an error,
		// "error.message" holds a part of the message.
		want map[string]any
	}{
		{"create", "POST", "/api/v1/gateways", full, http.StatusOK, map[string]any{"shell.timeout_seconds": 30.0, "upstream.api_key_set": true}},
		{"patch one field", "PATCH", "/api/v1/gateways/prod", `{"shell": {"enabled": true}}`, http.StatusOK, map[string]any{
			"shell.enabled": true, "shell.timeout_seconds": 30.0, "shell.allow_request": false, "upstream.model": "gpt-4.1",
			"upstream.base_url": "http://127.0.0.1:9/v1", "upstream.api_key_set": true, "upstream.api_key": "", "max_iterations": 7.0}},
		{"patch in camelCase", "PATCH", "/api/v1/gateways/prod", `{"maxIterations": 9, "shell": {"timeoutSeconds": 45}}`, http.StatusOK, map[string]any{
			"max_iterations": 9.0, "shell.timeout_seconds": 45.0, "shell.enabled": true, "upstream.model": "gpt-4.1"}},
		{"patch with an explicit mask", "PATCH", "/api/v1/gateways/prod?update_mask=upstream.model", `{"upstream": {"model": "gpt-5", "base_url": "http://ignored.example/v1"}, "max_iterations": 1}`, http.StatusOK, map[string]any{
			"upstream.model": "gpt-5", "upstream.base_url": "http://127.0.0.1:9/v1", "max_iterations": 9.0, "upstream.api_key_set": true}},
		{"empty patch changes nothing", "PATCH", "/api/v1/gateways/prod", `{}`, http.StatusOK, map[string]any{
			"upstream.model": "gpt-5", "max_iterations": 9.0, "shell.enabled": true}},
		{"patch to an invalid value", "PATCH", "/api/v1/gateways/prod", `{"shell": {"timeout_seconds": 301}}`, http.StatusBadRequest, map[string]any{"error.message": "shell.timeout_seconds:", "error.param": "shell.timeout_seconds"}},
		{"patch to an invalid whole", "PATCH", "/api/v1/gateways/prod", `{"shell": {"network": {"allowed_domains": ["example.com"]}}}`, http.StatusBadRequest, map[string]any{"error.message": "shell.network.allowed_domains: needs mode allowlist"}},
		{"unknown mask path", "PATCH", "/api/v1/gateways/prod?update_mask=shell.bogus", `{}`, http.StatusBadRequest, map[string]any{"error.message": `update_mask: "shell.bogus"`}},
		{"unknown body field", "PATCH", "/api/v1/gateways/prod", `{"shell": {"bogus": 1}}`, http.StatusBadRequest, map[string]any{"error.message": `unknown field "shell.bogus"`, "error.param": "shell.bogus"}},
		{"rename", "PATCH", "/api/v1/gateways/prod", `{"name": "other"}`, http.StatusBadRequest, map[string]any{"error.message": "name:"}},
		{"missing", "PATCH", "/api/v1/gateways/nope", `{"max_iterations": 2}`, http.StatusNotFound, map[string]any{"error.message": "not found", "error.type": "not_found_error", "error.param": nil}},
		{"nothing was lost", "GET", "/api/v1/gateways/prod", ``, http.StatusOK, map[string]any{
			"upstream.model": "gpt-5", "upstream.api_key_set": true, "max_iterations": 9.0, "shell.timeout_seconds": 45.0, "shell.allow_request": false}},
		{"put replaces", "PUT", "/api/v1/gateways/prod", `{"upstream": {"provider": "openai", "model": "gpt-4.1"}}`, http.StatusOK, map[string]any{
			"upstream.model": "gpt-4.1", "upstream.base_url": "", "upstream.api_key_set": true, "max_iterations": 0.0, "shell": nil}},
	}
	for _, tt := range tests {
		code, got := call(tt.method, tt.path, tt.body)
		if code != tt.wantCode {
			t.Errorf("%s: %s %s = %d %v, want %d", tt.name, tt.method, tt.path, code, got, tt.wantCode)
			continue
		}
		for path, want := range tt.want {
			v := lookup(got, path)
			if path == "error.message" {
				if s, _ := v.(string); !strings.Contains(s, want.(string)) {
					t.Errorf("%s: message %q, want it to contain %q", tt.name, s, want)
				}
				continue
			}
			if !cmp.Equal(v, want) {
				t.Errorf("%s: %s = %v, want %v (answer %v)", tt.name, path, v, want, got)
			}
		}
	}
}

// lookup returns the value at a dotted path of a decoded JSON object.
func lookup(obj map[string]any, path string) any {
	var v any = obj
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}
