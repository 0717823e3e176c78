package responsestore

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/upstream"
)

// BenchmarkContinuation continues a 100-turn conversation (each turn a
// question, a shell call with 2 KiB of output and an answer) by one
// response: read the conversation, store what the response added. It
// reports the bytes allocated per continuation beside the conversation's
// own size, the floor: what a continuation must hold to send it upstream;
// and the bytes it stores (compressed), which are its own turn's only.
//
//	go test -run '^$' -bench Continuation -benchmem ./router/responsestore/
func BenchmarkContinuation(b *testing.B) {
	const turns = 100
	f := newFixture(b, fsBackend(b))
	f.limits[quotas.StoredResponses] = 1 << 30
	f.limits[quotas.StoredResponseBytes] = 1 << 40
	ctx := context.Background()
	turn := func(i int) []upstream.StoredMessage {
		call := fmt.Sprintf("call_%d", i)
		return []upstream.StoredMessage{
			{Role: "user", Content: fmt.Sprintf("step %d: list what changed and why, then run the tests again", i)},
			{Role: "assistant", ToolCalls: []upstream.StoredCall{{ID: call, Name: "shell", Arguments: `{"commands":["go test ./..."]}`}}},
			{Role: "tool", ToolCallID: call, Content: strings.Repeat(fmt.Sprintf("ok  \tpkg/%d\t0.%03ds\n", i, i), 2048/24)},
			{Role: "assistant", Content: strings.Repeat("The tests pass; the change is in place. ", 12)},
		}
	}
	var prev *Thread
	var conversation []upstream.StoredMessage
	for i := range turns {
		id := fmt.Sprintf("resp_%03d", i)
		added := turn(i)
		if err := f.Put(ctx, "acct", id, prev, &Response{Response: map[string]any{"id": id}}, Turn{Messages: added}); err != nil {
			b.Fatal(err)
		}
		conversation = append(conversation, added...)
		var err error
		if prev, err = f.Thread(ctx, "acct", id); err != nil {
			b.Fatal(err)
		}
	}
	floor, _ := json.Marshal(conversation)
	last := prev.Chain[len(prev.Chain)-1]
	before, _, err := quotas.Read(ctx, f.etcd, quotas.StoredResponses, "acct")
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		th, err := f.Thread(ctx, "acct", last)
		if err != nil {
			b.Fatal(err)
		}
		if len(th.Messages) != 4*turns {
			b.Fatalf("%d messages", len(th.Messages))
		}
		th.Messages = nil
		id := fmt.Sprintf("next_%d", i)
		if err := f.Put(ctx, "acct", id, th, &Response{Response: map[string]any{"id": id}}, Turn{Messages: turn(turns)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after, _, err := quotas.Read(ctx, f.etcd, quotas.StoredResponses, "acct")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(floor)), "conversation-B")
	// What a continuation stores: its own segment, not the conversation.
	b.ReportMetric(float64(after[quotas.StoredResponseBytes]-before[quotas.StoredResponseBytes])/float64(b.N), "stored-B/op")
}

// BenchmarkPutDurable stores a response of a few kilobytes, as conch dev
// does (an etcd that fsyncs, the directory store, which syncs each object
// before it counts as stored), and reports the p50 of that store
// (store-p50-ms) beside the p50 of putting one small key on the same etcd
// (put-p50-ms), the floor of any write that must be on disk before it is
// acknowledged. A stored response is two objects and one small etcd
// transaction.
//
//	go test -run '^$' -bench PutDurable ./router/responsestore/
func BenchmarkPutDurable(b *testing.B) {
	etcd := etcdxtest.StartDurableForTest(b)
	s, err := New(Options{Etcd: etcd, Objects: fsBackend(b)})
	if err != nil {
		b.Fatal(err)
	}
	items := make([]map[string]any, 20)
	for i := range items {
		items[i] = map[string]any{"type": "message", "role": "assistant", "content": strings.Repeat("the quick brown fox jumps over the lazy dog ", 4)}
	}
	resp := &Response{Response: map[string]any{"id": "resp", "output": items}}
	turn := Turn{Messages: []upstream.StoredMessage{{Role: "user", Content: "run `echo hi`"}, {Role: "assistant", Content: strings.Repeat("hi ", 40)}}}
	var store, put []time.Duration
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		if err := s.Put(b.Context(), "acct", fmt.Sprintf("resp_%d", n), nil, resp, turn); err != nil {
			b.Fatal(err)
		}
		store = append(store, time.Since(start))
		start = time.Now()
		if _, err := etcd.Put(b.Context(), "bench/key", "v"); err != nil {
			b.Fatal(err)
		}
		put = append(put, time.Since(start))
	}
	for _, m := range []struct {
		ds   []time.Duration
		unit string
	}{{store, "store-p50-ms"}, {put, "put-p50-ms"}} {
		slices.Sort(m.ds)
		b.ReportMetric(float64(m.ds[len(m.ds)/2].Microseconds())/1000, m.unit)
	}
}
