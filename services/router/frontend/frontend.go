// Package frontend holds what the router's API front ends over the
// completion core (OpenAI's and Anthropic's) do alike: admitting a
// request, answering JSON and starting an event stream. Each writes
// errors in its own API's shape.
package frontend

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
)

// MaxBody bounds a request body: a 1 MiB command in a long conversation
// fits many times over.
const MaxBody = 32 << 20

// Admit takes one of the router's completion slots and reads the caller's
// scope and the request body. When it cannot, err is what the client is
// answered (a 503 at capacity, a 413 for a body over MaxBody); else
// release gives the slot back.
func Admit(core *completion.Service, w http.ResponseWriter, r *http.Request) (release func(), scope tenant.Scope, body []byte, err error) {
	if release, err = core.Admit(); err != nil {
		return nil, scope, nil, err
	}
	scope, ok := tenant.From(r.Context())
	if !ok {
		release()
		return nil, scope, nil, errs.New(errs.Unauthenticated, "no account")
	}
	if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody)); err != nil {
		release()
		return nil, scope, nil, &completion.FieldError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
			Msg: fmt.Sprintf("request body is larger than %d bytes", MaxBody)}
	}
	return release, scope, body, nil
}

// WriteJSON answers v with status, whole and at once: with its length,
// and flushed, so that the client has all of it before the handler goes on
// (to end the completion's sandbox, say).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
	_ = http.NewResponseController(w).Flush()
}

// StartEvents answers 200 with the headers of a server-sent event stream
// that no proxy buffers.
func StartEvents(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// RandomHex is n random bytes in hex, for ids.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}
