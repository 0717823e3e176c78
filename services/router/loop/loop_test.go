package loop

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/conch-sh/conch/services/internal/egress"
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

// TestTakeEgress checks that a completion's conch.egress keeps every
// delivery of its commands before any refusal, whatever came first, and
// that egress_omitted counts exactly what it and the executors left out.
func TestTakeEgress(t *testing.T) {
	t.Parallel()
	conns := func(prefix string, n int, decision string) []EgressConnection {
		var out []EgressConnection
		for i := range n {
			out = append(out, EgressConnection{Host: fmt.Sprintf("%s%d.example", prefix, i), Decision: decision})
		}
		return out
	}
	// command is what one command's Finished reported.
	type command struct {
		egress  []EgressConnection
		omitted int
	}
	cases := []struct {
		name     string
		commands []command
		allowed  int // of the connections kept
		kept     int
		omitted  int
	}{
		{name: "none", commands: []command{{}}},
		{name: "one command's", commands: []command{{egress: append(conns("r", 2, "refused"), conns("a", 1, "allowed")...), omitted: 3}},
			allowed: 1, kept: 3, omitted: 3},
		{name: "a delivery after refusals of earlier commands", commands: []command{
			{egress: conns("r", egress.MaxOtherReported, "refused"), omitted: 6},
			{egress: conns("s", egress.MaxOtherReported, "refused"), omitted: 6},
			{egress: conns("t", egress.MaxOtherReported, "refused")},
			{egress: conns("u", egress.MaxOtherReported, "refused")},
			{egress: conns("v", egress.MaxOtherReported, "refused")},
			{egress: conns("a", 1, "allowed")},
		}, allowed: 1, kept: egress.MaxOtherReported + 1, omitted: 4*egress.MaxOtherReported + 12},
		{name: "more deliveries than a completion keeps", commands: []command{
			{egress: conns("a", egress.MaxAllowedReported, "allowed")},
			{egress: conns("b", 10, "allowed"), omitted: 1},
		}, allowed: egress.MaxAllowedReported, kept: egress.MaxAllowedReported, omitted: 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			res := &Result{}
			for _, cmd := range c.commands {
				cfg.egress, cfg.egressOmitted = cmd.egress, cmd.omitted
				cfg.takeEgress(res)
			}
			allowed := 0
			for _, e := range res.Egress {
				if e.Decision == "allowed" {
					allowed++
				}
			}
			if allowed != c.allowed || len(res.Egress) != c.kept || res.EgressOmitted != c.omitted {
				t.Fatalf("%d kept, %d allowed, %d omitted; want %d, %d, %d", len(res.Egress), allowed, res.EgressOmitted, c.kept, c.allowed, c.omitted)
			}
		})
	}
}
