package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
)

// TestNextRuns checks how the forwarder splits its buffer into RecordRuns
// calls: one account a call, in order, within the count and the message
// size every gRPC server takes, however large the commands its records
// repeat.
func TestNextRuns(t *testing.T) {
	t.Parallel()
	recs := func(account string, n, commandBytes int) []audit.Record {
		out := make([]audit.Record, n)
		for i := range out {
			out[i] = audit.Record{Kind: audit.KindEgress, Account: account, Command: strings.Repeat("x", commandBytes),
				Egress: &audit.Egress{Host: "example.org", Port: 443}}
		}
		return out
	}
	cases := []struct {
		name string
		buf  []audit.Record
		want []int // records per call
	}{
		{name: "one account", buf: recs("a", 3, 10), want: []int{3}},
		{name: "accounts in turn", buf: append(append(recs("a", 2, 10), recs("b", 1, 10)...), recs("a", 1, 10)...), want: []int{2, 1, 1}},
		{name: "more than a call's count", buf: recs("a", 2*maxRunRecords+1, 10), want: []int{maxRunRecords, maxRunRecords, 1}},
		{name: "a 1 MiB command's connections", buf: recs("a", 10, 1<<20), want: []int{3, 3, 3, 1}},
		{name: "a record larger than a call goes alone", buf: recs("a", 2, 5<<20), want: []int{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got []int
			for done := 0; done < len(c.buf); {
				batch := nextRuns(c.buf[done:])
				if len(batch) > 1 {
					if n := proto.Size(&approvalv1.RecordRunsRequest{Records: batch}); n > 4<<20 {
						t.Fatalf("a call of %d bytes", n)
					}
				}
				for _, r := range batch {
					if r.GetAccount() != c.buf[done].Account {
						t.Fatalf("a call mixes accounts")
					}
				}
				got = append(got, len(batch))
				done += len(batch)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("records per call (-want +got):\n%s", diff)
			}
		})
	}
}

// auditService is a real approval service's AuditService over gRPC with
// signed scopes, as executors reach it, writing to a trail on local disk
// whose writer never flushes on its own: a record sent without sync stays
// in its buffer, where Buffered sees it.
type auditService struct {
	client approvalv1.AuditServiceClient
	writer *audit.Writer
	store  store.Store
	etcd   *clientv3.Client
	// stop stops the server; the client's calls then fail.
	stop func()
}

func startAuditService(t *testing.T) *auditService {
	t.Helper()
	cli := etcdxtest.StartForTest(t)
	objs, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.NewWriter(audit.Config{Store: objs, Etcd: cli, Name: "approval", FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	api, err := approval.NewAuditServer(objs, cli, "", nil, w)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := tenant.NewSigner("test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpcserver.New(grpcserver.Options{Name: "approval", UnaryInterceptors: []grpc.UnaryServerInterceptor{signer.UnaryServerInterceptor()}})
	api.Register(g.GRPC())
	go func() { _ = g.Serve(lis) }()
	conn, err := discovery.DialAddr(lis.Addr().String(), grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(g.GRPC().Stop) }
	t.Cleanup(func() {
		_ = conn.Close()
		stop()
	})
	return &auditService{client: approvalv1.NewAuditServiceClient(conn), writer: w, store: objs, etcd: cli, stop: stop}
}

// runForwarder runs f until the test ends.
func runForwarder(t *testing.T, f *AuditForwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The periodic send and a sync write race for the records buffered: a
// sync record must never go in a periodic call, which asks for no sync
// write, and so leave the approval service buffering it while the sync
// write returns nil. Run with -race.
func TestForwardNeverTakesASyncRecord(t *testing.T) {
	svc := startAuditService(t)
	f := NewAuditForwarder(svc.client, time.Millisecond, 1000, slog.New(slog.DiscardHandler))
	runForwarder(t, f)
	ctx := t.Context()
	const n = 200
	for i := range n {
		r := audit.Record{Kind: audit.KindOutcome, Account: "acct", Command: fmt.Sprintf("cmd %d", i), Outcome: &audit.Outcome{}}
		if err := f.WriteSync(ctx, r); err != nil {
			t.Fatal(err)
		}
		if b := svc.writer.Buffered(); b != 0 {
			t.Fatalf("sync write %d returned nil with %d records buffered, not stored, by the approval service", i, b)
		}
	}
	rep, err := audit.Verify(ctx, svc.store, svc.etcd, "", "acct")
	if err != nil || rep.Problem != nil || rep.Records != n {
		t.Fatalf("verify: %+v %v; want %d records", rep, err, n)
	}
}

// A sync write through a forwarder whose buffer is full: what waits is
// sent first to make room, so the records are stored; with the approval
// service down they are refused with an error, never dropped behind a nil.
func TestForwarderSyncWriteWithAFullBuffer(t *testing.T) {
	for _, tc := range []struct {
		name string
		down bool
	}{
		{name: "approval service up"},
		{name: "approval service down", down: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := startAuditService(t)
			// Not run: nothing is sent but by the sync write.
			f := NewAuditForwarder(svc.client, time.Hour, 2, slog.New(slog.DiscardHandler))
			ctx := t.Context()
			f.Write(ctx, audit.Record{Kind: audit.KindOutcome, Account: "acct", Command: "async 1", Outcome: &audit.Outcome{}})
			f.Write(ctx, audit.Record{Kind: audit.KindOutcome, Account: "acct", Command: "async 2", Outcome: &audit.Outcome{}})
			if tc.down {
				svc.stop()
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err := f.WriteSync(wctx, audit.Record{Kind: audit.KindOutcome, Account: "acct", Command: "sync", Outcome: &audit.Outcome{}},
				audit.Record{Kind: audit.KindEgress, Account: "acct", Command: "sync", Egress: &audit.Egress{Host: "example.org", Port: 443}})
			if tc.down {
				if !errors.Is(err, errForwardBufferFull) {
					t.Fatalf("sync write with the approval service down = %v, want %v", err, errForwardBufferFull)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			recs, _, err := audit.Read(ctx, svc.store, audit.Query{Accounts: []string{"acct"}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Command)
			}
			slices.Sort(got)
			if want := []string{"async 1", "async 2", "sync", "sync"}; !slices.Equal(got, want) {
				t.Fatalf("stored when the sync write returned: %q, want %q", got, want)
			}
		})
	}
}
