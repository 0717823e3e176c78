package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
)

// storedCommands is the commands of account's records in the trail.
func storedCommands(t *testing.T, st *diskStore, account string) []string {
	t.Helper()
	recs, _, err := Read(t.Context(), st, Query{Accounts: []string{account}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Command)
	}
	slices.Sort(out)
	return out
}

// A sync write returns nil only when its records are stored: a full
// buffer is written first to make room, and when that fails the records
// are refused, not dropped behind a nil.
func TestWriteSyncWithAFullBuffer(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	tests := []struct {
		name      string
		storeDown bool
		// sync is how many records the sync write carries.
		sync    int
		wantErr error
		// stored is how many records the trail holds once the store is up
		// and the writer flushed.
		stored int
	}{
		{name: "store up: room is made", sync: 1, stored: 4},
		{name: "store up: records and their connections", sync: 2, stored: 5},
		{name: "store down: refused", storeDown: true, sync: 1, wantErr: ErrBufferFull, stored: 3},
		{name: "more records than the buffer holds", sync: 4, wantErr: ErrBufferFull, stored: 3},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := newDisk(t)
			prefix := fmt.Sprintf("/full%d/", i)
			w := newTestWriter(t, st, cli, prefix, 3)
			if tc.storeDown {
				st.down(t)
			}
			for j := range 3 {
				w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: fmt.Sprintf("async %d", j)})
			}
			var recs []Record
			for j := range tc.sync {
				recs = append(recs, Record{Kind: KindOutcome, Account: "acme", Command: fmt.Sprintf("sync %d", j)})
			}
			err := w.WriteSync(ctx, recs...)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("sync write: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("sync write = %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil:
				// Stored when it says so, before any other flush.
				got := storedCommands(t, st, "acme")
				for _, r := range recs {
					if !slices.Contains(got, r.Command) {
						t.Fatalf("sync write returned nil, and %q is not stored: %v", r.Command, got)
					}
				}
			}
			if tc.storeDown {
				st.up(t)
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(ctx, st, cli, prefix, "acme")
			if err != nil || rep.Problem != nil || rep.Records != tc.stored {
				t.Fatalf("verify: %+v %v; want %d records", rep, err, tc.stored)
			}
			if w.Buffered() != 0 {
				t.Fatalf("%d records still buffered", w.Buffered())
			}
		})
	}
}

// With the object store down, a sync write fails, naming the trail; the
// trail is the real MinIO a cluster runs, stopped.
func TestWriteSyncFailsWhenTheStoreIsDown(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	srv, stop, err := miniotest.Launch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stopOnce := func() { once.Do(stop) }
	t.Cleanup(stopOnce)
	st, err := s3store.New(ctx, s3store.Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Bucket: miniotest.Bucket()})
	if err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, st, cli, "/down/", 0)
	if err := w.WriteSync(ctx, Record{Kind: KindCommand, Account: "acme", Command: "ls"}); err != nil {
		t.Fatal(err)
	}
	stopOnce()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = w.WriteSync(wctx, Record{Kind: KindCommand, Account: "acme", Command: "ls -l"})
	if err == nil || !strings.HasPrefix(err.Error(), "audit: records not stored") {
		t.Fatalf("a sync write to a store that is down = %v", err)
	}
	if w.Buffered() != 1 {
		t.Fatalf("%d records buffered, want the one that failed", w.Buffered())
	}
}

// Records of several accounts written together make one segment per
// account and hour, not one per run of an account's records.
func TestSegmentsPerAccountAndHour(t *testing.T) {
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	st := newFS(t)
	w := newTestWriter(t, st, cli, "/group/", 0)
	base := time.Date(2026, 3, 4, 10, 30, 0, 0, time.UTC)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	for _, r := range []Record{
		{Time: at(0), Account: "a"}, {Time: at(1), Account: "b"}, {Time: at(2), Account: "a"},
		{Time: at(3), Account: "b"}, {Time: at(4), Account: "a"},
		// The next hour, and a record timed before it that came after
		// (an executor's, stamped where it ran).
		{Time: at(40), Account: "a"}, {Time: at(41), Account: "b"}, {Time: at(29), Account: "a"},
	} {
		r.Kind = KindCommand
		w.Write(ctx, r)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"a": {"2026-03-04/10 1-3", "2026-03-04/11 4-4", "2026-03-04/10 5-5"},
		"b": {"2026-03-04/10 1-2", "2026-03-04/11 3-3"},
	}
	for acc, segs := range want {
		keys, err := segmentKeys(ctx, st, acc, zeroTime, zeroTime)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			seg := readSegment(ctx, st, k)
			hour, _ := segmentHour(accountPrefix(acc), k)
			got = append(got, fmt.Sprintf("%s %d-%d", hour.Format("2006-01-02/15"), seg.Records[0].Seq, seg.Records[len(seg.Records)-1].Seq))
		}
		slices.Sort(got)
		slices.Sort(segs)
		if !slices.Equal(got, segs) {
			t.Errorf("segments of %s = %v, want %v", acc, got, segs)
		}
		if rep, err := Verify(ctx, st, cli, "/group/", acc); err != nil || rep.Problem != nil {
			t.Errorf("verify %s: %+v %v", acc, rep, err)
		}
	}
}
