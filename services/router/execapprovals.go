package router

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/apierror"
)

// maxExecApprovalsBody bounds a PUT of the exec-approvals document.
const maxExecApprovalsBody = 1 << 20

// execApprovals serves GET/PUT /api/v1/exec-approvals: OpenClaw's JSON
// document as is, not wrapped in a proto message
// (docs/explanation/exec-policy.md). The document's revision travels in the
// ETag; a PUT with If-Match fails with 409 when the document changed since.
type execApprovals struct {
	client approvalv1.ApprovalServiceClient
	log    *slog.Logger
}

func (h *execApprovals) get(w http.ResponseWriter, r *http.Request) {
	resp, err := h.client.GetExecApprovals(r.Context(), &approvalv1.GetExecApprovalsRequest{})
	if err != nil {
		apierror.Write(r.Context(), h.log, w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(resp.GetRevision(), 10)))
	_, _ = w.Write(resp.GetDocument())
}

func (h *execApprovals) put(w http.ResponseWriter, r *http.Request) {
	var rev int64
	if m := r.Header.Get("If-Match"); m != "" {
		u, err := strconv.Unquote(m)
		if err != nil {
			u = m
		}
		if rev, err = strconv.ParseInt(u, 10, 64); err != nil || rev < 0 {
			apiErrors(w, errs.Invalid("If-Match", "want the document's ETag"))
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxExecApprovalsBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		apiErrors(w, errs.New(errs.InvalidArgument, "exec-approvals: document larger than %d bytes", maxExecApprovalsBody))
		return
	case err != nil:
		apiErrors(w, errs.New(errs.InvalidArgument, "exec-approvals: reading the body: %v", err))
		return
	}
	resp, err := h.client.PutExecApprovals(r.Context(), &approvalv1.PutExecApprovalsRequest{Document: body, Revision: rev})
	if err != nil {
		apierror.Write(r.Context(), h.log, w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(resp.GetRevision(), 10)))
	_, _ = w.Write(resp.GetDocument())
}
