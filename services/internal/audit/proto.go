package audit

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// ToProto is r as the API answers it.
func ToProto(r Record) *approvalv1.AuditRecord {
	out := &approvalv1.AuditRecord{
		Time: timestamppb.New(r.Time), Kind: r.Kind, Event: r.Event, Account: r.Account, User: r.User, Session: r.Session,
		Gateway: r.Gateway, Host: r.Host, Node: r.Node, Sandbox: r.Sandbox, Cwd: r.Cwd, Command: r.Command, Plan: r.Plan,
		ResolvedPaths: r.ResolvedPaths, Decision: r.Decision, Reason: r.Reason, ApprovalId: r.ApprovalID,
		ResolvedBy: r.ResolvedBy, Surface: r.Surface, TraceId: r.TraceID, Writer: r.Writer, Seq: r.Seq, Prev: r.Prev, Hash: r.Hash,
	}
	for _, a := range r.Argv {
		out.Argv = append(out.Argv, &approvalv1.AuditArgv{Args: a})
	}
	if o := r.Outcome; o != nil {
		out.Outcome = &approvalv1.AuditOutcome{
			ExitCode: int32(o.ExitCode), TimedOut: o.TimedOut, Error: o.Error, DurationMs: o.DurationMs,
			StdoutBytes: o.StdoutBytes, StderrBytes: o.StderrBytes, Truncated: o.Truncated,
			ProcessId: o.ProcessID, OutputBytes: o.OutputBytes, EgressOmitted: o.EgressOmitted,
		}
	}
	if e := r.Egress; e != nil {
		out.Egress = &approvalv1.AuditEgress{Host: e.Host, Port: e.Port, Address: e.Address, BytesSent: e.BytesSent, BytesReceived: e.BytesReceived, DurationMs: e.DurationMs}
	}
	return out
}

// FromProto is a record an executor sent; the chain fields are left for
// the writer to set.
func FromProto(p *approvalv1.AuditRecord) Record {
	r := Record{
		Kind: p.GetKind(), Account: p.GetAccount(), User: p.GetUser(), Session: p.GetSession(), Gateway: p.GetGateway(),
		Host: p.GetHost(), Node: p.GetNode(), Sandbox: p.GetSandbox(), Cwd: p.GetCwd(), Command: p.GetCommand(), Plan: p.GetPlan(),
		Decision: p.GetDecision(), Reason: p.GetReason(), TraceID: p.GetTraceId(),
	}
	if p.GetTime() != nil {
		r.Time = p.GetTime().AsTime()
	}
	if o := p.GetOutcome(); o != nil {
		r.Outcome = &Outcome{ExitCode: int(o.GetExitCode()), TimedOut: o.GetTimedOut(), Error: o.GetError(), DurationMs: o.GetDurationMs(),
			StdoutBytes: o.GetStdoutBytes(), StderrBytes: o.GetStderrBytes(), Truncated: o.GetTruncated(),
			ProcessID: o.GetProcessId(), OutputBytes: o.GetOutputBytes(), EgressOmitted: o.GetEgressOmitted()}
	}
	if e := p.GetEgress(); e != nil {
		r.Egress = &Egress{Host: e.GetHost(), Port: e.GetPort(), Address: e.GetAddress(), BytesSent: e.GetBytesSent(),
			BytesReceived: e.GetBytesReceived(), DurationMs: e.GetDurationMs()}
	}
	return r
}
