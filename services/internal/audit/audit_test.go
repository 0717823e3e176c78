package audit

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
)

func newTestWriter(t *testing.T, st store.Store, cli *clientv3.Client, prefix string, max int) *Writer {
	t.Helper()
	w, err := NewWriter(Config{Store: st, Etcd: cli, EtcdPrefix: prefix, Name: "test", MaxBuffered: max})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func newFS(t testing.TB) store.Store {
	t.Helper()
	st, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// segmentLines reads the lines of the stored segment key.
func segmentLines(t *testing.T, st store.Store, key string) []string {
	t.Helper()
	rc, _, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// rewrite replaces a segment's lines with edit's.
func rewrite(t *testing.T, st store.Store, key string, edit func([]string) []string) {
	t.Helper()
	ctx := t.Context()
	lines := edit(segmentLines(t, st, key))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	_ = zw.Close()
	if _, err := st.Put(ctx, key, &buf, store.PutOptions{Size: int64(buf.Len()), Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
}

// The trail checks out, and tampering is found, on local disk (conch dev)
// and on MinIO (a cluster's store) alike.
func TestVerifyFindsFirstBadRecord(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	minio := miniotest.Start(t)
	stores := []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"local disk", func(t *testing.T) store.Store { return newFS(t) }},
		{"minio", func(t *testing.T) store.Store {
			st, err := s3store.New(t.Context(), s3store.Options{Endpoint: minio.Endpoint, AccessKey: minio.AccessKey, SecretKey: minio.SecretKey, Bucket: miniotest.Bucket()})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
	tests := []struct {
		name     string
		tamper   func(t *testing.T, st store.Store, keys []string)
		wantKey  int // index of the segment named
		wantLine int
		want     string
	}{
		{name: "intact", tamper: func(*testing.T, store.Store, []string) {}, wantLine: -1},
		{name: "one byte edited", tamper: func(t *testing.T, st store.Store, keys []string) {
			rewrite(t, st, keys[0], func(l []string) []string {
				l[2] = strings.Replace(l[2], "echo 2", "echo 3", 1)
				return l
			})
		}, wantKey: 0, wantLine: 3, want: "edited"},
		{name: "record removed", tamper: func(t *testing.T, st store.Store, keys []string) {
			rewrite(t, st, keys[0], func(l []string) []string { return append(l[:1], l[2:]...) })
		}, wantKey: 0, wantLine: 2, want: "missing"},
		{name: "last record removed", tamper: func(t *testing.T, st store.Store, keys []string) {
			rewrite(t, st, keys[0], func(l []string) []string { return l[:len(l)-1] })
		}, wantKey: 0, wantLine: 4, want: "missing at the end"},
		{name: "records reordered", tamper: func(t *testing.T, st store.Store, keys []string) {
			rewrite(t, st, keys[1], func(l []string) []string { l[0], l[1] = l[1], l[0]; return l })
		}, wantKey: 1, wantLine: 1, want: "out of order"},
		{name: "segment removed", tamper: func(t *testing.T, st store.Store, keys []string) {
			if err := st.Delete(t.Context(), keys[:1]); err != nil {
				t.Fatal(err)
			}
		}, wantKey: 0, wantLine: 0, want: "segment is missing"},
		{name: "garbage line", tamper: func(t *testing.T, st store.Store, keys []string) {
			rewrite(t, st, keys[1], func(l []string) []string { l[1] = l[1][:10]; return l })
		}, wantKey: 1, wantLine: 2, want: "does not decode"},
	}
	for si, sto := range stores {
		for i, tc := range tests {
			t.Run(sto.name+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				st := sto.open(t)
				prefix := fmt.Sprintf("/t%d-%d/", si, i)
				w := newTestWriter(t, st, cli, prefix, 0)
				var keys []string
				for seg := range 2 {
					for j := range 4 {
						w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "echo " + string(rune('0'+seg*4+j)), Decision: "allow"})
					}
					w.Write(ctx, Record{Kind: KindCommand, Account: "other", Command: "true"})
					if err := w.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				k, err := segmentKeys(ctx, st, "acme", zeroTime, zeroTime)
				if err != nil || len(k) != 2 {
					t.Fatalf("segments: %v %v", k, err)
				}
				keys = k
				tc.tamper(t, st, keys)
				rep, err := Verify(ctx, st, cli, prefix, "acme")
				if err != nil {
					t.Fatal(err)
				}
				if tc.wantLine < 0 {
					if rep.Problem != nil || rep.Records != 8 || rep.Segments != 2 {
						t.Fatalf("intact trail: %+v %v", rep, rep.Problem)
					}
					return
				}
				p := rep.Problem
				if p == nil {
					t.Fatalf("tampering not detected: %+v", rep)
				}
				if p.Segment != keys[tc.wantKey] || p.Line != tc.wantLine || !strings.Contains(p.Reason, tc.want) {
					t.Fatalf("problem = %s, want %s line %d %q", p, keys[tc.wantKey], tc.wantLine, tc.want)
				}
				// Another account's chain is untouched.
				if rep, err := Verify(ctx, st, cli, prefix, "other"); err != nil || rep.Problem != nil || rep.Records != 2 {
					t.Fatalf("other account: %+v %v", rep, err)
				}
			})
		}
	}
}

// diskStore is a real local store whose directory can be taken away and
// put back: while it is away, its writes fail as they do on a disk that
// is gone.
type diskStore struct {
	*fsstore.Store
	dir string
}

func newDisk(t *testing.T) *diskStore {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &diskStore{Store: st, dir: dir}
}

func (d *diskStore) down(t *testing.T) {
	t.Helper()
	if err := os.Rename(d.dir, d.dir+".away"); err != nil {
		t.Fatal(err)
	}
}

func (d *diskStore) up(t *testing.T) {
	t.Helper()
	if err := os.Rename(d.dir+".away", d.dir); err != nil {
		t.Fatal(err)
	}
}

func TestWriterBoundAndRetry(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newDisk(t)
	st.down(t)
	w := newTestWriter(t, st, cli, "/bound/", 3)
	start := time.Now()
	for range 5 {
		w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "ls"})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("writes blocked for %v", d)
	}
	if w.Dropped() != 2 || w.Buffered() != 3 {
		t.Fatalf("dropped %d buffered %d, want 2 and 3", w.Dropped(), w.Buffered())
	}
	if err := w.Flush(ctx); err == nil {
		t.Fatal("flush to a store that is down succeeded")
	}
	if w.Buffered() != 3 {
		t.Fatalf("a failed flush lost records: %d buffered", w.Buffered())
	}
	st.up(t)
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "dropped: still full"})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Settings kept as raw JSON, spaced and with HTML characters, hash
	// the same after a round trip through the store.
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "after", Exec: json.RawMessage(`{"security": "allowlist", "x": "<&>"}`)})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, st, cli, "/bound/", "acme")
	if err != nil || rep.Problem != nil || rep.Records != 4 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	recs, _, err := Read(ctx, st, Query{Accounts: []string{"acme"}})
	if err != nil || len(recs) != 4 || recs[0].Command != "after" {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
}

// A segment whose write failed is written again as it was, never with
// records that came after: its pending anchor may already name its last
// hash, and what is stored under its key must end on that hash.
func TestFailedSegmentIsRetriedAsItWas(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newDisk(t)
	w := newTestWriter(t, st, cli, "/retry/", 0)
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "one"})
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "two"})
	st.down(t)
	if err := w.Flush(ctx); err == nil {
		t.Fatal("flush to a store that is down succeeded")
	}
	st.up(t)
	// Its anchor is pending and names nothing stored: not a problem.
	if rep, err := Verify(ctx, st, cli, "/retry/", "acme"); err != nil || rep.Problem != nil || rep.Records != 0 {
		t.Fatalf("verify after a failed flush: %+v %v", rep, err)
	}
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "three"})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, st, cli, "/retry/", "acme")
	if err != nil || rep.Problem != nil || rep.Records != 3 || rep.Segments != 2 {
		t.Fatalf("verify: %+v %v; want 3 records in 2 segments", rep, err)
	}
}

func TestRunFlushesEveryInterval(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newFS(t)
	w, err := NewWriter(Config{Store: st, Etcd: cli, Name: "run", FlushEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Run(rctx); close(done) }()
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "ls"})
	deadline := time.Now().Add(5 * time.Second)
	for w.Buffered() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.Buffered() != 0 {
		t.Fatal("Run did not flush")
	}
	w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "at shutdown"})
	cancel()
	<-done
	recs, _, err := Read(ctx, st, Query{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
}

func TestReadFiltersAndPages(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newFS(t)
	w := newTestWriter(t, st, cli, "/read/", 0)
	base := time.Date(2026, 1, 2, 3, 59, 0, 0, time.UTC)
	for i := range 10 {
		dec := "allow"
		if i%2 == 1 {
			dec = "deny"
		}
		w.Write(ctx, Record{Time: base.Add(time.Duration(i) * 20 * time.Second), Kind: KindCommand, Account: "acme", Gateway: "g" + string(rune('0'+i%3)), User: "u", Command: "cmd" + string(rune('0'+i)), Decision: dec})
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		q    Query
		want string
	}{
		{"all newest first", Query{}, "cmd9 cmd8 cmd7 cmd6 cmd5 cmd4 cmd3 cmd2 cmd1 cmd0"},
		{"decision", Query{Decision: "deny"}, "cmd9 cmd7 cmd5 cmd3 cmd1"},
		{"gateway", Query{Gateway: "g1"}, "cmd7 cmd4 cmd1"},
		{"since until", Query{Since: base.Add(40 * time.Second), Until: base.Add(80 * time.Second)}, "cmd4 cmd3 cmd2"},
		{"q", Query{Q: "cmd5"}, "cmd5"},
		{"page", Query{Limit: 3}, "cmd9 cmd8 cmd7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.Accounts = []string{"acme"}
			recs, next, err := Read(ctx, st, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Command)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("got %q, want %q", g, tc.want)
			}
			if tc.q.Limit > 0 {
				recs, _, err := Read(ctx, st, Query{Accounts: []string{"acme"}, Limit: 3, Before: next})
				if err != nil || len(recs) != 3 || recs[0].Command != "cmd6" {
					t.Fatalf("next page: %v %v", recs, err)
				}
			}
		})
	}
	// Segments are per hour: the records span two.
	keys, _ := segmentKeys(ctx, st, "acme", zeroTime, zeroTime)
	if len(keys) != 2 {
		t.Fatalf("segments: %v", keys)
	}
	if rep, err := Verify(ctx, st, cli, "/read/", "acme"); err != nil || rep.Problem != nil {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestSweepKeepsTheRestVerifiable(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newFS(t)
	w := newTestWriter(t, st, cli, "/sweep/", 0)
	base := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for h := range 3 {
		for range 2 {
			w.Write(ctx, Record{Time: base.Add(time.Duration(h) * time.Hour), Kind: KindCommand, Account: "acme", Command: "ls"})
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Sweep(ctx, st, cli, "/sweep/", base.Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want 2", n, err)
	}
	rep, err := Verify(ctx, st, cli, "/sweep/", "acme")
	if err != nil || rep.Problem != nil || rep.Records != 2 {
		t.Fatalf("verify after sweep: %+v %v", rep, err)
	}
}

// BenchmarkWrite is what recording costs the caller: sealing a record into
// the buffer; the store is written in the background.
func BenchmarkWrite(b *testing.B) {
	w, err := NewWriter(Config{Store: newFS(b), Etcd: etcdxtest.StartForTest(b), Name: "bench", MaxBuffered: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	r := Record{Kind: KindCommand, Account: "acme", Gateway: "default", User: "u", Command: "git status --short", Decision: "allow",
		Argv: [][]string{{"git", "status", "--short"}}, ResolvedPaths: []string{"/usr/bin/git"}}
	for b.Loop() {
		w.Write(b.Context(), r)
	}
}
