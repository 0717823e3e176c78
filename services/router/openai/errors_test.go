package openai

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/router/upstream"
)

func TestUpstreamErrorsAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		err            *upstream.Error
		wantStatus     int
		wantType       string
		wantMsg        []string // each must be in the message
		wantRetryAfter string
	}{
		{"a refused key is the gateway's failure, not the caller's",
			&upstream.Error{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided"},
			http.StatusBadGateway, "upstream_error", []string{"gateway up:", "401", "Incorrect API key provided"}, ""},
		{"a forbidden key too",
			&upstream.Error{Status: 403, Type: "permission_error", Message: "model not enabled for this key"},
			http.StatusBadGateway, "upstream_error", []string{"gateway up:", "403", "model not enabled"}, ""},
		{"a rate limit keeps its status and passes Retry-After on",
			&upstream.Error{Status: 429, Type: "rate_limit_error", Message: "slow down", RetryAfter: 7 * time.Second},
			http.StatusTooManyRequests, "rate_limit_error", []string{"slow down"}, "7"},
		{"a part of a second is rounded up",
			&upstream.Error{Status: 503, Type: "server_error", Message: "overloaded", RetryAfter: 1500 * time.Millisecond},
			http.StatusServiceUnavailable, "server_error", []string{"overloaded"}, "2"},
		{"a bad request keeps its status",
			&upstream.Error{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Message: "context too long"},
			http.StatusBadRequest, "invalid_request_error", []string{"context too long"}, ""},
	}
	h := &Handler{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			h.errorOf(t.Context(), tt.err, "up").write(w)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), `"type":"`+tt.wantType+`"`) {
				t.Fatalf("answer = %d %s, want %d with type %s", w.Code, w.Body, tt.wantStatus, tt.wantType)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(w.Body.String(), m) {
					t.Errorf("answer %s does not say %q", w.Body, m)
				}
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
		})
	}
}
