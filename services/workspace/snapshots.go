package workspace

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/workspace/snapshots"
)

// PutSnapshot stores a snapshot: its record, then its archive's bytes, at
// most max_bytes of them.
func (s *Server) PutSnapshot(stream workspacev1.WorkspaceService_PutSnapshotServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	pb := first.GetRecord()
	if pb == nil {
		return errs.New(errs.InvalidArgument, "the first message of PutSnapshot must be the record")
	}
	if first.GetMaxBytes() <= 0 {
		return errs.New(errs.InvalidArgument, "max_bytes: must be positive")
	}
	rec := snapshots.Record{ID: pb.GetId(), Name: pb.GetName(), SandboxID: pb.GetSandboxId(), Created: pb.GetCreatedAt().AsTime(), Template: pb.GetTemplate()}
	m := new(workspacev1.PutSnapshotRequest)
	r := &dataReader{recv: func() ([]byte, error) {
		if err := stream.RecvMsg(m); err != nil {
			return nil, err
		}
		if _, ok := m.GetMessage().(*workspacev1.PutSnapshotRequest_Data); !ok {
			return nil, errs.New(errs.InvalidArgument, "after the record, PutSnapshot takes only data messages")
		}
		return m.GetData(), nil
	}}
	rec, err = s.snaps.Put(ctx, account, rec, r, first.GetMaxBytes())
	if err != nil {
		return err
	}
	return stream.SendAndClose(&workspacev1.PutSnapshotResponse{Record: recordPB(rec)})
}

// ReadSnapshot streams a snapshot's record, then its archive.
func (s *Server) ReadSnapshot(req *workspacev1.ReadSnapshotRequest, stream workspacev1.WorkspaceService_ReadSnapshotServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	rec, rc, err := s.snaps.Open(ctx, account, req.GetId())
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := stream.Send(&workspacev1.ReadSnapshotResponse{Message: &workspacev1.ReadSnapshotResponse_Record{Record: recordPB(rec)}}); err != nil {
		return err
	}
	return sendChunks(rc, func(b []byte) error {
		return stream.Send(&workspacev1.ReadSnapshotResponse{Message: &workspacev1.ReadSnapshotResponse_Data{Data: b}})
	})
}

// ListSnapshotRecords lists the account's snapshots.
func (s *Server) ListSnapshotRecords(ctx context.Context, _ *workspacev1.ListSnapshotRecordsRequest) (*workspacev1.ListSnapshotRecordsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := s.snaps.List(ctx, account)
	if err != nil {
		return nil, err
	}
	out := &workspacev1.ListSnapshotRecordsResponse{Records: make([]*workspacev1.SnapshotRecord, 0, len(recs))}
	for _, r := range recs {
		out.Records = append(out.Records, recordPB(r))
	}
	return out, nil
}

// DeleteSnapshotRecord deletes a snapshot.
func (s *Server) DeleteSnapshotRecord(ctx context.Context, req *workspacev1.DeleteSnapshotRecordRequest) (*workspacev1.DeleteSnapshotRecordResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	deleted, err := s.snaps.Delete(ctx, account, req.GetId())
	if err != nil {
		return nil, err
	}
	return &workspacev1.DeleteSnapshotRecordResponse{Deleted: deleted}, nil
}

func recordPB(r snapshots.Record) *workspacev1.SnapshotRecord {
	return &workspacev1.SnapshotRecord{
		Id: r.ID, Name: r.Name, SandboxId: r.SandboxID, SizeBytes: r.Size, Sha256: r.SHA256, CreatedAt: timestamppb.New(r.Created), Template: r.Template,
	}
}
