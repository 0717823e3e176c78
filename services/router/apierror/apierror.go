// Package apierror writes the errors of conch's REST API (/api/v1, the
// file API, public file URLs, /mcp): one JSON envelope,
//
//	{"error": {"type": "...", "code": "...", "message": "...", "param": "..." | null}}
//
// with the status, type and code of errs.Public, the one table from
// conch's errors to HTTP answers. It also turns what grpc-gateway reports
// in its own words (a route that does not exist, a path parameter that
// does not parse) into such errors.
package apierror

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Envelope is the body of every error answer.
type Envelope struct {
	// Error is the error object.
	Error Object `json:"error"`
}

// Object is the error object of an Envelope.
type Object struct {
	// Type is the class of problem (errs.Type…): what a client can do.
	Type string `json:"type"`
	// Code tells errors of a type apart: the error's kind in snake_case
	// ("not_found") or a more specific code ("quota_exceeded").
	Code string `json:"code"`
	// Message says what was wrong, naming the field where one is at fault.
	Message string `json:"message"`
	// Param is the request field at fault; nil for none.
	Param *string `json:"param"`
}

// Write answers err: the status, the Retry-After and the envelope of
// errs.Public(err). An error whose detail is kept from the client (an
// internal error, a service's address) is logged to log, when not nil.
func Write(ctx context.Context, log *slog.Logger, w http.ResponseWriter, err error) {
	a := errs.Public(err)
	if a.Hidden && log != nil {
		log.WarnContext(ctx, "request failed", "status", a.Status, "error", err)
	}
	WriteAnswer(w, a)
}

// WriteAnswer writes a in the envelope.
func WriteAnswer(w http.ResponseWriter, a errs.Answer) {
	obj := Object{Type: a.Type, Code: a.Code, Message: a.Message}
	if a.Param != "" {
		obj.Param = &a.Param
	}
	h := w.Header()
	if a.RetryAfter != "" {
		h.Set("Retry-After", a.RetryAfter)
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(Envelope{Error: obj})
}

// NotFound is the error of a path nothing is served at.
func NotFound(r *http.Request) error {
	return errs.New(errs.NotFound, "unknown path %s %s", r.Method, r.URL.Path)
}

// MethodNotAllowed is the error of a path that does not answer r's method.
func MethodNotAllowed(r *http.Request) error {
	return errs.NewReason(errs.InvalidArgument, errs.ReasonMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path)
}

// GatewayOptions make a grpc-gateway mux answer every error in the
// envelope: the errors of the calls it forwards, of requests it cannot
// decode, and of routes it does not have.
func GatewayOptions(log *slog.Logger) []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{
		runtime.WithErrorHandler(func(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
			Write(ctx, log, w, fromGateway(err))
		}),
		runtime.WithRoutingErrorHandler(func(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
			switch status {
			case http.StatusMethodNotAllowed:
				Write(ctx, log, w, MethodNotAllowed(r))
			case http.StatusBadRequest:
				Write(ctx, log, w, errs.New(errs.InvalidArgument, "the path %s is not valid", r.URL.Path))
			default:
				Write(ctx, log, w, NotFound(r))
			}
		}),
	}
}

// The words of grpc-gateway's generated code for a path parameter that
// is missing or does not parse.
var (
	missingParam  = regexp.MustCompile(`^missing parameter (\S+)$`)
	mismatchParam = regexp.MustCompile(`^type mismatch, parameter: (\S+), error: `)
)

// fromGateway is the error a call through grpc-gateway ended with, with
// grpc-gateway's own words about path parameters in conch's.
func fromGateway(err error) error {
	e := errs.FromStatus(err)
	if errs.KindOf(e) != errs.InvalidArgument {
		return e
	}
	msg := e.Error()
	if m := missingParam.FindStringSubmatch(msg); m != nil {
		return errs.Invalid(m[1], "required in the path")
	}
	if m := mismatchParam.FindStringSubmatch(msg); m != nil {
		return errs.Invalid(m[1], "not a valid value in the path")
	}
	return e
}
