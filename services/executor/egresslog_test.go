package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/egressproxy"
)

// A command reports the connections that ended while it ran, waiting a
// little for those still open, and counts what it leaves out.
func TestEgressLog(t *testing.T) {
	t.Parallel()
	l := newEgressLog()
	l.add(egressproxy.Record{Host: "before.example", Decision: "refused"})
	mark := l.mark()
	l.opened()
	go l.add(egressproxy.Record{Host: "late.example", Decision: "allowed"})
	got, omitted := l.since(mark, 10*time.Second)
	if len(got) != 1 || got[0].GetHost() != "late.example" || omitted != 0 {
		t.Fatalf("since = %v, %d", got, omitted)
	}
	// A connection that stays open does not hold the command for long.
	l.opened()
	mark = l.mark()
	start := time.Now()
	if got, _ := l.since(mark, 50*time.Millisecond); len(got) != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("since with a connection open = %v after %v", got, time.Since(start))
	}
	mark = l.mark()
	for i := range maxEgressLog + 10 {
		l.add(egressproxy.Record{Host: fmt.Sprintf("h%d.example", i), Decision: "refused"})
	}
	got, omitted = l.since(mark, 0)
	if len(got) != maxEgressReported || omitted != maxEgressLog+10-maxEgressReported {
		t.Fatalf("since after a flood = %d records, %d omitted", len(got), omitted)
	}
}
