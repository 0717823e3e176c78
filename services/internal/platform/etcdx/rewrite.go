package etcdx

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// rewriteAttempts bounds how often Rewrite retries one key that keeps
// changing under it.
const rewriteAttempts = 5

// Rewrite passes every key under prefix and its value to f, and stores
// the value f returns when f asks for it. Each write compares the key's
// mod revision with the one f saw, so a write made meanwhile is never
// lost: on a conflict f is called again with the value stored now (and
// not at all once the key is deleted). It returns how many keys it read
// and how many it rewrote. A key f fails on, or that keeps changing, is
// reported in the returned error, and the other keys are still done.
func Rewrite(ctx context.Context, cli *clientv3.Client, prefix string, f func(key string, value []byte) (next []byte, rewrite bool, err error)) (read, rewritten int, err error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, 0, failed(err, "list "+prefix)
	}
	var failures []error
	for _, kv := range resp.Kvs {
		read++
		wrote, err := rewriteKey(ctx, cli, string(kv.Key), kv.Value, kv.ModRevision, f)
		if err != nil {
			failures = append(failures, err)
		}
		if wrote {
			rewritten++
		}
	}
	return read, rewritten, errors.Join(failures...)
}

// rewriteKey is Rewrite for one key, read at revision rev.
func rewriteKey(ctx context.Context, cli *clientv3.Client, key string, value []byte, rev int64, f func(string, []byte) ([]byte, bool, error)) (bool, error) {
	for range rewriteAttempts {
		next, rewrite, err := f(key, value)
		if err != nil || !rewrite {
			return false, err
		}
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(next))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return false, failed(err, "rewrite "+key)
		}
		if resp.Succeeded {
			return true, nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return false, nil // deleted meanwhile
		}
		value, rev = kvs[0].Value, kvs[0].ModRevision
	}
	return false, fmt.Errorf("etcdx: rewrite %s: changed %d times while it was rewritten; run it again", key, rewriteAttempts)
}
