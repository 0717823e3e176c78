package router_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/router"
	"github.com/conch-sh/conch/services/router/apierror"
)

const adminKey = "errors-test-admin-key-0123456789"

// startRouter is the router's HTTP handler in front of its own gRPC
// services, as a cluster runs them; the other services' connections lead
// to a port nothing listens on.
func startRouter(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	signer, err := tenant.NewSigner("internal-secret-for-the-errors-test")
	if err != nil {
		t.Fatal(err)
	}
	rsvc, err := router.New(ctx, cli, router.Config{AdminKey: adminKey, AdminAccount: "dev", KeyConfig: seal.KeyConfig{SecretsKey: sealtest.KeyText(t)}}, outbound.Must(outbound.Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcserver.New(grpcserver.Options{
		Name:               "router",
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{signer.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{signer.StreamServerInterceptor()},
	})
	rsvc.Register(gs.GRPC())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Shutdown(context.WithoutCancel(ctx)) })
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	// A port that was free a moment ago: the calls fail in gRPC's transport.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	_ = gone.Close()
	conns := map[string]*grpc.ClientConn{"router": dial(lis.Addr().String())}
	for _, n := range router.ServiceNames[1:] {
		conns[n] = dial(goneAddr)
	}
	responses, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := router.NewHTTPHandler(ctx, router.HTTPOptions{Etcd: cli, Service: rsvc, Conns: conns, Metrics: http.NotFoundHandler(), ResponseObjects: responses})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// call sends body (raw JSON; "" for none) with key ("" for none).
func call(t *testing.T, url, method, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// insides are what an answer must never show: protobuf's and gRPC's
// words (its transport's among them), Go source positions and type names,
// and the cluster's addresses.
var insides = regexp.MustCompile(`proto:|rpc error|(?i:grpc)|desc = |transport: |\.go:\d|\*?\b[a-z]+v1\.[A-Z]|\*errs\.|\bGo (struct|value)\b|map\[string\]|\b\d{1,3}(\.\d{1,3}){3}:\d+\b|\[[0-9a-f:]+\]:\d+`)

// TestAPIErrors: every error of /api/v1 is the one envelope, with the
// status, type, code and param its cause calls for, and no message shows
// conch's insides.
func TestAPIErrors(t *testing.T) {
	t.Parallel()
	url := startRouter(t)

	// Another account, with room for one gateway, and a gateway of the
	// admin's account.
	_, _, body := call(t, url, "POST", "/api/v1/accounts", adminKey, `{"name": "other"}`)
	var acct struct{ ID string }
	if err := json.Unmarshal(body, &acct); err != nil || acct.ID == "" {
		t.Fatalf("create account: %s", body)
	}
	_, _, body = call(t, url, "POST", "/api/v1/accounts/"+acct.ID+"/keys", adminKey, `{}`)
	var key struct{ Key string }
	if err := json.Unmarshal(body, &key); err != nil || key.Key == "" {
		t.Fatalf("create key: %s", body)
	}
	if code, _, body := call(t, url, "PUT", "/api/v1/accounts/"+acct.ID+"/quotas", adminKey, `{"quotas": {"gateways": 1}}`); code != http.StatusOK {
		t.Fatalf("set quotas: %d %s", code, body)
	}
	const gateway = `{"name": "%s", "upstream": {"provider": "scripted"}}`
	for _, g := range []struct{ key, name string }{{adminKey, "mine"}, {key.Key, "theirs"}} {
		if code, _, body := call(t, url, "POST", "/api/v1/gateways", g.key, strings.Replace(gateway, "%s", g.name, 1)); code != http.StatusOK {
			t.Fatalf("create gateway %s: %d %s", g.name, code, body)
		}
	}

	tests := []struct {
		name, method, path, key, body string
		status                        int
		typ, code, param              string
		message                       string // a part of it
	}{
		{"unknown field", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "shel": {}}`,
			400, "invalid_request_error", "invalid_argument", "shel", `unknown field "shel"`},
		{"unknown nested field", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "shell": {"enabeld": true}}`,
			400, "invalid_request_error", "invalid_argument", "shell.enabeld", `unknown field "shell.enabeld"`},
		{"bad JSON", "POST", "/api/v1/gateways", adminKey, `{"name": "x",}`,
			400, "invalid_request_error", "invalid_argument", "", "not valid JSON: invalid character '}' looking for beginning of object key string at line 1, column 14"},
		{"cut short", "POST", "/api/v1/gateways", adminKey, `{"name": "x"`,
			400, "invalid_request_error", "invalid_argument", "", "not valid JSON"},
		{"wrong type", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "max_iterations": "many"}`,
			400, "invalid_request_error", "invalid_argument", "max_iterations", `max_iterations: want an integer`},
		{"wrong type, camelCase", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "shell": {"timeoutSeconds": true}}`,
			400, "invalid_request_error", "invalid_argument", "shell.timeoutSeconds", `shell.timeoutSeconds: want an integer`},
		{"unknown enum word", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "exec": {"security": "lax"}}`,
			400, "invalid_request_error", "invalid_argument", "exec.security", "exec.security: must be deny, allowlist or full"},
		{"invalid value", "POST", "/api/v1/gateways", adminKey, `{"name": "x", "upstream": {"provider": "scripted"}, "shell": {"timeout_seconds": 100000}}`,
			400, "invalid_request_error", "invalid_argument", "shell.timeout_seconds", "shell.timeout_seconds:"},
		{"bad query", "GET", "/api/v1/approvals?state=maybe", adminKey, "",
			400, "invalid_request_error", "invalid_argument", "state", "state: must be"},
		{"unknown path", "GET", "/api/v1/nope", adminKey, "",
			404, "not_found_error", "not_found", "", "unknown path GET /api/v1/nope"},
		{"unknown method", "DELETE", "/api/v1/gateways", adminKey, "",
			405, "invalid_request_error", "method_not_allowed", "", "method DELETE is not allowed on /api/v1/gateways"},
		{"no auth", "GET", "/api/v1/gateways", "", "",
			401, "authentication_error", "invalid_api_key", "", "Authorization"},
		{"wrong key", "GET", "/api/v1/gateways", "conch_not-a-key", "",
			401, "authentication_error", "invalid_api_key", "", "API key"},
		{"admin only", "GET", "/api/v1/accounts", key.Key, "",
			403, "permission_error", "permission_denied", "", "admin"},
		{"another account's gateway", "GET", "/api/v1/gateways/mine", key.Key, "",
			404, "not_found_error", "not_found", "", "mine"},
		{"quota exceeded", "POST", "/api/v1/gateways", key.Key, strings.Replace(gateway, "%s", "second", 1),
			429, "rate_limit_error", "quota_exceeded", "", "quota gateways exceeded (1 of 1)"},
		{"already exists", "POST", "/api/v1/gateways", adminKey, strings.Replace(gateway, "%s", "mine", 1),
			409, "conflict_error", "already_exists", "", "mine"},
		{"a service that cannot be reached", "GET", "/api/v1/sandboxes", adminKey, "",
			503, "unavailable_error", "unavailable", "", "unavailable"},
		{"a file download from it", "GET", "/api/v1/shell/io/download?path=/a", adminKey, "",
			503, "unavailable_error", "unavailable", "", "unavailable"},
		{"a download without its path", "GET", "/api/v1/shell/io/download", adminKey, "",
			400, "invalid_request_error", "invalid_argument", "path", "path: exactly one"},
		{"exec-approvals from it", "GET", "/api/v1/exec-approvals", adminKey, "",
			503, "unavailable_error", "unavailable", "", "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, h, body := call(t, url, tt.method, tt.path, tt.key, tt.body)
			if m := insides.FindString(string(body)); m != "" {
				t.Errorf("the answer shows %q: %s", m, body)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var env apierror.Envelope
			if err := json.Unmarshal(body, &env); err != nil || env.Error.Type == "" {
				t.Fatalf("%d %s is not the envelope (%v)", code, body, err)
			}
			e := env.Error
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if code != tt.status || e.Type != tt.typ || e.Code != tt.code || param != tt.param || !strings.Contains(e.Message, tt.message) {
				t.Errorf("%d %s, want %d %s %s param %q with %q", code, body, tt.status, tt.typ, tt.code, tt.param, tt.message)
			}
			if !strings.Contains(string(body), `"param":`) {
				t.Errorf("%s has no param", body)
			}
		})
	}
}
