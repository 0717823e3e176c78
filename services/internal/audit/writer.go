package audit

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/store"
)

// Defaults of Config.
const (
	// DefaultFlushEvery is how often buffered records are written, and so
	// the most an asynchronous writer loses on a crash.
	DefaultFlushEvery = 2 * time.Second
	// DefaultMaxBuffered bounds the records held while the store is slow
	// or down.
	DefaultMaxBuffered = 10000
	// DefaultRetention is how long segments are kept.
	DefaultRetention = 90 * 24 * time.Hour
	// DefaultEtcdPrefix is where anchors live in etcd.
	DefaultEtcdPrefix = "/conch/audit/"
)

const instrumentationName = "github.com/conch-sh/conch/services/internal/audit"

var (
	meter      = otel.Meter(instrumentationName)
	dropped, _ = meter.Int64Counter("conch.audit.dropped",
		metric.WithDescription("Audit records dropped because the buffer was full (the object store was slow or down)"))
	written, _ = meter.Int64Counter("conch.audit.written",
		metric.WithDescription("Audit records written to the object store"))
)

// Config configures a Writer.
type Config struct {
	// Store holds the segments; Etcd the anchors, under EtcdPrefix.
	Store      store.Store
	Etcd       *clientv3.Client
	EtcdPrefix string
	// Name names the writer's chains; a random suffix is added so that
	// each start of a process begins new chains.
	Name string
	// FlushEvery and MaxBuffered default to DefaultFlushEvery and
	// DefaultMaxBuffered.
	FlushEvery  time.Duration
	MaxBuffered int
	Logger      *slog.Logger
	Now         func() time.Time
}

// chain is the tail of one account's chain.
type chain struct {
	seq  int64
	hash string
}

// ErrBufferFull means records could not wait to be written: the writer
// already holds MaxBuffered of them, because the object store or etcd is
// slow or down.
var ErrBufferFull = errors.New("buffer full: earlier records still wait for the object store or etcd")

// Writer appends records to the audit trail.
type Writer struct {
	cfg Config
	id  string

	mu     sync.Mutex
	buf    []Record
	chains map[string]chain
	// held are segments a flush tried and failed to write, retried as
	// they are: their anchors in etcd may already name their content.
	held []segment
	// waiting counts records sealed and not yet written: buffered, held
	// or being written; it is what MaxBuffered bounds.
	waiting int
	dropped int64

	// flushing serializes writes of segments, which keeps each chain's
	// segments in order.
	flushing sync.Mutex
}

// NewWriter returns a Writer; Run writes what it buffers.
func NewWriter(cfg Config) (*Writer, error) {
	if cfg.Store == nil {
		return nil, errors.New("audit: no object store")
	}
	if cfg.Etcd == nil {
		return nil, errors.New("audit: no etcd client")
	}
	if cfg.EtcdPrefix == "" {
		cfg.EtcdPrefix = DefaultEtcdPrefix
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = DefaultFlushEvery
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := cfg.Name
	if name == "" {
		name = "w"
	}
	return &Writer{cfg: cfg, id: url.PathEscape(name) + "." + hex.EncodeToString(b), chains: map[string]chain{}}, nil
}

// ID is the writer's name in the records it writes.
func (w *Writer) ID() string { return w.id }

// Write appends r to the buffer, chained after the account's last record.
// It never blocks on the store: when the buffer is full, r is dropped,
// counted and logged, and the chain stays whole.
func (w *Writer) Write(ctx context.Context, r Record) {
	if w == nil {
		return
	}
	err := w.buffer([]Record{r})
	switch {
	case errors.Is(err, ErrBufferFull):
		w.mu.Lock()
		w.dropped++
		n := w.dropped
		w.mu.Unlock()
		dropped.Add(ctx, 1)
		if n == 1 || n%1000 == 0 {
			w.cfg.Logger.WarnContext(ctx, "audit records dropped: buffer full", "dropped", n, "account", r.Account)
		}
	case err != nil:
		w.cfg.Logger.ErrorContext(ctx, "audit record not sealed", "error", err)
	}
}

// buffer seals recs into the buffer, each chained after its account's
// last record: all of them, or none when they do not fit or one does not
// seal.
func (w *Writer) buffer(recs []Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting+len(recs) > w.cfg.MaxBuffered {
		return ErrBufferFull
	}
	// The chains' tails move only once every record is sealed.
	var tails map[string]chain
	if len(recs) > 1 {
		tails = make(map[string]chain)
	}
	n := len(w.buf)
	for _, r := range recs {
		if r.Time.IsZero() {
			r.Time = w.cfg.Now()
		}
		r.Time = r.Time.UTC()
		c, ok := tails[r.Account]
		if !ok {
			c = w.chains[r.Account]
		}
		if err := r.seal(w.id, c.seq+1, c.hash); err != nil {
			clear(w.buf[n:])
			w.buf = w.buf[:n]
			return err
		}
		if tails == nil {
			w.chains[r.Account] = chain{seq: r.Seq, hash: r.Hash}
		} else {
			tails[r.Account] = chain{seq: r.Seq, hash: r.Hash}
		}
		w.buf = append(w.buf, r)
	}
	maps.Copy(w.chains, tails)
	w.waiting += len(recs)
	return nil
}

// Sync is the exec settings' audit mode that writes a command's records
// before its verdict or result returns.
const Sync = "sync"

// WriteSync writes recs, and everything buffered before them, to the
// store now, for gateways in sync mode. It returns nil only once every
// one of recs is stored and anchored; an error means they may not be,
// and the caller fails the command rather than report it recorded. When
// the buffer is full, what waits is written first to make room; if that
// fails, recs are not chained at all (ErrBufferFull). Records buffered
// whose write failed stay buffered and go with the next flush, so the
// trail may yet hold them.
func (w *Writer) WriteSync(ctx context.Context, recs ...Record) error {
	if w == nil {
		return nil
	}
	err := w.buffer(recs)
	if errors.Is(err, ErrBufferFull) {
		if ferr := w.Flush(ctx); ferr != nil {
			return fmt.Errorf("audit: records not stored: %w (%w)", err, ferr)
		}
		err = w.buffer(recs)
	}
	if err != nil {
		return fmt.Errorf("audit: records not stored: %w", err)
	}
	// recs were buffered before this flush began: it writes them, or a
	// flush before it did.
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("audit: records not stored: %w", err)
	}
	return nil
}

// Dropped is how many records were dropped since the writer started.
func (w *Writer) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Buffered is how many records wait to be written.
func (w *Writer) Buffered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// Run writes buffered records every FlushEvery until ctx ends, then once
// more.
func (w *Writer) Run(ctx context.Context) error {
	return FlushEvery(ctx, w.cfg.FlushEvery, w.Flush, func(ctx context.Context, err error, last bool) {
		msg := "audit flush failed"
		if last {
			msg = "audit records not written on shutdown"
		}
		w.cfg.Logger.WarnContext(ctx, msg, "error", err, "buffered", w.Buffered())
	})
}

// FlushEvery calls flush every interval until ctx ends, then a last time
// under a context of its own bounded to 5s, so that what was buffered
// when a process is told to stop is written; failed reports each error
// (last: of that final call) while ctx lives. It is the loop of every
// buffer of audit records, here and on the executors.
func FlushEvery(ctx context.Context, every time.Duration, flush func(context.Context) error, failed func(ctx context.Context, err error, last bool)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := flush(fctx); err != nil {
				failed(fctx, err, true)
			}
			return nil
		case <-t.C:
			if err := flush(ctx); err != nil && ctx.Err() == nil {
				failed(ctx, err, false)
			}
		}
	}
}

// Anchor is what etcd keeps of one segment.
type Anchor struct {
	Key   string `json:"key"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
	Hash  string `json:"hash"`
	// Pending is set while the segment is being written: the anchor is put
	// before the segment, and Pending cleared once the segment is stored.
	// A pending anchor whose segment is absent names records a writer was
	// still writing, or never stored because it stopped; one whose segment
	// is there is checked as any other.
	Pending bool `json:"pending,omitempty"`
}

// segment is the records of one segment: consecutive records of one
// account's chain, of one hour.
type segment []Record

// Flush writes every buffered record, one segment per account and hour,
// each anchored in etcd. A segment that fails is kept as it is, with
// those after it, and tried again first by the next flush.
func (w *Writer) Flush(ctx context.Context) error {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	w.mu.Lock()
	segs := append(w.held, segments(w.buf)...)
	w.held, w.buf = nil, nil
	w.mu.Unlock()
	done, n := 0, 0
	var err error
	for ; done < len(segs); done++ {
		if err = w.writeSegment(ctx, segs[done]); err != nil {
			break
		}
		n += len(segs[done])
	}
	written.Add(ctx, int64(n))
	w.mu.Lock()
	w.waiting -= n
	if done < len(segs) {
		w.held = segs[done:]
	}
	w.mu.Unlock()
	return err
}

// segments splits buffered records into the segments they are written
// as: one per account and hour, in the order of each account's first
// record. A segment holds consecutive records of its chain, so records an
// account has from several hours out of order (executors time their
// records where they run) make a segment for each run of one hour.
func segments(buf []Record) []segment {
	index := map[string]int{}
	var byAccount [][]Record
	for _, r := range buf {
		i, ok := index[r.Account]
		if !ok {
			i = len(byAccount)
			index[r.Account] = i
			byAccount = append(byAccount, nil)
		}
		byAccount[i] = append(byAccount[i], r)
	}
	var out []segment
	for _, recs := range byAccount {
		for len(recs) > 0 {
			hour := recs[0].Time.Truncate(time.Hour)
			n := 1
			for n < len(recs) && recs[n].Time.Truncate(time.Hour).Equal(hour) {
				n++
			}
			out = append(out, segment(recs[:n:n]))
			recs = recs[n:]
		}
	}
	return out
}

// writeSegment anchors recs as pending, stores them, then marks the
// anchor done. A crash at any point leaves the trail verifiable: before
// the segment is stored its pending anchor names nothing stored, after it
// the anchor holds its last hash.
func (w *Writer) writeSegment(ctx context.Context, recs segment) error {
	var buf, line bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	var lines [][]byte // kept to be exported
	exporting := exportEnabled(ctx)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("audit: encode: %w", err)
		}
		if exporting {
			lines = append(lines, bytes.Clone(bytes.TrimSuffix(line.Bytes(), []byte("\n"))))
		}
		if _, err := line.WriteTo(zw); err != nil {
			return fmt.Errorf("audit: compress: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("audit: compress: %w", err)
	}
	first, last := recs[0], recs[len(recs)-1]
	key := SegmentKey(first.Account, first.Time, w.id, first.Seq)
	ak := anchorKey(w.cfg.EtcdPrefix, first.Account, w.id, first.Seq)
	a := Anchor{Key: key, First: first.Seq, Last: last.Seq, Hash: last.Hash, Pending: true}
	if err := etcdx.PutJSON(ctx, w.cfg.Etcd, ak, a); err != nil {
		return fmt.Errorf("audit: anchor segment %s: %w", key, err)
	}
	if _, err := w.cfg.Store.Put(ctx, key, &buf, store.PutOptions{Size: int64(buf.Len()), Mode: 0o600, ModTime: w.cfg.Now()}); err != nil {
		return fmt.Errorf("audit: write segment %s: %w", key, err)
	}
	a.Pending = false
	if err := etcdx.PutJSON(ctx, w.cfg.Etcd, ak, a); err != nil {
		return fmt.Errorf("audit: anchor segment %s: %w", key, err)
	}
	if exporting {
		export(ctx, recs, lines)
	}
	return nil
}

// SegmentKey is where a segment whose first record is seq of writer's
// chain for account, written in the hour of t, is stored.
func SegmentKey(account string, t time.Time, writer string, seq int64) string {
	return fmt.Sprintf("%s%s/%s-%020d.jsonl.gz", accountPrefix(account), t.UTC().Format("2006-01-02/15"), writer, seq)
}

func accountPrefix(account string) string { return "audit/" + url.PathEscape(account) + "/" }

func anchorKey(prefix, account, writer string, seq int64) string {
	return fmt.Sprintf("%sanchors/%s/%s/%020d", prefix, url.PathEscape(account), writer, seq)
}
