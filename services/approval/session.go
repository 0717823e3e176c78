package approval

import (
	"context"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/execpolicy"
)

// sessionTTL is how long an allow-session answer holds under exec.
func sessionTTL(exec *approvalv1.ExecSettings) time.Duration {
	if t := exec.GetApprovalSessionTtlSeconds(); t > 0 {
		return time.Duration(t) * time.Second
	}
	return execpolicy.DefaultApprovalSessionTTLSeconds * time.Second
}

// sessionGrant returns the approval whose allow-session answer covers the
// command of b judged as segs, or "".
func (s *Server) sessionGrant(ctx context.Context, account string, b *approvalv1.Binding, exec *approvalv1.ExecSettings, segs []store.Segment) (string, error) {
	if b.GetSession() == "" {
		return "", nil
	}
	scope := store.GrantScope{Account: account, Session: b.GetSession(), Agent: b.GetAgent(), Host: hostFrom(b.GetHost()).String(), Node: b.GetNode()}
	return s.store.Granted(ctx, account, store.SessionDigests(scope, segs, exec.GetApprovalSessionByShape()))
}
