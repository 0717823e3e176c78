package etcdx

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	// BlobMaxRaw bounds a blob decoded (its JSON): what reading one back
	// costs in memory. A blob larger decoded is not stored, however well
	// it compresses, and a reader reads at least this much, so every blob
	// stored can be read back.
	BlobMaxRaw = 128 << 20
	// blobInflate is how much the readers before BlobMaxRaw let a blob
	// grow decompressed, relative to its compressed size; blobs they
	// could read stay readable.
	blobInflate = 64
)

// PutBlob stores v under prefix on lease (see Leases). A blob larger than
// limit bytes compressed, or BlobMaxRaw decoded, is not stored: the error
// is errs.ResourceExhausted. A blob of one chunk takes one etcd request.
func PutBlob(ctx context.Context, cli *clientv3.Client, prefix string, v any, lease clientv3.LeaseID, limit int) error {
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("etcdx: blob prefix %q must end in /", prefix)
	}
	data, err := encodeBlob(v, limit, BlobMaxRaw)
	if err != nil {
		return err
	}
	return putChunks(ctx, cli, prefix, data, lease)
}

// blobEncoders keeps gzip writers between blobs: a new one allocates and
// clears about a megabyte of compressor state, which costs more CPU than
// compressing a typical blob.
var blobEncoders = sync.Pool{New: func() any {
	e := &blobEncoder{}
	e.zw = gzip.NewWriter(e)
	return e
}}

// blobEncoder is a kept gzip writer and the buffer of the blob it is
// encoding; out is nil between blobs, so the pool keeps no blob alive.
type blobEncoder struct {
	zw  *gzip.Writer
	out *bytes.Buffer
}

func (e *blobEncoder) Write(p []byte) (int, error) { return e.out.Write(p) }

// encodeBlob is v as gzip-compressed JSON, refused when larger than
// limit bytes, or than rawLimit bytes before compression.
func encodeBlob(v any, limit, rawLimit int) ([]byte, error) {
	var buf bytes.Buffer
	e := blobEncoders.Get().(*blobEncoder)
	defer func() {
		e.out = nil
		blobEncoders.Put(e)
	}()
	e.out = &buf
	e.zw.Reset(e)
	raw := &countingWriter{w: e.zw}
	enc := json.NewEncoder(raw)
	// Text the model and the user wrote is full of <, > and &: kept as
	// they are, not as six-byte escapes.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("etcdx: encode: %w", err)
	}
	if raw.n > rawLimit {
		return nil, errs.New(errs.ResourceExhausted, "%d bytes of JSON, more than the %d a stored value may hold", raw.n, rawLimit)
	}
	if err := e.zw.Close(); err != nil {
		return nil, fmt.Errorf("etcdx: encode: %w", err)
	}
	if buf.Len() > limit {
		return nil, errs.New(errs.ResourceExhausted, "%d bytes compressed, more than the %d kept", buf.Len(), limit)
	}
	return buf.Bytes(), nil
}

// EncodeBlob is v as a blob is kept (gzip-compressed JSON), for a store
// other than etcd: refused, with errs.ResourceExhausted, when larger than
// limit bytes compressed or BlobMaxRaw decoded.
func EncodeBlob(v any, limit int) ([]byte, error) { return encodeBlob(v, limit, BlobMaxRaw) }

// DecodeBlobFrom decodes into v a blob EncodeBlob made, read from r, which
// holds size bytes: bounded as DecodeBlob is.
func DecodeBlobFrom(r io.Reader, size int64, v any) error {
	d, _ := blobDecoders.Get().(*blobDecoder)
	if d == nil {
		d = &blobDecoder{}
	}
	defer d.put()
	var err error
	if d.zr == nil {
		d.zr, err = gzip.NewReader(r)
	} else {
		err = d.zr.Reset(r)
	}
	if err != nil {
		d.zr = nil
		return errs.Wrap(errs.Internal, err, "etcdx: decode blob")
	}
	bound := max(BlobMaxRaw, blobInflate*size)
	d.buf.Reset()
	if _, err := d.buf.ReadFrom(io.LimitReader(d.zr, bound)); err != nil {
		return errs.Wrap(errs.Internal, err, "etcdx: decode blob")
	}
	if err := json.Unmarshal(d.buf.Bytes(), v); err != nil {
		return errs.Wrap(errs.Internal, err, "etcdx: decode blob")
	}
	return nil
}

// blobDecoders keeps gzip readers and buffers between blobs: a new reader
// allocates a 32 KiB window and its tables, more than a small blob holds,
// and a conversation reads one blob per response.
var blobDecoders sync.Pool

type blobDecoder struct {
	zr  *gzip.Reader
	buf bytes.Buffer
}

// put keeps d for the next blob, unless its buffer grew large: the pool
// keeps no large blob's memory alive.
func (d *blobDecoder) put() {
	if d.buf.Cap() > 1<<20 {
		return
	}
	d.buf.Reset()
	blobDecoders.Put(d)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// putChunks writes an encoded blob's chunks and, with the last, its head.
func putChunks(ctx context.Context, cli *clientv3.Client, prefix string, data []byte, lease clientv3.LeaseID) error {
	n := (len(data) + BlobChunk - 1) / BlobChunk
	for i := range n {
		ops := []clientv3.Op{clientv3.OpPut(prefix+fmt.Sprintf("%03d", i), string(data[i*BlobChunk:min((i+1)*BlobChunk, len(data))]), clientv3.WithLease(lease))}
		if i == n-1 {
			ops = append(ops, clientv3.OpPut(prefix+"head", strconv.Itoa(n), clientv3.WithLease(lease)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return failed(err, "put")
		}
	}
	return nil
}

// Leases hands out shared leases for records kept for a while (blobs):
// granting a lease per record would double the etcd writes of each. A
// lease is shared by the records of one period, and lives the retention
// plus that period, so a record is kept at least the retention and at
// most one period more.
type Leases struct {
	cli       *clientv3.Client
	retention time.Duration
	period    time.Duration
	now       func() time.Time

	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time
}

// NewLeases returns the leases of records kept for retention, shared per
// period.
func NewLeases(cli *clientv3.Client, retention, period time.Duration) *Leases {
	return &Leases{cli: cli, retention: retention, period: period, now: time.Now}
}

// Get returns the lease of the current period, granting it when needed.
func (l *Leases) Get(ctx context.Context) (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != 0 && l.now().Sub(l.granted) < l.period {
		return l.id, nil
	}
	resp, err := l.cli.Grant(ctx, int64((l.retention+l.period)/time.Second))
	if err != nil {
		return 0, failed(err, "grant")
	}
	l.id, l.granted = resp.ID, l.now()
	return l.id, nil
}

// Forget drops the lease id if it is still the current one, after etcd
// said it no longer exists (revoked, or expired while etcd was away).
func (l *Leases) Forget(id clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.id = 0
	}
}

// PutBlobLeased is PutBlob on the current lease of leases, granting a new
// one once when etcd no longer knows the shared one.
func PutBlobLeased(ctx context.Context, cli *clientv3.Client, leases *Leases, prefix string, v any, limit int) error {
	return PutBlobClaimed(ctx, cli, leases, prefix, v, limit, nil)
}

// PutBlobClaimed is PutBlobLeased that first calls claim, when not nil,
// with the blob's size, compressed, and its lease: an error of claim
// (a quota) stores nothing.
func PutBlobClaimed(ctx context.Context, cli *clientv3.Client, leases *Leases, prefix string, v any, limit int, claim func(ctx context.Context, size int, lease clientv3.LeaseID) error) error {
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("etcdx: blob prefix %q must end in /", prefix)
	}
	data, err := encodeBlob(v, limit, BlobMaxRaw)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		lease, err := leases.Get(ctx)
		if err != nil {
			return err
		}
		if claim != nil {
			err = claim(ctx, len(data), lease)
		}
		if err == nil {
			err = putChunks(ctx, cli, prefix, data, lease)
		}
		if attempt == 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			leases.Forget(lease)
			continue
		}
		return err
	}
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
	// The bound guards memory against a blob conch did not write: every
	// blob it writes is at most BlobMaxRaw decoded.
	if err := DecodeBlobFrom(bytes.NewReader(data), int64(len(data)), v); err != nil {
		return false, err
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
