package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

func (s *Store) fwdKey(account string) string { return s.fwdPrefix() + esc(account) }
func (s *Store) fwdPrefix() string            { return s.prefix + "forwarding/" }

// maxForwarding bounds a stored forwarding config.
const maxForwarding = 512 << 10

// Forwarding returns the account's forwarding config with its channel
// secrets opened; an account that stored none has the empty config.
func (s *Store) Forwarding(ctx context.Context, account string) (*approvalv1.ForwardingConfig, error) {
	if err := s.sealing(); err != nil {
		return nil, err
	}
	k := s.fwdKey(account)
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return nil, unavailable(err, "read forwarding")
	}
	if len(resp.Kvs) == 0 {
		return &approvalv1.ForwardingConfig{}, nil
	}
	return s.decodeForwarding(k, resp.Kvs[0].Value)
}

// PutForwarding stores the account's forwarding config, its channel
// secrets sealed. cfg is not changed.
func (s *Store) PutForwarding(ctx context.Context, account string, cfg *approvalv1.ForwardingConfig) error {
	if err := s.sealing(); err != nil {
		return err
	}
	k := s.fwdKey(account)
	b, err := s.encodeForwarding(k, cfg)
	if err != nil {
		return err
	}
	if len(b) > maxForwarding {
		return errs.New(errs.InvalidArgument, "forwarding: config too large")
	}
	if _, err := s.cli.Put(ctx, k, string(b)); err != nil {
		return unavailable(err, "write forwarding")
	}
	return nil
}

// sealing refuses the forwarding configs to a store without keys.
func (s *Store) sealing() error {
	if s.keys == nil {
		return errs.New(errs.Internal, "approval store: no keyring: forwarding configs hold secrets this store cannot seal or open")
	}
	return nil
}

// channelSecrets are the secret fields of a forwarding config (those the
// API never returns), by path.
func channelSecrets(cfg *approvalv1.ForwardingConfig) map[string]*string {
	ch := cfg.GetChannels()
	if ch == nil {
		return nil
	}
	return map[string]*string{
		"channels.slack_token":    &ch.SlackToken,
		"channels.telegram_token": &ch.TelegramToken,
		"channels.webhook_secret": &ch.WebhookSecret,
	}
}

// encodeForwarding returns cfg as stored at etcd key k: JSON, its secrets
// sealed and bound to k and their field, so that a sealed token copied
// into another account's config does not open there.
func (s *Store) encodeForwarding(k string, cfg *approvalv1.ForwardingConfig) ([]byte, error) {
	cfg = proto.Clone(cfg).(*approvalv1.ForwardingConfig)
	for field, v := range channelSecrets(cfg) {
		if *v == "" {
			continue
		}
		sealed, err := s.keys.SealString(*v, seal.Bind(k, field))
		if err != nil {
			return nil, errs.Wrap(errs.Internal, err, "approval store: seal %s", field)
		}
		*v = sealed
	}
	b, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "approval store: encode forwarding")
	}
	return b, nil
}

// decodeForwarding reads the config stored at k, its secrets opened.
// Secrets stored before sealing began are taken as they are; the next
// write seals them.
func (s *Store) decodeForwarding(k string, b []byte) (*approvalv1.ForwardingConfig, error) {
	cfg := &approvalv1.ForwardingConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "approval store: decode forwarding %s", k)
	}
	for field, v := range channelSecrets(cfg) {
		plain, err := s.keys.OpenStored(*v, seal.Bind(k, field))
		if err != nil {
			return nil, errs.Wrap(errs.Internal, err, "approval store: open forwarding %s %s", k, field)
		}
		*v = plain
	}
	return cfg, nil
}

// ResealForwarding rewrites every forwarding config whose secrets are not
// all sealed with the active key (sealed with an older key, or stored
// before sealing began), so that older keys can then be removed. A config
// changed meanwhile is judged again as it is then (see etcdx.Rewrite); one
// that cannot be re-sealed (its key is missing) is reported, and the
// others are done.
func (s *Store) ResealForwarding(ctx context.Context) (seal.Pass, error) {
	if err := s.sealing(); err != nil {
		return seal.Pass{}, err
	}
	read, rewritten, err := etcdx.Rewrite(ctx, s.cli, s.fwdPrefix(), s.resealedForwarding)
	if err != nil {
		err = fmt.Errorf("approval store: reseal forwarding: %w", err)
	}
	return seal.Pass{Records: read, Resealed: rewritten}, err
}

// resealedForwarding returns the config stored at k as b, sealed anew with
// the active key, unless every secret of it already is.
func (s *Store) resealedForwarding(k string, b []byte) ([]byte, bool, error) {
	stored := &approvalv1.ForwardingConfig{}
	if err := protojson.Unmarshal(b, stored); err != nil {
		return nil, false, fmt.Errorf("decode forwarding %s: %w", k, err)
	}
	current := true
	for _, v := range channelSecrets(stored) {
		current = current && s.keys.Current(*v)
	}
	if current {
		return nil, false, nil
	}
	cfg, err := s.decodeForwarding(k, b)
	if err != nil {
		return nil, false, err
	}
	next, err := s.encodeForwarding(k, cfg)
	return next, err == nil, err
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
