package approval

import (
	"context"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/execpolicy"
)

// sessionDigests are the grant digests of the programs a command asks
// about: the segments the allowlist missed, or, when it missed none (ask
// always), every resolved one. A segment that resolved to no program
// cannot be granted: the empty result then never matches.
func sessionDigests(scope store.GrantScope, segs []store.Segment, byShape bool) []string {
	var ask []store.Segment
	for _, s := range segs {
		if s.Decision != "allow" {
			ask = append(ask, s)
		}
	}
	if len(ask) == 0 {
		ask = segs
	}
	out := make([]string, 0, len(ask))
	for _, s := range ask {
		if s.ResolvedPath == "" || len(s.Argv) == 0 {
			return nil
		}
		args := s.Argv[1:]
		if byShape {
			args = store.ArgShape(args)
		}
		out = append(out, store.GrantDigest(scope, s.ResolvedPath, args))
	}
	return out
}

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
	return s.store.Granted(ctx, account, sessionDigests(scope, segs, exec.GetApprovalSessionByShape()))
}

// grantSession records what the allow-session answer to a covers.
func (s *Server) grantSession(ctx context.Context, a *store.Approval) error {
	scope := store.GrantScope{Account: a.Account, Session: a.Session, Agent: a.Agent, Host: a.Host, Node: a.Node}
	return s.store.PutGrants(ctx, a.Account, a.ID, sessionDigests(scope, a.Segments, a.SessionByShape), time.Duration(a.SessionTTLSeconds)*time.Second)
}
