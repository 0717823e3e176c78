package executor

import (
	"context"
	"errors"
	"fmt"
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

// errForwardBufferFull means records could not wait to be sent: the
// forwarder already holds its bound of them, because the approval service
// is slow or down.
var errForwardBufferFull = errors.New("buffer full: earlier records still wait for the approval service")

// AuditForwarder hands the executor's records to the approval service,
// which chains and stores them: executors never reach the object store.
// Records wait in a bounded buffer and are sent every interval; a slow or
// absent approval service never blocks a command, and what exceeds the
// bound is dropped, counted and logged. Records of sync mode are sent at
// once, in calls that ask the approval service to store them before it
// answers, and never dropped: they are stored or their caller hears why
// not.
type AuditForwarder struct {
	client approvalv1.AuditServiceClient
	every  time.Duration
	max    int
	log    *slog.Logger

	mu      sync.Mutex
	buf     []audit.Record
	dropped int64
	// sending serializes calls, keeping each account's records in order,
	// and is held by a sync write from buffering its records to their
	// last call.
	sending sync.Mutex
}

// NewAuditForwarder sends to c every interval, holding at most max
// records meanwhile.
func NewAuditForwarder(c approvalv1.AuditServiceClient, every time.Duration, max int, log *slog.Logger) *AuditForwarder {
	return &AuditForwarder{client: c, every: every, max: max, log: log}
}

// Write implements AuditSink: r waits for the next send.
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

// WriteSync implements AuditSink: recs, and what waited before them, are
// stored by the approval service when it returns nil. recs are buffered
// while this holds the right to send, so the periodic send, which asks
// for no sync write, can never take them; when the buffer is full, what
// waits is sent first to make room, and recs are refused if it cannot be.
func (f *AuditForwarder) WriteSync(ctx context.Context, recs ...audit.Record) error {
	f.sending.Lock()
	defer f.sending.Unlock()
	if !f.buffer(recs) {
		if err := f.flushLocked(ctx, true); err != nil {
			return fmt.Errorf("audit: records not sent: %w (%w)", errForwardBufferFull, err)
		}
		if !f.buffer(recs) {
			return fmt.Errorf("audit: records not sent: %w", errForwardBufferFull)
		}
	}
	if err := f.flushLocked(ctx, true); err != nil {
		return fmt.Errorf("audit: records not sent: %w", err)
	}
	return nil
}

// buffer appends recs, all of them or, when they do not fit, none.
func (f *AuditForwarder) buffer(recs []audit.Record) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.buf)+len(recs) > f.max {
		return false
	}
	now := time.Now()
	for _, r := range recs {
		if r.Time.IsZero() {
			r.Time = now
		}
		f.buf = append(f.buf, r)
	}
	return true
}

// Run sends buffered records every interval until ctx ends, then once
// more.
func (f *AuditForwarder) Run(ctx context.Context) error {
	send := func(ctx context.Context) error {
		f.sending.Lock()
		defer f.sending.Unlock()
		return f.flushLocked(ctx, false)
	}
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

// flushLocked sends every buffered record, a call per account in order,
// under f.sending; what was not sent stays buffered for the next try.
func (f *AuditForwarder) flushLocked(ctx context.Context, sync bool) error {
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
