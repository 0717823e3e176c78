// Package ui holds the approvals web page the router serves at
// /ui/approvals: a live list of pending approvals with the whole command
// shown escaped, the approve once / always / deny buttons, and each
// agent's allowlist. The page talks to the REST API with the user's key.
package ui

import (
	"embed"
	"net/http"
)

//go:embed assets
var assets embed.FS

// securityHeaders keep the page from being framed or running anything but
// its own script.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func serve(name, contentType string) http.HandlerFunc {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic("ui: missing embedded asset " + name)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(b)
	}
}

// Register adds the page and its script and style to mux.
func Register(mux *http.ServeMux) {
	mux.Handle("GET /ui/approvals", serve("approvals.html", "text/html; charset=utf-8"))
	mux.Handle("GET /ui/approvals.js", serve("approvals.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /ui/approvals.css", serve("approvals.css", "text/css; charset=utf-8"))
}
