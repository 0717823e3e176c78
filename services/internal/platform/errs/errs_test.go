package errs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorMessage(t *testing.T) {
	cause := errors.New("disk full")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"new", New(NotFound, "workspace %q", "w1"), `workspace "w1"`},
		{"wrap", Wrap(Unavailable, cause, "write %s", "blob"), "write blob: disk full"},
		{"wrap without message", &Error{Kind: Internal, Err: cause}, "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
	if err := Wrap(Internal, cause, "x"); !errors.Is(err, cause) {
		t.Errorf("errors.Is(Wrap(cause), cause) = false")
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"domain", New(Conflict, "stale"), Conflict},
		{"wrapped domain", fmt.Errorf("save: %w", New(NotFound, "x")), NotFound},
		{"outermost wins", Wrap(Unavailable, New(NotFound, "x"), "call"), Unavailable},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), DeadlineExceeded},
		{"canceled", context.Canceled, Canceled},
		{"status", status.Error(codes.PermissionDenied, "no"), PermissionDenied},
		{"aborted status", status.Error(codes.Aborted, "no"), Conflict},
		{"plain", errors.New("boom"), Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestToStatus(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
		wantMsg  string
	}{
		{"nil", nil, codes.OK, ""},
		{"invalid argument", New(InvalidArgument, "name empty"), codes.InvalidArgument, "name empty"},
		{"not found", New(NotFound, "no such run"), codes.NotFound, "no such run"},
		{"already exists", New(AlreadyExists, "dup"), codes.AlreadyExists, "dup"},
		{"permission denied", New(PermissionDenied, "nope"), codes.PermissionDenied, "nope"},
		{"unauthenticated", New(Unauthenticated, "who"), codes.Unauthenticated, "who"},
		{"resource exhausted", New(ResourceExhausted, "quota"), codes.ResourceExhausted, "quota"},
		{"failed precondition", New(FailedPrecondition, "closed"), codes.FailedPrecondition, "closed"},
		{"conflict", New(Conflict, "stale"), codes.Aborted, "stale"},
		{"deadline kind", New(DeadlineExceeded, "slow"), codes.DeadlineExceeded, "slow"},
		{"unavailable", Wrap(Unavailable, errors.New("refused"), "dial"), codes.Unavailable, "dial: refused"},
		{"unimplemented", New(Unimplemented, "later"), codes.Unimplemented, "later"},
		{"wrapped domain", fmt.Errorf("load: %w", New(NotFound, "x")), codes.NotFound, "load: x"},
		{"internal hides detail", Wrap(Internal, errors.New("secret dsn"), "query"), codes.Internal, "internal error"},
		{"plain error is internal", errors.New("secret"), codes.Internal, "internal error"},
		{"context deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded"},
		{"context canceled", context.Canceled, codes.Canceled, "context canceled"},
		{"status passes through", status.Error(codes.Unavailable, "draining"), codes.Unavailable, "draining"},
		{"unknown status is internal", status.Error(codes.Unknown, "secret"), codes.Internal, "internal error"},
		{"domain kind beats wrapped status", Wrap(NotFound, status.Error(codes.Unavailable, "down"), "get"), codes.NotFound, "get: rpc error: code = Unavailable desc = down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ToStatus(tt.err)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("ToStatus(nil) = %v, want nil", got)
				}
				return
			}
			s, ok := status.FromError(got)
			if !ok {
				t.Fatalf("ToStatus() = %v, not a status", got)
			}
			if s.Code() != tt.wantCode || s.Message() != tt.wantMsg {
				t.Errorf("ToStatus() = (%v, %q), want (%v, %q)", s.Code(), s.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestFromStatus(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantKind Kind
		wantMsg  string
	}{
		{"not found", status.Error(codes.NotFound, "no run"), NotFound, "no run"},
		{"aborted", status.Error(codes.Aborted, "stale"), Conflict, "stale"},
		{"out of range", status.Error(codes.OutOfRange, "past end"), InvalidArgument, "past end"},
		{"unavailable", status.Error(codes.Unavailable, "down"), Unavailable, "down"},
		{"internal", status.Error(codes.Internal, "internal error"), Internal, "internal error"},
		{"unknown", status.Error(codes.Unknown, "x"), Internal, "x"},
		{"canceled", status.Error(codes.Canceled, "gone"), Canceled, "gone"},
		{"not a status", context.DeadlineExceeded, DeadlineExceeded, "context deadline exceeded"},
		{"already domain", New(Conflict, "c"), Conflict, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromStatus(tt.err)
			var e *Error
			if !errors.As(got, &e) {
				t.Fatalf("FromStatus() = %T, want *Error", got)
			}
			if e.Kind != tt.wantKind || got.Error() != tt.wantMsg {
				t.Errorf("FromStatus() = (%v, %q), want (%v, %q)", e.Kind, got.Error(), tt.wantKind, tt.wantMsg)
			}
		})
	}
	if FromStatus(nil) != nil {
		t.Error("FromStatus(nil) != nil")
	}
}

func TestRoundTrip(t *testing.T) {
	for k := range Canceled + 1 {
		t.Run(k.String(), func(t *testing.T) {
			got := KindOf(FromStatus(ToStatus(New(k, "m"))))
			if got != k {
				t.Errorf("round trip of %v = %v", k, got)
			}
		})
	}
}

func TestInterceptors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
		wantLog  bool
	}{
		{"ok", nil, codes.OK, false},
		{"domain", New(NotFound, "x"), codes.NotFound, false},
		{"internal", errors.New("secret detail"), codes.Internal, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))

			_, uerr := UnaryServerInterceptor(log)(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/t.T/U"},
				func(context.Context, any) (any, error) { return nil, tt.err })
			serr := StreamServerInterceptor(log)(nil, fakeStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: "/t.T/S"},
				func(any, grpc.ServerStream) error { return tt.err })

			for _, err := range []error{uerr, serr} {
				if got := status.Code(err); got != tt.wantCode {
					t.Errorf("code = %v, want %v", got, tt.wantCode)
				}
			}
			logged := strings.Count(buf.String(), "secret detail")
			if tt.wantLog && logged != 2 {
				t.Errorf("log has the detail %d times, want 2:\n%s", logged, buf.String())
			}
			if !tt.wantLog && buf.Len() != 0 {
				t.Errorf("unexpected log:\n%s", buf.String())
			}
		})
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }
