package approval

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	objstore "github.com/conch-sh/conch/services/internal/store"
)

// Page sizes of ListAuditRecords.
const (
	defaultAuditPage = 100
	maxAuditPage     = 1000
)

// AuditServer serves AuditService over the stored audit trail.
type AuditServer struct {
	approvalv1.UnsafeAuditServiceServer

	store      objstore.Store
	etcd       *clientv3.Client
	etcdPrefix string
	// judge replays policies; nil refuses ReplayPolicy.
	judge *Server
	// writer appends executors' records; nil refuses RecordRuns.
	writer *audit.Writer
}

var _ approvalv1.AuditServiceServer = (*AuditServer)(nil)

// NewAuditServer reads the trail in st whose anchors are under etcdPrefix
// in cli, replays policies with judge's engine and appends executors'
// records with w.
func NewAuditServer(st objstore.Store, cli *clientv3.Client, etcdPrefix string, judge *Server, w *audit.Writer) (*AuditServer, error) {
	if st == nil || cli == nil {
		return nil, errors.New("approval: audit needs an object store and etcd")
	}
	return &AuditServer{store: st, etcd: cli, etcdPrefix: etcdPrefix, judge: judge, writer: w}, nil
}

// maxRunRecords bounds one RecordRuns call.
const maxRunRecords = 1000

// RecordRuns implements AuditService.
func (a *AuditServer) RecordRuns(ctx context.Context, req *approvalv1.RecordRunsRequest) (*approvalv1.RecordRunsResponse, error) {
	if a.writer == nil {
		return nil, errs.New(errs.Unimplemented, "audit: no writer here")
	}
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.GetRecords()) > maxRunRecords {
		return nil, errs.New(errs.InvalidArgument, "records: at most %d", maxRunRecords)
	}
	recs := make([]audit.Record, 0, len(req.GetRecords()))
	for i, pr := range req.GetRecords() {
		r := audit.FromProto(pr)
		if r.Kind != audit.KindOutcome && r.Kind != audit.KindEgress {
			return nil, errs.New(errs.InvalidArgument, "records[%d].kind: want outcome or egress", i)
		}
		if r.Account != account {
			return nil, errs.New(errs.InvalidArgument, "records[%d].account: not the caller's", i)
		}
		recs = append(recs, r)
	}
	if req.GetSync() {
		// All of them are stored, or the call fails: an outcome is not
		// reported recorded while its connections were dropped.
		if err := a.writer.WriteSync(ctx, recs...); err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "audit trail: records not stored")
		}
		return &approvalv1.RecordRunsResponse{}, nil
	}
	for _, r := range recs {
		a.writer.Write(ctx, r)
	}
	return &approvalv1.RecordRunsResponse{}, nil
}

// Register registers the service's gRPC handlers on g.
func (a *AuditServer) Register(g *grpc.Server) {
	approvalv1.RegisterAuditServiceServer(g, a)
}

// accounts is what the caller may read: its own account, or for the admin
// every account (nil) or the one asked for.
func auditAccounts(ctx context.Context, asked string) ([]string, error) {
	sc, ok := tenant.From(ctx)
	if !ok || sc.Account == "" {
		return nil, errs.New(errs.Unauthenticated, "no account: the call did not come through the router")
	}
	switch {
	case sc.Admin && asked == "":
		return nil, nil
	case sc.Admin:
		return []string{asked}, nil
	case asked != "" && asked != sc.Account:
		return nil, errs.New(errs.PermissionDenied, "account: only the admin key reads another account's audit trail")
	}
	return []string{sc.Account}, nil
}

// ListAuditRecords implements AuditService.
func (a *AuditServer) ListAuditRecords(ctx context.Context, req *approvalv1.ListAuditRecordsRequest) (*approvalv1.ListAuditRecordsResponse, error) {
	accounts, err := auditAccounts(ctx, req.GetAccount())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > maxAuditPage:
		return nil, errs.New(errs.InvalidArgument, "page_size: at most %d", maxAuditPage)
	case size == 0:
		size = defaultAuditPage
	}
	q := audit.Query{
		Accounts: accounts, Gateway: req.GetGateway(), User: req.GetUser(), Decision: req.GetDecision(), Q: req.GetQ(),
		Limit: size, Before: req.GetPageToken(),
	}
	if req.GetSince() != nil {
		q.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		q.Until = req.GetUntil().AsTime()
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, errs.New(errs.InvalidArgument, "until: before since")
	}
	recs, next, err := audit.Read(ctx, a.store, q)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "audit: read")
	}
	out := &approvalv1.ListAuditRecordsResponse{Records: make([]*approvalv1.AuditRecord, 0, len(recs)), NextPageToken: next}
	for _, r := range recs {
		out.Records = append(out.Records, audit.ToProto(r))
	}
	return out, nil
}

// VerifyAudit implements AuditService.
func (a *AuditServer) VerifyAudit(ctx context.Context, req *approvalv1.VerifyAuditRequest) (*approvalv1.VerifyAuditResponse, error) {
	accounts, err := auditAccounts(ctx, req.GetAccount())
	if err != nil {
		return nil, err
	}
	if accounts == nil {
		if accounts, err = audit.Accounts(ctx, a.store); err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "audit: list accounts")
		}
	}
	out := &approvalv1.VerifyAuditResponse{Ok: true, Reports: []*approvalv1.AuditVerifyReport{}}
	for _, acc := range accounts {
		rep, err := audit.Verify(ctx, a.store, a.etcd, a.etcdPrefix, acc)
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "audit: verify %s", acc)
		}
		r := &approvalv1.AuditVerifyReport{Account: acc, Segments: int32(rep.Segments), Records: int32(rep.Records)}
		if p := rep.Problem; p != nil {
			out.Ok = false
			r.Problem = &approvalv1.AuditProblem{Writer: p.Writer, Segment: p.Segment, Line: int32(p.Line), Seq: p.Seq, Reason: p.Reason}
		}
		out.Reports = append(out.Reports, r)
	}
	return out, nil
}
