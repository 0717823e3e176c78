package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestHome: GET / says what the server is and where to go, as a page for
// a browser and as text for curl; another unknown path is a 404 in the
// error envelope, not a bare one.
func TestHome(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	code, hdr, body := d.do("GET", "/", "", nil, "Accept", "text/html,application/xhtml+xml")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(body), `href="/ui/approvals"`) || !strings.Contains(string(body), "docs/README.md") {
		t.Fatalf("GET / from a browser: %d %s %s", code, hdr.Get("Content-Type"), body)
	}
	code, hdr, body = d.do("GET", "/", "", nil, "Accept", "*/*")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") ||
		!strings.Contains(string(body), "/v1/chat/completions") || !strings.Contains(string(body), "/ui/approvals") {
		t.Fatalf("GET / from curl: %d %s %s", code, hdr.Get("Content-Type"), body)
	}
	code, hdr, body = d.do("GET", "/nowhere", "", nil)
	if code != http.StatusNotFound || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") ||
		!strings.Contains(string(body), `"code":"not_found"`) || !strings.Contains(string(body), "GET /nowhere") {
		t.Fatalf("an unknown path: %d %s %s", code, hdr.Get("Content-Type"), body)
	}
}
