package errs

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// HasReason reports whether err is a status of code marked (WithReason)
// with reason.
func HasReason(err error, code codes.Code, reason string) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reason && info.GetDomain() == reasonDomain {
			return true
		}
	}
	return false
}
