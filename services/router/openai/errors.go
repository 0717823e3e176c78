package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

// apiError is an error as the /v1 API answers it: OpenAI's error object,
// its HTTP status and, for answers the client should retry later, the
// Retry-After in seconds. A zero Status means nothing is to be written.
type apiError struct {
	Status     int
	Type       string
	Code       string
	Param      string
	Message    string
	RetryAfter string
	// NoRetry tells OpenAI's SDKs not to retry the request, which they
	// do on a 429 or 5xx (header x-should-retry: false): for a request
	// whose work ran, a retry would run it again.
	NoRetry bool
	// Response, when set, is written beside the error: the work a
	// request did though it failed (a response not stored).
	Response map[string]any
}

// object is OpenAI's error object; param and code are null when unset, as
// OpenAI sends them.
func (e apiError) object() map[string]any {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return map[string]any{"message": e.Message, "type": e.Type, "param": nullable(e.Param), "code": nullable(e.Code)}
}

func (e apiError) write(w http.ResponseWriter) {
	if e.Status == 0 {
		return
	}
	if e.RetryAfter != "" {
		w.Header().Set("Retry-After", e.RetryAfter)
	}
	if e.NoRetry {
		w.Header().Set("X-Should-Retry", "false")
	}
	body := map[string]any{"error": e.object()}
	if e.Response != nil {
		body["response"] = e.Response
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
}

// WriteError writes OpenAI's error object with the HTTP status; param
// names the request field at fault, "" for none. The /v1 front ends
// outside this package (the Containers API) answer through it.
func WriteError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	apiError{Status: status, Type: typ, Code: code, Param: param, Message: msg}.write(w)
}

// WriteAnswer writes an answer of errs' table in OpenAI's error shape:
// the /v1 front ends answer errors that are not OpenAI's own (an API key
// refused, a sandbox's quota) as conch's REST API does, in this shape.
func WriteAnswer(w http.ResponseWriter, a errs.Answer) {
	answerOf(a).write(w)
}

// answerOf is a of errs' table as an apiError.
func answerOf(a errs.Answer) apiError {
	return apiError{Status: a.Status, Type: a.Type, Code: a.Code, Param: a.Param, Message: a.Message, RetryAfter: a.RetryAfter}
}

// writeError writes OpenAI's error shape.
func writeError(w http.ResponseWriter, code int, typ, errCode, msg string) {
	apiError{Status: code, Type: typ, Code: errCode, Message: msg}.write(w)
}

// writeErr answers a request that failed before it reached a gateway's
// upstream.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	h.errorOf(r.Context(), err, "").write(w)
}

// errorOf is the one table from the errors a /v1 request ends with to what
// the client is answered. gateway names the gateway whose upstream was
// called, "" when none was.
func (h *Handler) errorOf(ctx context.Context, err error, gateway string) apiError {
	var re *completion.FieldError
	var over completion.ErrOverloaded
	var ue *upstream.Error
	switch {
	case errors.As(err, &re):
		code := re.Code
		if code == "" {
			code = "invalid_request"
		}
		return apiError{Status: re.Status, Type: "invalid_request_error", Code: code, Param: re.Field, Message: re.Error()}
	case errors.As(err, &over):
		return answerOf(errs.Public(errs.NewReason(errs.Unavailable, "OVERLOADED", "%s", over.Error())))
	case errors.As(err, &ue):
		return upstreamError(ue, gateway)
	case errors.Is(err, context.DeadlineExceeded):
		return apiError{Status: http.StatusGatewayTimeout, Type: "upstream_error", Code: "timeout", Message: "the upstream model did not answer in time"}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
		return apiError{}
	}
	kind := errs.KindOf(err)
	if kind == errs.Internal {
		h.logger.ErrorContext(ctx, "completion failed", "error", err)
		return apiError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "upstream_unreachable", Message: "upstream request failed: " + err.Error()}
	}
	a := errs.Public(err)
	if a.Hidden {
		h.logger.WarnContext(ctx, "completion failed", "error", err)
	}
	return answerOf(a)
}

// upstreamError maps an upstream's error answer. Most keep the upstream's
// status, type and message, so a client sees a rate limit or a context too
// long as it would from the upstream itself; the gateway's key refused is
// a 502 (upstream.Error.CredentialsRefused).
func upstreamError(ue *upstream.Error, gateway string) apiError {
	if ue.CredentialsRefused() {
		return apiError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "upstream_auth_failed", Message: ue.CredentialsMessage(gateway)}
	}
	return apiError{Status: ue.Status, Type: ue.Type, Code: ue.Code, Message: ue.Message, RetryAfter: ue.RetryAfterHeader()}
}
