package errs

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// reasonDomain is the ErrorInfo domain of conch's own reasons.
const reasonDomain = "conch.sh"

// WithReason is a status error of code and msg marked with an ErrorInfo
// of reason (and metadata), so that a caller can tell it from others of
// the same code without reading its words, which may change.
func WithReason(code codes.Code, reason, msg string, metadata map[string]string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: reasonDomain, Metadata: metadata})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// HasReason reports whether err is of code and marked with reason, by
// WithReason or NewReason, here or in the peer that sent it.
func HasReason(err error, code codes.Code, reason string) bool {
	return err != nil && KindOf(err).Code() == code && ReasonOf(err) == reason
}

// ReasonOf is the reason err is marked with, "" for none: that of the
// outermost *Error that has one and is of err's kind, or that of a status
// of err's kind. A reason of another kind was overruled by whoever
// reclassified the error.
func ReasonOf(err error) string {
	k := KindOf(err)
	for e := err; e != nil; {
		var ce *Error
		if !errors.As(e, &ce) {
			break
		}
		if ce.Reason != "" && ce.Kind == k {
			return ce.Reason
		}
		e = ce.Err
	}
	if s, ok := status.FromError(err); ok && kindOfCode(s.Code()) == k {
		reason, _ := details(s)
		return reason
	}
	return ""
}

// explicitField is the Field of the outermost *Error of err that names
// one, or of a status that carries one.
func explicitField(err error) string {
	for e := err; e != nil; {
		var ce *Error
		if !errors.As(e, &ce) {
			break
		}
		if ce.Field != "" {
			return ce.Field
		}
		e = ce.Err
	}
	if s, ok := status.FromError(err); ok {
		_, field := details(s)
		return field
	}
	return ""
}

// withDetails is s marked with reason and the field at fault, those that
// are set.
func withDetails(s *status.Status, reason, field string) *status.Status {
	var ds []protoadapt.MessageV1
	if reason != "" {
		ds = append(ds, &errdetails.ErrorInfo{Reason: reason, Domain: reasonDomain})
	}
	if field != "" {
		ds = append(ds, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field}}})
	}
	if len(ds) == 0 {
		return s
	}
	with, err := s.WithDetails(ds...)
	if err != nil {
		return s
	}
	return with
}

// details is the reason and the field at fault that s carries.
func details(s *status.Status) (reason, field string) {
	for _, d := range s.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if reason == "" && d.GetDomain() == reasonDomain {
				reason = d.GetReason()
			}
		case *errdetails.BadRequest:
			if v := d.GetFieldViolations(); field == "" && len(v) > 0 {
				field = v[0].GetField()
			}
		}
	}
	return reason, field
}
