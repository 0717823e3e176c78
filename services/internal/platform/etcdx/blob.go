package etcdx

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// A blob is a value kept as gzip-compressed JSON, bounded both ways: a
// stored response's parts and a kept turn, in an object store (etcd holds
// only small records, on Leases).
const (
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

// EncodeBlob is v as a blob is kept (gzip-compressed JSON): refused, with
// errs.ResourceExhausted, when larger than limit bytes compressed or
// BlobMaxRaw decoded.
func EncodeBlob(v any, limit int) ([]byte, error) { return encodeBlob(v, limit, BlobMaxRaw) }

// DecodeBlobFrom decodes into v a blob EncodeBlob made, read from r, which
// holds size bytes. The bound guards memory against a blob conch did not
// write: every blob it writes is at most BlobMaxRaw decoded.
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

// Leases hands out shared leases for records kept for a while:
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

// With runs put with the lease of the current period, and once more with
// a new one when etcd no longer knows that lease (revoked, or expired
// while etcd was away): what put writes on it is then on a live lease.
func (l *Leases) With(ctx context.Context, put func(clientv3.LeaseID) error) error {
	for attempt := 0; ; attempt++ {
		lease, err := l.Get(ctx)
		if err != nil {
			return err
		}
		err = put(lease)
		if attempt == 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.Forget(lease)
			continue
		}
		return err
	}
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
