package executor

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/audit"
)

// TestNextRuns checks how the forwarder splits its buffer into RecordRuns
// calls: one account a call, in order, within the count and the message
// size every gRPC server takes, however large the commands its records
// repeat.
func TestNextRuns(t *testing.T) {
	t.Parallel()
	recs := func(account string, n, commandBytes int) []audit.Record {
		out := make([]audit.Record, n)
		for i := range out {
			out[i] = audit.Record{Kind: audit.KindEgress, Account: account, Command: strings.Repeat("x", commandBytes),
				Egress: &audit.Egress{Host: "example.org", Port: 443}}
		}
		return out
	}
	cases := []struct {
		name string
		buf  []audit.Record
		want []int // records per call
	}{
		{name: "one account", buf: recs("a", 3, 10), want: []int{3}},
		{name: "accounts in turn", buf: append(append(recs("a", 2, 10), recs("b", 1, 10)...), recs("a", 1, 10)...), want: []int{2, 1, 1}},
		{name: "more than a call's count", buf: recs("a", 2*maxRunRecords+1, 10), want: []int{maxRunRecords, maxRunRecords, 1}},
		{name: "a 1 MiB command's connections", buf: recs("a", 10, 1<<20), want: []int{3, 3, 3, 1}},
		{name: "a record larger than a call goes alone", buf: recs("a", 2, 5<<20), want: []int{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got []int
			for done := 0; done < len(c.buf); {
				batch := nextRuns(c.buf[done:])
				if len(batch) > 1 {
					if n := proto.Size(&approvalv1.RecordRunsRequest{Records: batch}); n > 4<<20 {
						t.Fatalf("a call of %d bytes", n)
					}
				}
				for _, r := range batch {
					if r.GetAccount() != c.buf[done].Account {
						t.Fatalf("a call mixes accounts")
					}
				}
				got = append(got, len(batch))
				done += len(batch)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("records per call (-want +got):\n%s", diff)
			}
		})
	}
}
