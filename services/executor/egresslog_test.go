package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/egress"
)

// records are n connections to prefix0.example, prefix1.example, … with
// decision.
func records(prefix string, n int, decision string) []egressproxy.Record {
	var out []egressproxy.Record
	for i := range n {
		r := egressproxy.Record{Host: fmt.Sprintf("%s%d.example", prefix, i), Decision: decision}
		if decision == "allowed" {
			r.Address = "192.0.2.1"
		}
		out = append(out, r)
	}
	return out
}

func hosts(recs []egressproxy.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Host)
	}
	return out
}

// TestEgressLog checks what a command reports of its sandbox's
// connections: those that ended while it ran, every delivery kept before
// any refusal, and the exact count of what is left out.
func TestEgressLog(t *testing.T) {
	t.Parallel()
	refused70 := records("r", 70, "refused")
	allowed := records("a", 1, "allowed")
	cases := []struct {
		name           string
		before, during []egressproxy.Record
		want           []string
		omitted        int32
	}{
		{name: "none"},
		{name: "only those after the command started", before: records("b", 3, "refused"), during: allowed, want: []string{"a0.example"}},
		{name: "a delivery after 70 refusals", during: append(append([]egressproxy.Record(nil), refused70...), allowed...),
			want: append(hosts(refused70[:egress.MaxOtherReported]), "a0.example"), omitted: int32(70 - egress.MaxOtherReported)},
		{name: "more deliveries than a report keeps", during: records("a", egress.MaxAllowedReported+5, "allowed"),
			want: hosts(records("a", egress.MaxAllowedReported, "allowed")), omitted: 5},
		{name: "failed and limited count with the refused", during: append(records("f", egress.MaxOtherReported, "failed"), append(records("l", 2, "limited"), allowed...)...),
			want: append(hosts(records("f", egress.MaxOtherReported, "failed")), "a0.example"), omitted: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newEgressLog()
			for _, r := range c.before {
				l.add(r)
			}
			w := l.watch()
			for _, r := range c.during {
				l.add(r)
			}
			seen := w.take(0)
			var got []string
			for _, x := range seen.conns {
				got = append(got, x.GetHost())
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if seen.omitted != c.omitted {
				t.Errorf("omitted %d, want %d", seen.omitted, c.omitted)
			}
		})
	}

	t.Run("commands at once", func(t *testing.T) {
		t.Parallel()
		l := newEgressLog()
		a := l.watch()
		l.add(egressproxy.Record{Host: "x.example", Decision: "refused"})
		b := l.watch()
		l.add(egressproxy.Record{Host: "y.example", Decision: "refused"})
		if got := a.take(0).conns; len(got) != 2 || got[0].GetHost() != "x.example" || got[1].GetHost() != "y.example" {
			t.Fatalf("first command: %v", got)
		}
		l.add(egressproxy.Record{Host: "z.example", Decision: "refused"})
		if got := b.take(0).conns; len(got) != 2 || got[0].GetHost() != "y.example" || got[1].GetHost() != "z.example" {
			t.Fatalf("second command: %v", got)
		}
		if len(l.watches) != 0 {
			t.Fatalf("%d watches left", len(l.watches))
		}
	})

	t.Run("open connections", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			end  egressproxy.Record
		}{
			{"allowed", egressproxy.Record{Host: "late.example", Address: "192.0.2.1", Decision: "allowed"}},
			{"given up after it was made", egressproxy.Record{Host: "late.example", Address: "192.0.2.1", Decision: "failed"}},
		}
		for _, c := range cases {
			l := newEgressLog()
			w := l.watch()
			l.opened()
			go l.add(c.end)
			start := time.Now()
			seen := w.take(time.Minute)
			if len(seen.conns) != 1 || seen.conns[0].GetHost() != "late.example" || time.Since(start) > 30*time.Second {
				t.Fatalf("%s: %v after %v", c.name, seen.conns, time.Since(start))
			}
		}
		// One that stays open does not hold the command for long.
		l := newEgressLog()
		l.opened()
		w := l.watch()
		start := time.Now()
		if seen := w.take(50 * time.Millisecond); len(seen.conns) != 0 || time.Since(start) > 30*time.Second {
			t.Fatalf("with a connection open: %v after %v", seen.conns, time.Since(start))
		}
	})

	t.Run("no sandbox network", func(t *testing.T) {
		t.Parallel()
		var w *egressWatch
		if seen := w.take(time.Minute); seen.conns != nil || seen.omitted != 0 {
			t.Fatalf("nil watch: %+v", seen)
		}
	})
}
