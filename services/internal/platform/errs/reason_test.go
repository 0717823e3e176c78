package errs

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHasReason(t *testing.T) {
	marked := WithReason(codes.ResourceExhausted, "FULL", "executor x is full", map[string]string{"k": "v"})
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"marked", marked, true},
		{"marked, wrapped", fmt.Errorf("create: %w", marked), true},
		{"another reason", WithReason(codes.ResourceExhausted, "QUOTA", "quota exceeded", nil), false},
		{"another code", WithReason(codes.Unavailable, "FULL", "executor x is full", nil), false},
		{"the same words, unmarked", status.Error(codes.ResourceExhausted, "executor x is full"), false},
		{"not a status", fmt.Errorf("executor x is full"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HasReason(tt.err, codes.ResourceExhausted, "FULL"); got != tt.want {
				t.Fatalf("HasReason(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if st := status.Convert(marked); st.Message() != "executor x is full" || st.Code() != codes.ResourceExhausted {
		t.Fatalf("marked = %v", st)
	}
}
