package etcdx

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// GetJSON reads the value at key and decodes it, as JSON, into a T; opts
// may ask for a serializable read. A missing key is no error: found is
// false and v is T's zero value. modRev is the value's ModRevision, for a
// later compare-and-swap.
//
// A failed read keeps the kind of etcd's error, or is errs.Unavailable
// when that has none (as for PutJSON); a value that does not decode is errs.Internal. The
// errors do not name the key, which may hold a secret's hash: callers say
// what they read.
func GetJSON[T any](ctx context.Context, kv clientv3.KV, key string, opts ...clientv3.OpOption) (v T, modRev int64, found bool, err error) {
	resp, err := kv.Get(ctx, key, opts...)
	if err != nil {
		return v, 0, false, failed(err, "get")
	}
	if len(resp.Kvs) == 0 {
		return v, 0, false, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		var zero T
		return zero, 0, false, errs.Wrap(errs.Internal, err, "etcdx: decode")
	}
	return v, resp.Kvs[0].ModRevision, true, nil
}

// PutJSON stores v, encoded as JSON, at key; opts may attach a lease.
func PutJSON(ctx context.Context, kv clientv3.KV, key string, v any, opts ...clientv3.OpOption) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("etcdx: encode: %w", err)
	}
	if _, err := kv.Put(ctx, key, string(b), opts...); err != nil {
		return failed(err, "put")
	}
	return nil
}

// failed classifies an etcd call's error: a cause etcd did not classify
// is taken as etcd being unavailable, not as a bug of the caller.
func failed(err error, op string) error {
	kind := errs.KindOf(err)
	if kind == errs.Internal {
		kind = errs.Unavailable
	}
	return errs.Wrap(kind, err, "etcdx: %s", op)
}
