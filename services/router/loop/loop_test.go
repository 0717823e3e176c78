package loop

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStreamMessage(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		started bool
		want    string
	}{
		{"the executor's answer", status.Error(codes.NotFound, "Sandbox not found"), false, "Sandbox not found"},
		{"not a status", errors.New("boom"), false, "boom"},
		{"lost before the command started", status.Error(codes.Unavailable, "error reading from server: EOF"), false,
			"the executor holding the sandbox is unavailable (error reading from server: EOF)"},
		{"lost while it ran", status.Error(codes.Unavailable, "error reading from server: EOF"), true,
			"the executor running the command went away before it finished, so its outcome is unknown (error reading from server: EOF)"},
		{"placement named it", status.Error(codes.Unavailable, "the executor holding sandbox sb-1 is not reachable; it may be restarting"), false,
			"the executor holding sandbox sb-1 is not reachable; it may be restarting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := streamMessage(tt.err, tt.started); got != tt.want {
				t.Errorf("streamMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
