// Package console holds the web console the router serves at / to
// browsers: an account's sandboxes (their labels and state, and a live
// terminal in the page), the approvals waiting for a decision, the audit
// trail with its filters and the gateways, read-only. It talks to the
// REST API with the user's key, kept in the tab, and opens terminals with
// short-lived tokens. Everything it loads is in the binary: the terminal
// is xterm.js (assets/xterm, MIT).
package console

import (
	"embed"
	"net/http"
	"path"
)

//go:embed assets
var assets embed.FS

// securityHeaders keep the console from being framed or running anything
// but its own scripts. xterm.js sets its own styles, so inline styles
// are allowed; scripts are not.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

func serve(name string) http.HandlerFunc {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic("console: missing embedded asset " + name)
	}
	ct := types[path.Ext(name)]
	return func(w http.ResponseWriter, _ *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(b)
	}
}

// Page serves the console's page.
var Page = serve("console.html")

// Register adds the console's scripts and styles to mux, under
// /console/; the page itself is served at / (Page).
func Register(mux *http.ServeMux) {
	for _, name := range []string{"console.js", "console.css", "xterm/xterm.js", "xterm/xterm.css"} {
		mux.Handle("GET /console/"+name, serve(name))
	}
}
