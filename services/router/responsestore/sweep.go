package responsestore

import (
	"context"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/sweep"
	"github.com/conch-sh/conch/services/internal/quotas"
)

// SweepEvery is how often Run sweeps.
const SweepEvery = 10 * time.Minute

// Run sweeps every SweepEvery, give or take a tenth, until ctx ends. Every
// router may run it: a sweep only removes what no claim holds.
func (s *Store) Run(ctx context.Context) {
	sweep.Every(ctx, SweepEvery, s.opts.Logger, "stored responses", s.Sweep)
}

// Sweep removes the objects no claim holds any more (conversations and
// kept turns that expired, or were deleted while their objects could not
// be removed) that the sweep before found without one too; it returns how
// many conversations and turns it removed.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	dead := map[string]bool{}
	removed := 0
	// Under each prefix, per account: a conversation is a folder whose
	// claim is its root, a kept turn an object whose claim is turn-<id>.
	for _, kind := range []struct{ prefix, claim string }{{objectsPrefix, ""}, {turnsPrefix, turnClaim}} {
		for acct, err := range s.opts.Objects.List(ctx, kind.prefix, false) {
			if err != nil {
				return removed, err
			}
			if !acct.Prefix {
				continue
			}
			account, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(acct.Key, kind.prefix), "/"))
			if err != nil {
				continue
			}
			live, err := s.liveClaims(ctx, account)
			if err != nil {
				return removed, err
			}
			for item, err := range s.opts.Objects.List(ctx, acct.Key, false) {
				if err != nil {
					return removed, err
				}
				name, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(item.Key, acct.Key), "/"))
				if err != nil || live[kind.claim+name] {
					continue
				}
				if !s.dead[item.Key] {
					dead[item.Key] = true
					continue
				}
				if err := s.removeUnclaimed(ctx, account, kind.claim+name, item.Key); err != nil {
					return removed, err
				}
				removed++
			}
		}
	}
	s.dead = dead
	return removed, nil
}

// liveClaims are the ids of account's claims of stored responses.
func (s *Store) liveClaims(ctx context.Context, account string) (map[string]bool, error) {
	prefix := quotas.ClaimKey(quotas.StoredResponses, account, "")
	resp, err := s.opts.Etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		live[strings.TrimPrefix(string(kv.Key), prefix)] = true
	}
	return live, nil
}

// removeUnclaimed removes the object key, or the objects below it when it
// ends in '/', unless account's claim id is there.
func (s *Store) removeUnclaimed(ctx context.Context, account, id, key string) error {
	resp, err := s.opts.Etcd.Get(ctx, quotas.ClaimKey(quotas.StoredResponses, account, id), clientv3.WithCountOnly())
	if err != nil || resp.Count > 0 {
		return err
	}
	if !strings.HasSuffix(key, "/") {
		return s.opts.Objects.Delete(ctx, []string{key})
	}
	var keys []string
	for info, err := range s.opts.Objects.List(ctx, key, true) {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			keys = append(keys, info.Key)
		}
	}
	return s.opts.Objects.Delete(ctx, keys)
}
