package executor

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/conch-sh/conch/services/executor/process"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// AuditSink receives the executor's records: an AuditForwarder, which
// hands them to the approval service, or an audit.Writer of its own.
type AuditSink interface {
	// Write buffers r and never blocks on the store; a full buffer drops
	// it, counted.
	Write(ctx context.Context, r audit.Record)
	// WriteSync returns nil only once recs are stored (exec.audit sync).
	WriteSync(ctx context.Context, recs ...audit.Record) error
}

var (
	_ AuditSink = (*audit.Writer)(nil)
	_ AuditSink = (*AuditForwarder)(nil)
)

// WithAudit records how each command ended in w, beside the approval
// service's record of its verdict (linked by the trace id).
func WithAudit(w AuditSink) Option { return func(s *Service) { s.audit = w } }

// auditOutcome records the end of a command that ran, or could not, and
// the connections seen while it ran. In sync mode (exec.audit) the records
// are written before the result returns, and a record that cannot be
// written is an error.
func (s *Service) auditOutcome(ctx context.Context, account string, p *ExecParams, res *Result, err error, seen egressSeen) error {
	if s.audit == nil || (res == nil && err == nil) {
		return nil // moved to the background: recorded by auditBackground when it ends
	}
	r := outcomeRecord(ctx, account, p)
	if err != nil {
		r.Outcome.Error = err.Error()
		return s.writeAudit(ctx, p, r, seen)
	}
	setOutcome(r.Outcome, res)
	r.Outcome.StdoutBytes, r.Outcome.StderrBytes = int64(len(res.Stdout)), int64(len(res.Stderr))
	r.Outcome.Truncated = res.StdoutTruncated || res.StderrTruncated
	return s.writeAudit(ctx, p, r, seen)
}

// auditBackground records the end of a command that moved to the
// background: proc is its process as it ended.
func (s *Service) auditBackground(ctx context.Context, account string, p *ExecParams, res *Result, proc process.Snapshot, seen egressSeen) error {
	if s.audit == nil {
		return nil
	}
	r := outcomeRecord(ctx, account, p)
	setOutcome(r.Outcome, res)
	r.Outcome.ProcessID, r.Outcome.OutputBytes = proc.ID, proc.OutputBytes
	return s.writeAudit(ctx, p, r, seen)
}

func outcomeRecord(ctx context.Context, account string, p *ExecParams) audit.Record {
	r := audit.Record{
		Kind: audit.KindOutcome, Account: account, User: p.User, Session: p.Session, Gateway: p.Agent,
		Host: hostName(p), Node: p.Node, Sandbox: p.SandboxID, Cwd: p.Workdir, Command: p.Command, Plan: p.Plan,
		Outcome: &audit.Outcome{ExitCode: -1},
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		r.TraceID = sc.TraceID().String()
	}
	return r
}

// setOutcome completes o from the result of a command that ran.
func setOutcome(o *audit.Outcome, res *Result) {
	o.DurationMs = res.Duration.Milliseconds()
	o.Error = res.Error
	o.TimedOut = res.Outcome == OutcomeTimeout
	if res.Outcome == OutcomeExit {
		o.ExitCode = res.ExitCode
	}
}

// writeAudit writes r, then a record of each connection seen kept, with
// the same context; r's outcome says how many more there were. In sync
// mode they are one write: all stored, or an error.
func (s *Service) writeAudit(ctx context.Context, p *ExecParams, r audit.Record, seen egressSeen) error {
	r.Outcome.EgressOmitted = seen.omitted
	recs := []audit.Record{r}
	for _, c := range seen.conns {
		e := r
		e.Kind, e.Outcome, e.Decision, e.Reason = audit.KindEgress, nil, c.GetDecision(), c.GetReason()
		e.Egress = &audit.Egress{Host: c.GetHost(), Port: c.GetPort(), Address: c.GetAddress(), BytesSent: c.GetBytesSent(), BytesReceived: c.GetBytesReceived(), DurationMs: c.GetDurationMs()}
		recs = append(recs, e)
	}
	if p.Settings.GetAudit() == audit.Sync {
		if err := s.audit.WriteSync(ctx, recs...); err != nil {
			return errs.Wrap(errs.Unavailable, err, "audit trail: the command ran, but its records could not be stored (exec.audit is sync)")
		}
		return nil
	}
	for _, r := range recs {
		s.audit.Write(ctx, r)
	}
	return nil
}

func hostName(p *ExecParams) string {
	if p.outside() {
		if p.Node != "" {
			return "node"
		}
		return "gateway"
	}
	return "sandbox"
}
