package audit

import (
	"fmt"
	"testing"
	"time"
)

// inMemoryTrail is a chain of n segments of one record each, as Verify
// finds it: anchors in etcd's order, segment keys as listed, and each
// segment's records.
func inMemoryTrail(tb testing.TB, n int) (anchors []Anchor, keys []string, segs map[string]Segment) {
	tb.Helper()
	segs = make(map[string]Segment, n)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := ""
	for i := range n {
		seq := int64(i + 1)
		r := Record{Time: base.Add(time.Duration(i) * time.Hour), Kind: KindCommand, Account: "acme", Command: "ls"}
		if err := r.seal("w.1", seq, prev); err != nil {
			tb.Fatal(err)
		}
		prev = r.Hash
		key := SegmentKey("acme", r.Time, "w.1", seq)
		anchors = append(anchors, Anchor{Key: key, First: seq, Last: seq, Hash: r.Hash})
		keys = append(keys, key)
		segs[key] = Segment{Key: key, Records: []Record{r}}
	}
	return anchors, keys, segs
}

// BenchmarkCheckChains reports what Verify's own work costs a segment (of
// one record), its reads of the store aside, in trails of growing length:
// the same at every length, as its work is linear. A trail of 90 days'
// retention holds a segment per account, writer and flush (2s).
func BenchmarkCheckChains(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			anchors, keys, segs := inMemoryTrail(b, n)
			read := func(key string) Segment { return segs[key] }
			for b.Loop() {
				if rep := checkChains("acme", anchors, keys, read); rep.Problem != nil || rep.Records != n {
					b.Fatalf("verify: %+v %v", rep, rep.Problem)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/segment")
		})
	}
}
