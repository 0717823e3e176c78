package etcdx

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// A blob is a value too large for one etcd request: a conversation, a
// stored response. It is kept as gzip-compressed JSON in chunks under a
// prefix ending in "/" ("<prefix>000", "<prefix>001", …) and a head
// ("<prefix>head") holding the number of chunks, written last, so a
// reader that sees the head sees every chunk. Every key is on one lease:
// the blob expires whole.
const (
	// BlobChunk is the size of one chunk, well under etcd's request
	// limit.
	BlobChunk = 512 << 10
	// blobInflate bounds how much a blob may grow when decompressed
	// relative to its limit: only conch writes blobs, this is a guard.
	blobInflate = 64
)

// PutBlob stores v under prefix for ttl. A blob larger than limit bytes,
// compressed, is not stored: the error is errs.ResourceExhausted.
func PutBlob(ctx context.Context, cli *clientv3.Client, prefix string, v any, ttl time.Duration, limit int) error {
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("etcdx: blob prefix %q must end in /", prefix)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(v); err != nil {
		return fmt.Errorf("etcdx: encode: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("etcdx: encode: %w", err)
	}
	if buf.Len() > limit {
		return errs.New(errs.ResourceExhausted, "%d bytes compressed, more than the %d kept", buf.Len(), limit)
	}
	lease, err := cli.Grant(ctx, int64(max(ttl/time.Second, 1)))
	if err != nil {
		return failed(err, "grant")
	}
	data := buf.Bytes()
	n := 0
	for off := 0; off < len(data); off += BlobChunk {
		chunk := data[off:min(off+BlobChunk, len(data))]
		if _, err := cli.Put(ctx, prefix+fmt.Sprintf("%03d", n), string(chunk), clientv3.WithLease(lease.ID)); err != nil {
			return failed(err, "put")
		}
		n++
	}
	if _, err := cli.Put(ctx, prefix+"head", strconv.Itoa(n), clientv3.WithLease(lease.ID)); err != nil {
		return failed(err, "put")
	}
	return nil
}

// BlobOp reads the blob under prefix, for a transaction that reads several;
// DecodeBlob decodes what it read.
func BlobOp(prefix string) clientv3.Op { return clientv3.OpGet(prefix, clientv3.WithPrefix()) }

// DecodeBlob decodes into v the blob whose keys BlobOp read. found is false
// when there is none, or it is not complete yet.
func DecodeBlob(kvs []*mvccpb.KeyValue, v any) (found bool, err error) {
	if len(kvs) == 0 {
		return false, nil
	}
	head := kvs[len(kvs)-1]
	n, err := strconv.Atoi(string(head.Value))
	if !bytes.HasSuffix(head.Key, []byte("/head")) || err != nil || n != len(kvs)-1 {
		return false, nil
	}
	var data []byte
	for _, kv := range kvs[:n] {
		data = append(data, kv.Value...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return false, errs.Wrap(errs.Internal, err, "etcdx: decode blob")
	}
	if err := json.NewDecoder(io.LimitReader(zr, int64(blobInflate*max(len(data), BlobChunk)))).Decode(v); err != nil {
		return false, errs.Wrap(errs.Internal, err, "etcdx: decode blob")
	}
	return true, nil
}

// GetBlob reads the blob under prefix into v.
func GetBlob(ctx context.Context, kv clientv3.KV, prefix string, v any) (found bool, err error) {
	resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return false, failed(err, "get")
	}
	return DecodeBlob(resp.Kvs, v)
}

// DeleteBlob removes the blob under prefix; found says there was one.
func DeleteBlob(ctx context.Context, kv clientv3.KV, prefix string) (found bool, err error) {
	resp, err := kv.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return false, failed(err, "delete")
	}
	return resp.Deleted > 0, nil
}
