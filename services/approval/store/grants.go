package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A session grant is what an allow-session answer leaves behind: the
// commands it covers run again in the same session, on the same host, for
// the same agent, without asking, until it expires. Grants are keyed by a
// digest of what they cover, so finding one is one read per program.

// GrantScope is what a session grant is bound to besides its programs.
type GrantScope struct {
	Account, Session, Agent, Host, Node string
}

// GrantDigest is the digest of one program run as a grant covers it:
// its resolved path and its arguments (or their shape, see ArgShape).
func GrantDigest(scope GrantScope, resolvedPath string, args []string) string {
	b, _ := json.Marshal([]any{scope.Account, scope.Session, scope.Agent, scope.Host, scope.Node, resolvedPath, args})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ArgShape is the shape of an argument list: its options as they are, and
// every operand (a word not starting with "-") replaced by a placeholder,
// so that "-rf build" and "-rf dist" share a shape but "-rf" and "-r" do
// not.
func ArgShape(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 1 && a[0] == '-' {
			out[i] = a
		} else {
			out[i] = "\x00operand"
		}
	}
	return out
}

func (s *Store) grantKey(account, digest string) string {
	return s.prefix + "grants/" + esc(account) + "/" + digest
}

// SessionDigests are the grant digests of the programs a command asks
// about: the segments the allowlist missed, or, when it missed none (ask
// always), every resolved one. A segment that resolved to no program
// cannot be granted: the empty result then never matches.
func SessionDigests(scope GrantScope, segs []Segment, byShape bool) []string {
	var ask []Segment
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
			args = ArgShape(args)
		}
		out = append(out, GrantDigest(scope, s.ResolvedPath, args))
	}
	return out
}

// grantOps are the puts of a's session grants, on a lease of its session
// TTL.
func (s *Store) grantOps(ctx context.Context, a *Approval) ([]clientv3.Op, error) {
	scope := GrantScope{Account: a.Account, Session: a.Session, Agent: a.Agent, Host: a.Host, Node: a.Node}
	digests := SessionDigests(scope, a.Segments, a.SessionByShape)
	if len(digests) == 0 {
		return nil, nil
	}
	lease, err := s.cli.Grant(ctx, int64(max(a.SessionTTLSeconds, 1)))
	if err != nil {
		return nil, unavailable(err, "grant session lease")
	}
	ops := make([]clientv3.Op, len(digests))
	for i, d := range digests {
		ops[i] = clientv3.OpPut(s.grantKey(a.Account, d), a.ID, clientv3.WithLease(lease.ID))
	}
	return ops, nil
}

// Granted returns the approval that granted every digest, or "" when one
// of them has no live grant.
func (s *Store) Granted(ctx context.Context, account string, digests []string) (string, error) {
	if len(digests) == 0 {
		return "", nil
	}
	ops := make([]clientv3.Op, len(digests))
	for i, d := range digests {
		ops[i] = clientv3.OpGet(s.grantKey(account, d))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return "", unavailable(err, "read session grants")
	}
	by := ""
	for _, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 {
			return "", nil
		}
		by = string(kvs[0].Value)
	}
	return by, nil
}
