package errs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPublicKinds is the table every HTTP surface answers from: each kind's
// status, type, code and Retry-After.
func TestPublicKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind Kind
		want Answer
	}{
		{Internal, Answer{Status: 500, Type: "server_error", Code: "internal", Message: "internal error", Hidden: true}},
		{InvalidArgument, Answer{Status: 400, Type: "invalid_request_error", Code: "invalid_argument", Message: "m"}},
		{NotFound, Answer{Status: 404, Type: "not_found_error", Code: "not_found", Message: "m"}},
		{AlreadyExists, Answer{Status: 409, Type: "conflict_error", Code: "already_exists", Message: "m"}},
		{PermissionDenied, Answer{Status: 403, Type: "permission_error", Code: "permission_denied", Message: "m"}},
		{Unauthenticated, Answer{Status: 401, Type: "authentication_error", Code: "unauthenticated", Message: "m"}},
		{ResourceExhausted, Answer{Status: 429, Type: "rate_limit_error", Code: "resource_exhausted", Message: "m", RetryAfter: "2"}},
		{FailedPrecondition, Answer{Status: 400, Type: "invalid_request_error", Code: "failed_precondition", Message: "m"}},
		{Conflict, Answer{Status: 409, Type: "conflict_error", Code: "conflict", Message: "m"}},
		{DeadlineExceeded, Answer{Status: 504, Type: "timeout_error", Code: "deadline_exceeded", Message: "m"}},
		{Unavailable, Answer{Status: 503, Type: "unavailable_error", Code: "unavailable", Message: "m", RetryAfter: "2"}},
		{Unimplemented, Answer{Status: 501, Type: "invalid_request_error", Code: "unimplemented", Message: "m"}},
		{Canceled, Answer{Status: 499, Type: "server_error", Code: "canceled", Message: "m"}},
	}
	if len(tests) != len(kindHTTP) {
		t.Fatalf("%d kinds tested, %d in the table", len(tests), len(kindHTTP))
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Public(New(tt.kind, "m"))); diff != "" {
				t.Errorf("Public (-want +got):\n%s", diff)
			}
			// The status is the one grpc-gateway gives the kind's code, so
			// an error answers alike whichever way it reached the router.
			if got, want := tt.kind.http().status, runtime.HTTPStatusFromCode(tt.kind.Code()); got != want {
				t.Errorf("status = %d, grpc-gateway's is %d", got, want)
			}
			// A peer's status answers as the error it came from.
			if diff := cmp.Diff(tt.want, Public(ToStatus(New(tt.kind, "m")))); tt.kind != Internal && diff != "" {
				t.Errorf("Public of the status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPublicReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want Answer
	}{
		{"account quota", NewReason(ResourceExhausted, ReasonQuotaExceeded, "quota sandboxes exceeded (10 of 10)"),
			Answer{Status: 429, Type: "rate_limit_error", Code: "quota_exceeded", Message: "quota sandboxes exceeded (10 of 10)", RetryAfter: "2"}},
		{"workspace quota", NewReason(ResourceExhausted, ReasonWorkspaceQuotaExceeded, "workspace quota exceeded: 2 bytes"),
			Answer{Status: 413, Type: "rate_limit_error", Code: "workspace_quota_exceeded", Message: "workspace quota exceeded: 2 bytes"}},
		{"workspace quota from a peer, wrapped", fmt.Errorf("executor: flush u: %w", FromStatus(ToStatus(NewReason(ResourceExhausted, ReasonWorkspaceQuotaExceeded, "full")))),
			Answer{Status: 413, Type: "rate_limit_error", Code: "workspace_quota_exceeded", Message: "executor: flush u: full"}},
		{"too large", NewReason(ResourceExhausted, ReasonRequestTooLarge, "upload larger than 1 byte"),
			Answer{Status: 413, Type: "invalid_request_error", Code: "request_too_large", Message: "upload larger than 1 byte"}},
		{"stalled", NewReason(DeadlineExceeded, ReasonRequestTimeout, "stalled"),
			Answer{Status: 408, Type: "timeout_error", Code: "request_timeout", Message: "stalled"}},
		{"method", NewReason(InvalidArgument, ReasonMethodNotAllowed, "method PATCH is not allowed"),
			Answer{Status: 405, Type: "invalid_request_error", Code: "method_not_allowed", Message: "method PATCH is not allowed"}},
		{"api key", NewReason(Unauthenticated, ReasonInvalidAPIKey, "invalid API key"),
			Answer{Status: 401, Type: "authentication_error", Code: "invalid_api_key", Message: "invalid API key"}},
		{"a reason without a row keeps its kind's status", WithReason(codes.ResourceExhausted, "EXECUTOR_FULL", "no capacity", nil),
			Answer{Status: 429, Type: "rate_limit_error", Code: "executor_full", Message: "no capacity", RetryAfter: "2"}},
		{"reclassified: the reason is overruled", Wrap(Unavailable, NewReason(ResourceExhausted, ReasonWorkspaceQuotaExceeded, "full"), "flush"),
			Answer{Status: 503, Type: "unavailable_error", Code: "unavailable", Message: "flush: full", RetryAfter: "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Public(tt.err)); diff != "" {
				t.Errorf("Public (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPublicMessage: what a client reads holds nothing of gRPC or of the
// cluster's addresses, and names the field at fault.
func TestPublicMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		wantMsg   string
		wantParam string
		hidden    bool
	}{
		{"transport", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:41587: connect: connection refused"`),
			unavailableMessage, "", true},
		{"closing", status.Error(codes.Unavailable, "error reading from server: EOF"), unavailableMessage, "", true},
		{"resolver", status.Error(codes.Unavailable, "name resolver error: produced zero addresses"), unavailableMessage, "", true},
		{"an address", status.Error(codes.Unavailable, "instance 10.0.0.7:7002 is not reachable"), "instance a conch service is not reachable", "", true},
		{"a service's own words", status.Error(codes.Unavailable, "the executor holding sandbox sb-1 is not reachable; it may be restarting"),
			"the executor holding sandbox sb-1 is not reachable; it may be restarting", "", false},
		{"nested status", Wrap(NotFound, status.Error(codes.NotFound, "no such sandbox"), "get"), "get: no such sandbox", "", false},
		{"wrapped status", fmt.Errorf("create sandbox: %w", status.Error(codes.InvalidArgument, "name: required")), "create sandbox: name: required", "", false},
		{"field by convention", New(InvalidArgument, "limits.memory_bytes: must be at most 4096"), "limits.memory_bytes: must be at most 4096", "limits.memory_bytes", false},
		{"indexed field", status.Error(codes.InvalidArgument, "network.secrets[1].domains[0]: not a domain"), "network.secrets[1].domains[0]: not a domain", "network.secrets[1].domains[0]", false},
		{"map key", New(InvalidArgument, "agents.my-agent.allowlist: want an array"), "agents.my-agent.allowlist: want an array", "agents.my-agent.allowlist", false},
		{"unknown field", status.Error(codes.InvalidArgument, `unknown field "shel"`), `unknown field "shel"`, "shel", false},
		{"no field", New(InvalidArgument, "exec-approvals: document larger than 1048576 bytes"), "exec-approvals: document larger than 1048576 bytes", "", false},
		{"a sentence", New(InvalidArgument, "a node may say hello only once"), "a node may say hello only once", "", false},
		{"not found names no field", New(NotFound, "path: no such file"), "path: no such file", "", false},
		{"explicit field", Invalid("X-Shell-User-Id", "must be 1-128 characters"), "X-Shell-User-Id: must be 1-128 characters", "X-Shell-User-Id", false},
		{"explicit field from a peer", ToStatus(Wrap(InvalidArgument, Invalid("name", "required"), "gateway")), "gateway: name: required", "name", false},
		{"context", context.DeadlineExceeded, "context deadline exceeded", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := Public(tt.err)
			if a.Message != tt.wantMsg || a.Param != tt.wantParam || a.Hidden != tt.hidden {
				t.Errorf("Public = (%q, param %q, hidden %v), want (%q, %q, %v)", a.Message, a.Param, a.Hidden, tt.wantMsg, tt.wantParam, tt.hidden)
			}
		})
	}
}

// TestDetailsCrossPeers: the field and the reason of an error survive the
// hops between services.
func TestDetailsCrossPeers(t *testing.T) {
	t.Parallel()
	err := ToStatus(fmt.Errorf("flush: %w", FromStatus(ToStatus(&Error{Kind: InvalidArgument, Msg: "bad", Field: "f", Reason: "R"}))))
	var e *Error
	if got := FromStatus(err); !errors.As(got, &e) || e.Kind != InvalidArgument || e.Field != "f" || e.Reason != "R" {
		t.Fatalf("after two hops: %#v", got)
	}
	if !HasReason(err, codes.InvalidArgument, "R") || HasReason(err, codes.NotFound, "R") || HasReason(err, codes.InvalidArgument, "S") {
		t.Error("HasReason does not see the reason of an error from a peer")
	}
	if st := status.Convert(err); st.Message() != "flush: bad" {
		t.Errorf("message = %q", st.Message())
	}
	if got := Public(err).Code; got != "r" {
		t.Errorf("code = %q, want the reason in lower case", got)
	}
	if got := http.StatusText(Public(err).Status); got != "Bad Request" {
		t.Errorf("status = %q", got)
	}
}
