package router

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/apierror"
)

// TestAttachment checks that any file name yields one well-formed
// Content-Disposition that forces a download and cannot inject a header
// parameter.
func TestAttachment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, want string
	}{
		{"a.txt", "a.txt"},
		{"report 2024.pdf", "report 2024.pdf"},
		{`evil"; filename="x.html`, `evil"; filename="x.html`},
		{"résumé.txt", "résumé.txt"},
		{"semi;colon", "semi;colon"},
		{"back\\slash", "back\\slash"},
		{"", ""},
	}
	for _, tt := range tests {
		got := attachment(tt.name)
		if strings.ContainsAny(got, "\r\n") {
			t.Errorf("attachment(%q) = %q holds a line break", tt.name, got)
		}
		disp, params, err := mime.ParseMediaType(got)
		if err != nil || disp != "attachment" {
			t.Errorf("attachment(%q) = %q: %v", tt.name, got, err)
			continue
		}
		if tt.want != "" && params["filename"] != tt.want {
			t.Errorf("attachment(%q) filename = %q, want %q (header %q)", tt.name, params["filename"], tt.want, got)
		}
		if len(params) > 1 {
			t.Errorf("attachment(%q) = %q has extra parameters %v", tt.name, got, params)
		}
	}
}

// TestQuotaIs413: a full workspace is answered 413 without Retry-After,
// whatever other ResourceExhausted errors get, as it comes from the
// workspace service, through the executor, or from an account quota.
func TestQuotaIs413(t *testing.T) {
	t.Parallel()
	full := quota.Exceeded("2000 bytes needed, the quota is 1000 bytes")
	for _, tt := range []struct {
		name       string
		err        error
		want       int
		code       string
		retryAfter bool
	}{
		{"from the workspace service", errs.ToStatus(full), http.StatusRequestEntityTooLarge, "workspace_quota_exceeded", false},
		{"through the executor", errs.ToStatus(fmt.Errorf("executor: flush u: %w", errs.FromStatus(errs.ToStatus(full)))), http.StatusRequestEntityTooLarge, "workspace_quota_exceeded", false},
		{"an account's quota", errs.ToStatus(quotas.Exceeded(quotas.Sandboxes, 10, 10)), http.StatusTooManyRequests, "quota_exceeded", true},
		{"too many sandboxes", errs.ToStatus(errs.New(errs.ResourceExhausted, "too many sandboxes")), http.StatusTooManyRequests, "resource_exhausted", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			apiErrors(w, tt.err)
			var body apierror.Envelope
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %s: %v", w.Body, err)
			}
			if w.Code != tt.want || (w.Header().Get("Retry-After") != "") != tt.retryAfter || body.Error.Code != tt.code || body.Error.Type != "rate_limit_error" {
				t.Errorf("%d, Retry-After %q, body %s", w.Code, w.Header().Get("Retry-After"), w.Body)
			}
		})
	}
}
