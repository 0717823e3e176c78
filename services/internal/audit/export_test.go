package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// memoryExporter keeps the log records it is given.
type memoryExporter struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (m *memoryExporter) Export(_ context.Context, recs []sdklog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.recs = append(m.recs, r.Clone())
	}
	return nil
}
func (*memoryExporter) Shutdown(context.Context) error   { return nil }
func (*memoryExporter) ForceFlush(context.Context) error { return nil }

func (m *memoryExporter) taken() []sdklog.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs
}

// Records are exported as OpenTelemetry log records once they are stored,
// not before, each with its stored line as the body.
func TestExportAsLogRecords(t *testing.T) {
	exp := &memoryExporter{}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)))
	otel.SetLoggerProvider(lp)
	t.Cleanup(func() { _ = lp.Shutdown(context.Background()) })

	ctx := t.Context()
	st := newFS(t)
	w := newTestWriter(t, st, etcdxtest.StartForTest(t), DefaultEtcdPrefix, 100)
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	w.Write(ctx, Record{Time: at, Kind: KindCommand, Account: "acme", User: "ann", Gateway: "ops", Command: "ls -l", Decision: "allow", TraceID: "0af7651916cd43dd8448eb211c80319c"})
	w.Write(ctx, Record{Time: at, Kind: KindOutcome, Account: "acme", User: "ann", Command: "ls -l", Outcome: &Outcome{ExitCode: 0}})
	if n := len(exp.taken()); n != 0 {
		t.Fatalf("%d records exported before they were stored", n)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	lines := segmentLines(t, st, SegmentKey("acme", at, w.ID(), 1))

	got := exp.taken()
	if len(got) != len(lines) {
		t.Fatalf("exported %d log records for %d stored records", len(got), len(lines))
	}
	for i, lr := range got {
		attrs := attrsOf(lr)
		var r Record
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatal(err)
		}
		if lr.EventName() != EventName || lr.Body().AsString() != lines[i] || !lr.Timestamp().Equal(at) ||
			attrs["conch.audit.kind"] != r.Kind || attrs["conch.account"] != "acme" || attrs["conch.audit.hash"] != r.Hash ||
			attrs["conch.audit.seq"] != fmt.Sprint(r.Seq) || attrs["conch.user"] != "ann" {
			t.Errorf("log record %d: event %q body %q time %v attrs %v; stored %s", i, lr.EventName(), lr.Body().AsString(), lr.Timestamp(), attrs, lines[i])
		}
	}
	if attrs := attrsOf(got[0]); attrs["conch.gateway"] != "ops" || attrs["conch.audit.decision"] != "allow" || attrs["trace_id"] != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the verdict's attributes: %v", attrs)
	}
	if _, ok := attrsOf(got[1])["conch.gateway"]; ok {
		t.Errorf("an empty field is an attribute: %v", attrsOf(got[1]))
	}
}

func attrsOf(lr sdklog.Record) map[string]string {
	attrs := map[string]string{}
	lr.WalkAttributes(func(kv attribute.KeyValue) bool {
		attrs[string(kv.Key)] = kv.Value.Emit()
		return true
	})
	return attrs
}
