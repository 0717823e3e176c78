package router

import (
	"net/http"
	"strings"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/console"
)

// home answers GET /: the console for a browser; for curl, what this
// server is and where to go.
func home(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		apiErrors(w, errs.New(errs.NotFound, "unknown path %s %s: GET / lists the entry points", r.Method, r.URL.Path))
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		// A browser gets the console.
		console.Page(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	b.WriteString("conch: an OpenAI-compatible gateway that gives models a sandboxed shell.\n\n")
	for _, l := range homeLinks {
		b.WriteString("  " + l.path + strings.Repeat(" ", max(1, 26-len(l.path))) + l.what + "\n")
	}
	b.WriteString("\n" + homeDocs + "\n")
	_, _ = w.Write([]byte(b.String()))
}

// homeLinks are the entry points GET / names.
var homeLinks = []struct{ path, what string }{
	{"/ui/approvals", "approve or deny the commands waiting for a human (with an API key)"},
	{"/v1/chat/completions", "OpenAI Chat Completions (Authorization: Bearer <key>)"},
	{"/v1/responses", "OpenAI Responses"},
	{"/mcp", "MCP server (streamable HTTP)"},
	{"/api/v1/gateways", "conch's REST API: gateways, sandboxes, files, approvals, audit"},
	{"/readyz", "readiness"},
}

const homeDocs = "Docs: docs/README.md in the conch repository, and `conch --help`."
