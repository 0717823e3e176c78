package wsclient

import (
	"context"
	"errors"
	"fmt"
	"io"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Snapshots is the store of snapshots over the workspace service's gRPC
// API.
type Snapshots struct {
	c workspacev1.WorkspaceServiceClient
}

// NewSnapshots returns the snapshots over c.
func NewSnapshots(c workspacev1.WorkspaceServiceClient) *Snapshots {
	return &Snapshots{c: c}
}

// Put stores a snapshot of account from its archive r, at most maxBytes
// of it, and returns its record with size and hash. An error reading r (the archive failing) is
// returned as is, the stream cancelled so that nothing is kept.
func (c *Snapshots) Put(ctx context.Context, account string, rec *workspacev1.SnapshotRecord, r io.Reader, maxBytes int64) (*workspacev1.SnapshotRecord, error) {
	ctx, cancel := context.WithCancel(scoped(ctx, account, ""))
	defer cancel()
	stream, err := c.c.PutSnapshot(ctx)
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	if err := stream.Send(&workspacev1.PutSnapshotRequest{Message: &workspacev1.PutSnapshotRequest_Record{Record: rec}, MaxBytes: maxBytes}); err != nil {
		_, err = stream.CloseAndRecv()
		return nil, errs.FromStatus(err)
	}
	buf := make([]byte, chunks.Size)
	for {
		n, rerr := chunks.Fill(r, buf)
		if n > 0 {
			if err := stream.Send(&workspacev1.PutSnapshotRequest{Message: &workspacev1.PutSnapshotRequest_Data{Data: buf[:n]}}); err != nil {
				// The service refused: its answer says why.
				_, err = stream.CloseAndRecv()
				return nil, errs.FromStatus(err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return resp.GetRecord(), nil
}

// Open returns a snapshot's record and archive, which the caller
// closes.
func (c *Snapshots) Open(ctx context.Context, account, id string) (*workspacev1.SnapshotRecord, io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(scoped(ctx, account, ""))
	stream, err := c.c.ReadSnapshot(ctx, &workspacev1.ReadSnapshotRequest{Id: id})
	if err != nil {
		cancel()
		return nil, nil, errs.FromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, nil, errs.FromStatus(err)
	}
	rec := first.GetRecord()
	if rec == nil {
		cancel()
		return nil, nil, fmt.Errorf("wsclient: snapshot %s: the stream did not begin with its record", id)
	}
	return rec, &streamReader{recv: func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	}, cancel: cancel, left: rec.GetSizeBytes()}, nil
}

// List returns the account's snapshots' records.
func (c *Snapshots) List(ctx context.Context, account string) ([]*workspacev1.SnapshotRecord, error) {
	resp, err := c.c.ListSnapshotRecords(scoped(ctx, account, ""), &workspacev1.ListSnapshotRecordsRequest{})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return resp.GetRecords(), nil
}

// Delete reports whether there was a snapshot to delete.
func (c *Snapshots) Delete(ctx context.Context, account, id string) (bool, error) {
	resp, err := c.c.DeleteSnapshotRecord(scoped(ctx, account, ""), &workspacev1.DeleteSnapshotRecordRequest{Id: id})
	if err != nil {
		return false, errs.FromStatus(err)
	}
	return resp.GetDeleted(), nil
}
