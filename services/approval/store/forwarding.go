package store

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

func (s *Store) fwdKey(account string) string { return s.prefix + "forwarding/" + esc(account) }

// Forwarding returns the account's stored forwarding config (opaque
// bytes), nil when none is stored.
func (s *Store) Forwarding(ctx context.Context, account string) ([]byte, error) {
	resp, err := s.cli.Get(ctx, s.fwdKey(account))
	if err != nil {
		return nil, unavailable(err, "read forwarding")
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// PutForwarding stores the account's forwarding config.
func (s *Store) PutForwarding(ctx context.Context, account string, b []byte) error {
	if len(b) > 512<<10 {
		return errs.New(errs.InvalidArgument, "forwarding: config too large")
	}
	if _, err := s.cli.Put(ctx, s.fwdKey(account), string(b)); err != nil {
		return unavailable(err, "write forwarding")
	}
	return nil
}

// Suffixes of the markers kept beside an approval's record (under
// ApprovalsPrefix) once its announcement, and then its outcome's, were
// claimed.
const (
	NoticedSuffix = "/noticed"
	OutcomeSuffix = "/outcome"
)

// ClaimNotice records that the notice for an approval was sent, once: it
// reports false when another sender claimed it first.
func (s *Store) ClaimNotice(ctx context.Context, account, id string) (bool, error) {
	k := s.recKey(account, id) + NoticedSuffix
	lease, err := s.cli.Grant(ctx, int64(RecordTTL.Seconds()))
	if err != nil {
		return false, unavailable(err, "grant notice lease")
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, "", clientv3.WithLease(lease.ID))).Commit()
	if err != nil {
		return false, unavailable(err, "claim notice")
	}
	return resp.Succeeded, nil
}

// ApprovalsPrefix is where approval records of every account live, for
// watchers of new approvals.
func (s *Store) ApprovalsPrefix() string { return s.prefix + "approvals/" }

// DecodeRecord decodes an approval record read from ApprovalsPrefix; ok is
// false for keys that are not records.
func DecodeRecord(key string, value []byte, modRev int64) (*Approval, bool) {
	if strings.HasSuffix(key, "/live") || strings.HasSuffix(key, NoticedSuffix) || strings.HasSuffix(key, OutcomeSuffix) {
		return nil, false
	}
	a, err := decode(value, modRev)
	if err != nil {
		return nil, false
	}
	return a, true
}

// ClaimOutcome records that the outcome of an announced approval was sent,
// once: it reports false when the approval was never announced or another
// sender claimed the outcome first.
func (s *Store) ClaimOutcome(ctx context.Context, account, id string) (bool, error) {
	noticed := s.recKey(account, id) + NoticedSuffix
	k := s.recKey(account, id) + OutcomeSuffix
	lease, err := s.cli.Grant(ctx, int64(RecordTTL.Seconds()))
	if err != nil {
		return false, unavailable(err, "grant notice lease")
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(noticed), ">", 0), clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, "", clientv3.WithLease(lease.ID))).Commit()
	if err != nil {
		return false, unavailable(err, "claim outcome notice")
	}
	return resp.Succeeded, nil
}
