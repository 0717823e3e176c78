package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

// statusOverloaded is Anthropic's status for "overloaded": the SDKs retry
// it, as they retry a 429 or a 5xx.
const statusOverloaded = 529

// apiError is an error as the Messages API answers it: Anthropic's
// envelope {"type": "error", "error": {"type", "message"}} with its
// status. A zero Status means nothing is to be written.
type apiError struct {
	Status     int
	Type       string
	Message    string
	RetryAfter string
}

// typeOf is Anthropic's error type for an HTTP status, which its SDKs
// raise as their own error classes.
func typeOf(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case statusOverloaded:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (e apiError) body() map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": e.Type, "message": e.Message}}
}

func (e apiError) write(w http.ResponseWriter) {
	if e.Status == 0 {
		return
	}
	if e.RetryAfter != "" {
		w.Header().Set("Retry-After", e.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e.body())
}

// newError is the error of status with msg, its type Anthropic's for the
// status.
func newError(status int, msg string) apiError {
	return apiError{Status: status, Type: typeOf(status), Message: msg}
}

// answerOf is an answer of errs' table, conch's one map from its errors to
// HTTP answers, in Anthropic's envelope. A service that cannot take more
// work now is Anthropic's "overloaded" (529), which the SDKs retry.
func answerOf(a errs.Answer) apiError {
	if a.Status == http.StatusServiceUnavailable {
		a.Status = statusOverloaded
	}
	e := newError(a.Status, a.Message)
	e.RetryAfter = a.RetryAfter
	return e
}

// WriteAnswer writes an answer of errs' table in Anthropic's envelope: the
// router's authentication answers /v1/messages through it.
func WriteAnswer(w http.ResponseWriter, a errs.Answer) { answerOf(a).write(w) }

// errorOf is the one table from the errors a /v1/messages request ends
// with to what the client is answered; gateway names the gateway whose
// upstream was called, "" when none was.
func errorOf(ctx context.Context, log *slog.Logger, err error, gateway string) apiError {
	var fe *completion.FieldError
	var over completion.ErrOverloaded
	var ue *upstream.Error
	switch {
	case errors.As(err, &fe):
		return newError(fe.Status, fe.Error())
	case errors.As(err, &over):
		return apiError{Status: statusOverloaded, Type: "overloaded_error", Message: over.Error()}
	case errors.As(err, &ue):
		return upstreamError(ue, gateway)
	case errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusGatewayTimeout, "the upstream model did not answer in time")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
		return apiError{}
	}
	if errs.KindOf(err) == errs.Internal {
		log.ErrorContext(ctx, "completion failed", "error", err)
		return newError(http.StatusBadGateway, "upstream request failed: "+err.Error())
	}
	a := errs.Public(err)
	if a.Hidden {
		log.WarnContext(ctx, "completion failed", "error", err)
	}
	return answerOf(a)
}

// upstreamError maps an upstream's error answer: its status and message,
// the type Anthropic's for that status; the gateway's key refused is a 502
// (upstream.Error.CredentialsRefused).
func upstreamError(ue *upstream.Error, gateway string) apiError {
	if ue.CredentialsRefused() {
		return newError(http.StatusBadGateway, ue.CredentialsMessage(gateway))
	}
	e := newError(ue.Status, ue.Message)
	e.RetryAfter = ue.RetryAfterHeader()
	return e
}
