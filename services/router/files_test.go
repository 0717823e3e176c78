package router

import (
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
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
// whatever other ResourceExhausted errors get.
func TestQuotaIs413(t *testing.T) {
	for _, tt := range []struct {
		msg        string
		want       int
		retryAfter bool
	}{
		{"workspace quota exceeded: 2000 bytes needed, the quota is 1000 bytes", http.StatusRequestEntityTooLarge, false},
		{"executor: flush u: workspace quota exceeded: 2000 bytes needed", http.StatusRequestEntityTooLarge, false},
		{"too many sandboxes", http.StatusTooManyRequests, true},
	} {
		w := httptest.NewRecorder()
		statusErrors(w, codes.ResourceExhausted, tt.msg)
		if w.Code != tt.want || (w.Header().Get("Retry-After") != "") != tt.retryAfter || !strings.Contains(w.Body.String(), tt.msg) {
			t.Errorf("%q: %d, Retry-After %q, body %s", tt.msg, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
}
