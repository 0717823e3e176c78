package audit

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRunRecordsCrossTheWire checks that an executor's records, sent to
// the approval service as protos, arrive whole: every field of an outcome
// and of a connection.
func TestRunRecordsCrossTheWire(t *testing.T) {
	t.Parallel()
	base := Record{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Account: "acme", User: "u", Session: "s", Gateway: "g",
		Host: "sandbox", Sandbox: "sb-1", Cwd: "/home/workspace", Command: "curl x", Plan: "curl x", TraceID: "t",
	}
	outcome, conn := base, base
	outcome.Kind = KindOutcome
	outcome.Outcome = &Outcome{ExitCode: 3, TimedOut: true, Error: "e", DurationMs: 4, StdoutBytes: 5, StderrBytes: 6,
		Truncated: true, ProcessID: "p-1", OutputBytes: 7, EgressOmitted: 8}
	conn.Kind, conn.Decision, conn.Reason = KindEgress, "refused", "conch: egress to x:80 is not allowed"
	conn.Egress = &Egress{Host: "x", Port: 80, Address: "192.0.2.1", BytesSent: 1, BytesReceived: 2, DurationMs: 3}
	for _, r := range []Record{outcome, conn} {
		if diff := cmp.Diff(r, FromProto(ToProto(r))); diff != "" {
			t.Errorf("%s record (-sent +received):\n%s", r.Kind, diff)
		}
	}
}
