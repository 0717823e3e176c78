package router

import (
	"net/http"

	"github.com/conch-sh/conch/services/approval/ui"
	"github.com/conch-sh/conch/services/router/console"
)

// registerUI adds the web pages to mux. The pages are static; they call
// the REST API with the key the user enters, so they need no auth of
// their own.
func registerUI(mux *http.ServeMux) {
	ui.Register(mux)
	console.Register(mux)
}
