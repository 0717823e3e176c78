package router

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/accounts"
)

type fakeKeys map[string]accounts.Principal

func (f fakeKeys) Authenticate(_ context.Context, key string) (accounts.Principal, error) {
	if p, ok := f[key]; ok {
		return p, nil
	}
	return accounts.Principal{}, errs.New(errs.Unauthenticated, "invalid API key")
}

// The scope names the key that authenticated and the surface the client
// says it is, so what is recorded of a caller comes from the key.
func TestAuthScopeNamesTheKey(t *testing.T) {
	t.Parallel()
	m := &authMiddleware{auth: fakeKeys{
		"k1":    {Account: "acct", KeyID: "key-1"},
		"admin": {Account: "dev", Admin: true, KeyID: accounts.AdminKeyID},
	}, publicURL: "https://conch.example", log: slog.New(slog.DiscardHandler)}
	for _, tt := range []struct {
		name, key, client string
		want              tenant.Scope
	}{
		{"rest", "k1", "", tenant.Scope{Account: "acct", Key: "key-1", Surface: tenant.SurfaceREST}},
		{"cli", "k1", "cli", tenant.Scope{Account: "acct", Key: "key-1", Surface: tenant.SurfaceCLI}},
		{"web", "k1", "web", tenant.Scope{Account: "acct", Key: "key-1", Surface: tenant.SurfaceWeb}},
		{"unknown client", "k1", "fallback", tenant.Scope{Account: "acct", Key: "key-1", Surface: tenant.SurfaceREST}},
		{"admin", "admin", "cli", tenant.Scope{Account: "dev", Admin: true, Key: accounts.AdminKeyID, Surface: tenant.SurfaceCLI}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got tenant.Scope
			h := m.wrap(apiErrors, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				got, _ = tenant.From(r.Context())
			}))
			req := httptest.NewRequestWithContext(t.Context(), "POST", "/api/v1/approvals/x:resolve", nil)
			req.Header.Set("Authorization", "Bearer "+tt.key)
			if tt.client != "" {
				req.Header.Set(tenant.ClientHeader, tt.client)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			tt.want.PublicURL = "https://conch.example"
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scope (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuthAPIKeyHeader: Anthropic's surface also takes the key from
// x-api-key, as its SDKs send it; the other surfaces take only Bearer,
// and Authorization, when present, is the one judged.
func TestAuthAPIKeyHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		apiKeyHeader  bool
		authorization string
		xAPIKey       string
		want          int
	}{
		{"x-api-key on anthropic", true, "", "k1", http.StatusOK},
		{"bearer on anthropic", true, "Bearer k1", "", http.StatusOK},
		{"bad x-api-key on anthropic", true, "", "nope", http.StatusUnauthorized},
		{"bad bearer wins over x-api-key", true, "Bearer nope", "k1", http.StatusUnauthorized},
		{"x-api-key with a blank", true, "", "k1 k1", http.StatusUnauthorized},
		{"x-api-key elsewhere", false, "", "k1", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &authMiddleware{auth: fakeKeys{"k1": {Account: "acct", KeyID: "key-1"}}, log: slog.New(slog.DiscardHandler), apiKeyHeader: tt.apiKeyHeader}
			h := m.wrap(anthropicErrors, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			req := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/messages", nil)
			if tt.authorization != "" {
				req.Header.Set("Authorization", tt.authorization)
			}
			if tt.xAPIKey != "" {
				req.Header.Set("X-Api-Key", tt.xAPIKey)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if tt.want == http.StatusUnauthorized && !strings.Contains(rec.Body.String(), `"type":"authentication_error"`) {
				t.Errorf("body %s, want Anthropic's authentication_error", rec.Body)
			}
		})
	}
}
