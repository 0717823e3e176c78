package responsestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store"
)

// Kept turns are what chat completions keep of a turn that ended on client
// tool calls after server tools ran (see completion's turns): looked up by
// a key of the caller's, kept TurnTTL at least. As a stored response's,
// their body is an object (turns/<account>/<id>) and etcd holds a record
// naming it, on a lease; their bytes count against the account's stored
// response bytes, in a claim ("turn-<id>") on the same lease, and Sweep
// removes the objects of turns whose claim expired.
const (
	// TurnTTL is how long a kept turn is kept at least (at most an hour
	// more).
	TurnTTL = 24 * time.Hour
	// MaxTurn bounds a kept turn, compressed.
	MaxTurn = 8 << 20
	// turnRecordPrefix is where the records of kept turns are.
	turnRecordPrefix = "conch/kept-turns/"
	// turnsPrefix is where their objects are.
	turnsPrefix = "turns/"
	// turnClaim prefixes the id of a kept turn's claim.
	turnClaim = "turn-"
)

// turnRecord is a kept turn's record in etcd.
type turnRecord struct {
	Object string `json:"object"`
}

func turnRecordKey(account, key string) string {
	return turnRecordPrefix + url.PathEscape(account) + "/" + key
}

func turnObjectKey(account, id string) string {
	return turnsPrefix + segName(account) + "/" + id
}

// KeepTurn keeps v (JSON) for account under key: a '/'-separated path of
// the caller's, whose segments it escaped. A turn beyond the account's
// stored response bytes is not kept: the error is errs.ResourceExhausted.
func (s *Store) KeepTurn(ctx context.Context, account, key string, v any) error {
	data, err := etcdx.EncodeBlob(v, MaxTurn)
	if err != nil {
		return err
	}
	if s.opts.Room != nil {
		if err := s.opts.Room(0); err != nil {
			return err
		}
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	obj := turnObjectKey(account, id)
	if _, err := s.opts.Objects.Put(ctx, obj, bytes.NewReader(data), store.PutOptions{Size: int64(len(data)), Mode: 0o600, ModTime: time.Now()}); err != nil {
		return errs.Wrap(errs.Unavailable, err, "responsestore: keep a turn")
	}
	limits := unlimited()
	if s.opts.Limits != nil {
		if limits, err = s.opts.Limits(ctx, account); err != nil {
			s.removeObjects(ctx, []string{obj})
			return err
		}
	}
	rec, _ := json.Marshal(turnRecord{Object: id})
	err = s.turnLeases.With(ctx, func(lease clientv3.LeaseID) error {
		return quotas.Claim(ctx, s.opts.Etcd, quotas.StoredResponses, account, turnClaim+id,
			quotas.Usage{quotas.StoredResponseBytes: int64(len(data))}, limits, []clientv3.OpOption{clientv3.WithLease(lease)},
			clientv3.OpPut(turnRecordKey(account, key), string(rec), clientv3.WithLease(lease)))
	})
	if err != nil {
		s.removeObjects(ctx, []string{obj})
		return err
	}
	return nil
}

// FindTurns decodes into vs[i] the turn kept for account under keys[i],
// when there is one: found[i].
func (s *Store) FindTurns(ctx context.Context, account string, keys []string, vs []any) (found []bool, err error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(turnRecordKey(account, k))
	}
	resp, err := s.opts.Etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "read the conversation's server tool calls")
	}
	found = make([]bool, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchers)
	for i := range keys {
		kvs := resp.Responses[i].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue
		}
		var rec turnRecord
		if err := json.Unmarshal(kvs[0].Value, &rec); err != nil || rec.Object == "" {
			return nil, errs.New(errs.Internal, "responsestore: record of a kept turn: %v", err)
		}
		g.Go(func() error {
			err := s.getObject(gctx, turnObjectKey(account, rec.Object), rec.Object, vs[i])
			switch {
			case IsNotFound(err):
				// Expired between the two reads.
			case err != nil:
				return err
			default:
				found[i] = true
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return found, nil
}
