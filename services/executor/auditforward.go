package executor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

var auditDropped, _ = otel.Meter("github.com/conch-sh/conch/services/executor").Int64Counter("conch.executor.audit.dropped",
	metric.WithDescription("Audit records of runs dropped because the approval service could not take them in time"))

// AuditForwarder hands the executor's records to the approval service,
// which chains and stores them: executors never reach the object store.
// Records wait in a bounded buffer and are sent every interval; a slow or
// absent approval service never blocks a command, and what exceeds the
// bound is dropped, counted and logged.
type AuditForwarder struct {
	client approvalv1.AuditServiceClient
	every  time.Duration
	max    int
	log    *slog.Logger

	mu      sync.Mutex
	buf     []audit.Record
	dropped int64
	// sending serializes calls, keeping each account's records in order.
	sending sync.Mutex
}

// NewAuditForwarder sends to c every interval, holding at most max
// records meanwhile.
func NewAuditForwarder(c approvalv1.AuditServiceClient, every time.Duration, max int, log *slog.Logger) *AuditForwarder {
	return &AuditForwarder{client: c, every: every, max: max, log: log}
}

// Write implements AuditSink.
func (f *AuditForwarder) Write(ctx context.Context, r audit.Record) {
	f.mu.Lock()
	if len(f.buf) >= f.max {
		f.dropped++
		n := f.dropped
		f.mu.Unlock()
		auditDropped.Add(ctx, 1)
		if n == 1 || n%1000 == 0 {
			f.log.WarnContext(ctx, "audit records of runs dropped: buffer full", "dropped", n)
		}
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	f.buf = append(f.buf, r)
	f.mu.Unlock()
}

// WriteSync implements AuditSink: r, and what waited before it, are
// stored before it returns.
func (f *AuditForwarder) WriteSync(ctx context.Context, recs ...audit.Record) error {
	for _, r := range recs {
		f.Write(ctx, r)
	}
	return f.flush(ctx, true)
}

// Run sends buffered records every interval until ctx ends, then once
// more.
func (f *AuditForwarder) Run(ctx context.Context) error {
	send := func(ctx context.Context) error { return f.flush(ctx, false) }
	return audit.FlushEvery(ctx, f.every, send, func(ctx context.Context, err error, last bool) {
		msg := "audit records of runs not sent"
		if last {
			msg += " on shutdown"
		}
		f.log.WarnContext(ctx, msg, "error", err)
	})
}

// Bounds of one RecordRuns call: the approval service takes at most 1000
// records a call, and a gRPC message of 4 MiB is one every server takes
// (THREATS D.25). Every connection of a command is a record that repeats
// its command, up to 1 MiB, so the count alone does not bound the bytes.
const (
	maxRunRecords = 1000
	maxRunBytes   = 4<<20 - 64<<10
)

// nextRuns is the records at the head of recs that one call carries:
// those of the first record's account, within the bounds above; the first
// record goes even when it alone is larger.
func nextRuns(recs []audit.Record) []*approvalv1.AuditRecord {
	var out []*approvalv1.AuditRecord
	size := 0
	for _, r := range recs {
		if len(out) == maxRunRecords || r.Account != recs[0].Account {
			break
		}
		p := audit.ToProto(r)
		// A repeated field's element costs its size and a few bytes of
		// tag and length.
		n := proto.Size(p) + 8
		if len(out) > 0 && size+n > maxRunBytes {
			break
		}
		out, size = append(out, p), size+n
	}
	return out
}

// flush sends every buffered record, a call per account in order; what
// was not sent stays buffered for the next try.
func (f *AuditForwarder) flush(ctx context.Context, sync bool) error {
	f.sending.Lock()
	defer f.sending.Unlock()
	f.mu.Lock()
	batch := f.buf
	f.buf = nil
	f.mu.Unlock()
	done := 0
	var err error
	for done < len(batch) {
		req := &approvalv1.RecordRunsRequest{Sync: sync, Records: nextRuns(batch[done:])}
		if _, err = f.client.RecordRuns(tenant.With(ctx, tenant.Scope{Account: batch[done].Account}), req); err != nil {
			break
		}
		done += len(req.Records)
	}
	if done < len(batch) {
		f.mu.Lock()
		rest := append(batch[done:len(batch):len(batch)], f.buf...)
		if len(rest) > f.max {
			f.dropped += int64(len(rest) - f.max)
			auditDropped.Add(ctx, int64(len(rest)-f.max))
			rest = rest[len(rest)-f.max:]
		}
		f.buf = rest
		f.mu.Unlock()
	}
	return err
}
