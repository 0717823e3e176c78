// Package errs is the single place where domain errors are classified and
// mapped to gRPC status codes and to HTTP answers.
//
// Handlers return errors built with New, Wrap, Invalid or NewReason; the
// server interceptors from this package turn them into gRPC statuses with
// ToStatus, and clients turn statuses from peers back into domain errors
// with FromStatus. The field at fault and the reason travel with the
// status as details, so the router answers an error of any service with
// them. Internal errors never leave the process: their detail is logged
// and the peer sees only "internal error". Public (http.go) is the one
// table from an error to what an HTTP client is told.
package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind classifies an error by what the caller can do about it.
type Kind int

// The kinds of errors. Internal is the zero value so that an unclassified
// error never exposes its detail to a peer.
const (
	// Internal is a bug or an unexpected failure; its detail is not sent.
	Internal Kind = iota
	// InvalidArgument means the request is malformed.
	InvalidArgument
	// NotFound means the addressed entity does not exist.
	NotFound
	// AlreadyExists means the entity to create already exists.
	AlreadyExists
	// PermissionDenied means the caller is known but not allowed.
	PermissionDenied
	// Unauthenticated means the caller could not be identified.
	Unauthenticated
	// ResourceExhausted means a quota or limit was hit.
	ResourceExhausted
	// FailedPrecondition means the system is not in a state that allows
	// the operation; retrying without a change will fail again.
	FailedPrecondition
	// Conflict means a concurrent change won; the caller may retry the
	// whole read-modify-write sequence.
	Conflict
	// DeadlineExceeded means the operation ran out of time.
	DeadlineExceeded
	// Unavailable means a dependency is down; the caller may retry.
	Unavailable
	// Unimplemented means the operation is not supported.
	Unimplemented
	// Canceled means the caller gave up.
	Canceled
)

var kindNames = [...]string{
	Internal:           "internal",
	InvalidArgument:    "invalid argument",
	NotFound:           "not found",
	AlreadyExists:      "already exists",
	PermissionDenied:   "permission denied",
	Unauthenticated:    "unauthenticated",
	ResourceExhausted:  "resource exhausted",
	FailedPrecondition: "failed precondition",
	Conflict:           "conflict",
	DeadlineExceeded:   "deadline exceeded",
	Unavailable:        "unavailable",
	Unimplemented:      "unimplemented",
	Canceled:           "canceled",
}

// String returns the kind's name in lower case.
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("kind(%d)", int(k))
	}
	return kindNames[k]
}

// Error is a classified error.
type Error struct {
	// Kind classifies the error.
	Kind Kind
	// Msg says what failed.
	Msg string
	// Err is the underlying cause, if any.
	Err error
	// Field names the request field at fault as the caller wrote it
	// ("limits.memory_bytes"), "" for none; see Public.
	Field string
	// Reason tells the error from others of its kind without reading its
	// words: an UPPER_SNAKE_CASE word ("QUOTA_EXCEEDED"), "" for none. It
	// is the code of the error's HTTP answer, in lower case.
	Reason string
}

// Error returns Msg followed by the cause.
func (e *Error) Error() string {
	switch {
	case e.Err == nil:
		return e.Msg
	case e.Msg == "":
		return e.Err.Error()
	default:
		return e.Msg + ": " + e.Err.Error()
	}
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with a formatted message.
func New(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k with a formatted message and cause err.
func Wrap(k Kind, err error, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}

// Invalid returns an InvalidArgument error naming field: its message is
// "field: " and the formatted reason, and field is its Field.
func Invalid(field, format string, args ...any) error {
	return &Error{Kind: InvalidArgument, Msg: field + ": " + fmt.Sprintf(format, args...), Field: field}
}

// NewReason returns an error of kind k marked with reason, with a
// formatted message.
func NewReason(k Kind, reason, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Reason: reason}
}

// KindOf classifies err: the outermost *Error decides; otherwise context
// errors and gRPC statuses map to their kinds, and anything else is
// Internal.
func KindOf(err error) Kind {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Kind
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	if s, ok := status.FromError(err); ok {
		return kindOfCode(s.Code())
	}
	return Internal
}

var kindCodes = [...]codes.Code{
	Internal:           codes.Internal,
	InvalidArgument:    codes.InvalidArgument,
	NotFound:           codes.NotFound,
	AlreadyExists:      codes.AlreadyExists,
	PermissionDenied:   codes.PermissionDenied,
	Unauthenticated:    codes.Unauthenticated,
	ResourceExhausted:  codes.ResourceExhausted,
	FailedPrecondition: codes.FailedPrecondition,
	Conflict:           codes.Aborted,
	DeadlineExceeded:   codes.DeadlineExceeded,
	Unavailable:        codes.Unavailable,
	Unimplemented:      codes.Unimplemented,
	Canceled:           codes.Canceled,
}

// Code returns the gRPC code that k maps to.
func (k Kind) Code() codes.Code {
	if k < 0 || int(k) >= len(kindCodes) {
		return codes.Internal
	}
	return kindCodes[k]
}

func kindOfCode(c codes.Code) Kind {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return InvalidArgument
	case codes.Aborted:
		return Conflict
	case codes.Unknown, codes.DataLoss:
		return Internal
	}
	for k, kc := range kindCodes {
		if kc == c {
			return Kind(k)
		}
	}
	return Internal
}

// internalMessage is all a peer learns about an Internal error.
const internalMessage = "internal error"

// ToStatus converts err into a gRPC status error. A domain *Error maps
// through the kind table with err.Error() as the message; a gRPC status
// (other than Unknown) passes through unchanged; context errors map to
// their codes; everything else is Internal. Internal errors carry only the
// message "internal error".
func ToStatus(err error) error {
	st, _ := toStatus(err)
	return st.Err()
}

// toStatus converts err and reports whether the detail of err was hidden
// from the peer, in which case the caller should log it.
func toStatus(err error) (s *status.Status, hidden bool) {
	if err == nil {
		return nil, false
	}
	var e *Error
	if !errors.As(err, &e) {
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
			return s, false
		}
	}
	k := KindOf(err)
	if k == Internal {
		return status.New(codes.Internal, internalMessage), true
	}
	return withDetails(status.New(k.Code(), err.Error()), ReasonOf(err), explicitField(err)), false
}

// FromStatus converts a gRPC status error received from a peer into an
// *Error of the matching kind carrying the status message. It returns nil
// for nil, err unchanged if it already is an *Error, and a classified
// wrapper of err if it is not a status at all.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	s, ok := status.FromError(err)
	if !ok {
		return &Error{Kind: KindOf(err), Err: err}
	}
	reason, field := details(s)
	return &Error{Kind: kindOfCode(s.Code()), Msg: s.Message(), Reason: reason, Field: field}
}
