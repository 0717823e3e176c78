package approval

import (
	"context"
	"errors"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// GetExecApprovals implements ApprovalService.
func (s *Server) GetExecApprovals(ctx context.Context, _ *approvalv1.GetExecApprovalsRequest) (*approvalv1.GetExecApprovalsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	d, rev, err := s.store.CachedDocument(ctx, account)
	if err != nil {
		return nil, err
	}
	b, err := d.Marshal()
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "encode exec-approvals document")
	}
	return &approvalv1.GetExecApprovalsResponse{Document: b, Revision: rev}, nil
}

// PutExecApprovals implements ApprovalService.
func (s *Server) PutExecApprovals(ctx context.Context, req *approvalv1.PutExecApprovalsRequest) (*approvalv1.PutExecApprovalsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	d, err := document.Parse(req.GetDocument())
	var inv *document.InvalidError
	if errors.As(err, &inv) {
		// The body is the document: the field at fault is the one its
		// reason names.
		return nil, &errs.Error{Kind: errs.InvalidArgument, Msg: inv.Error(), Field: errs.FieldInMessage(inv.Reason)}
	}
	if err != nil {
		return nil, err
	}
	rev, err := s.store.PutDocument(ctx, account, d, req.GetRevision())
	if err != nil {
		return nil, err
	}
	b, err := d.Marshal()
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "encode exec-approvals document")
	}
	return &approvalv1.PutExecApprovalsResponse{Document: b, Revision: rev}, nil
}

func entryTo(e document.Entry) *approvalv1.AllowlistEntry {
	return &approvalv1.AllowlistEntry{Id: e.ID, Pattern: e.Pattern, LastUsedAt: e.LastUsedAt, LastUsedCommand: e.LastUsedCommand, LastResolvedPath: e.LastResolvedPath}
}

func validAgent(agent string) error {
	if agent == "" || len(agent) > 128 {
		return errs.New(errs.InvalidArgument, "agent: required, at most 128 characters")
	}
	return nil
}

// ListAllowlist implements ApprovalService.
func (s *Server) ListAllowlist(ctx context.Context, req *approvalv1.ListAllowlistRequest) (*approvalv1.ListAllowlistResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validAgent(req.GetAgent()); err != nil {
		return nil, err
	}
	d, _, err := s.store.CachedDocument(ctx, account)
	if err != nil {
		return nil, err
	}
	out := &approvalv1.ListAllowlistResponse{Entries: []*approvalv1.AllowlistEntry{}}
	if a, ok := d.Agents[req.GetAgent()]; ok && a != nil {
		for _, e := range a.Allowlist {
			out.Entries = append(out.Entries, entryTo(e))
		}
	}
	return out, nil
}

// AddAllowlistEntry implements ApprovalService.
func (s *Server) AddAllowlistEntry(ctx context.Context, req *approvalv1.AddAllowlistEntryRequest) (*approvalv1.AddAllowlistEntryResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validAgent(req.GetAgent()); err != nil {
		return nil, err
	}
	var added document.Entry
	_, _, err = s.store.UpdateDocument(ctx, account, func(d *document.Document) (bool, error) {
		e, err := d.AddPattern(req.GetAgent(), req.GetPattern())
		if err != nil {
			return false, errs.New(errs.InvalidArgument, "%s", err.Error())
		}
		added = e
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &approvalv1.AddAllowlistEntryResponse{Entry: entryTo(added)}, nil
}

// RemoveAllowlistEntry implements ApprovalService.
func (s *Server) RemoveAllowlistEntry(ctx context.Context, req *approvalv1.RemoveAllowlistEntryRequest) (*approvalv1.RemoveAllowlistEntryResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := validAgent(req.GetAgent()); err != nil {
		return nil, err
	}
	if req.GetEntryId() == "" {
		return nil, errs.New(errs.InvalidArgument, "entry_id: required")
	}
	found := false
	_, _, err = s.store.UpdateDocument(ctx, account, func(d *document.Document) (bool, error) {
		found = d.RemoveEntry(req.GetAgent(), req.GetEntryId())
		return found, nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errs.New(errs.NotFound, "allowlist entry %s of agent %s not found", req.GetEntryId(), req.GetAgent())
	}
	return &approvalv1.RemoveAllowlistEntryResponse{}, nil
}
