package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/quotas"
)

var seq atomic.Int64

func newApproval(account string) *Approval {
	now := time.Now()
	return &Approval{
		ID: fmt.Sprintf("ap-%d-%d", now.UnixNano(), seq.Add(1)), Account: account, Command: "rm -rf build",
		Cwd: "/home/workspace", Agent: "default", Host: "gateway", Security: "allowlist",
		CreatedAt: now, ExpiresAt: now.Add(time.Minute), Binding: "b",
	}
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(etcdxtest.StartForTest(t), fmt.Sprintf("/test/%s/", t.Name()), sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolveExactlyOnceUnderConcurrentApprovers(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a := newApproval("acct")
	if err := s.Create(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	const approvers = 16
	var wg sync.WaitGroup
	var won, conflicts atomic.Int64
	decisions := []string{DecisionAllowOnce, DecisionDeny, DecisionAllowAlways}
	for i := range approvers {
		wg.Go(func() {
			_, err := s.Resolve(ctx, "acct", a.ID, decisions[i%3], fmt.Sprintf("approver-%d", i))
			switch {
			case err == nil:
				won.Add(1)
			case errs.KindOf(err) == errs.Conflict:
				conflicts.Add(1)
			default:
				t.Errorf("resolve: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || conflicts.Load() != approvers-1 {
		t.Fatalf("%d won, %d conflicts; want 1 and %d", won.Load(), conflicts.Load(), approvers-1)
	}
	got, err := s.Get(ctx, "acct", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State == StatePending || got.ResolvedBy == "" {
		t.Fatalf("after resolve: %+v", got)
	}
	if _, err := s.Resolve(ctx, "acct", a.ID, DecisionDeny, "late"); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("late resolve: %v, want conflict", err)
	}
	if _, err := s.Resolve(ctx, "acct", "nope", DecisionDeny, "x"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("unknown id: %v, want not found", err)
	}
	if _, err := s.Get(ctx, "other-account", a.ID); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("another account's approval: %v, want not found", err)
	}
}

func TestTimeoutExpiresAndWatcherLearnsIt(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a := newApproval("acct")
	a.FallbackAllows = true
	if err := s.Create(ctx, a, time.Second); err != nil {
		t.Fatal(err)
	}
	var states []string
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := s.Watch(wctx, "acct", a.ID, func(a *Approval) bool {
		states = append(states, a.State)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[0] != StatePending || states[1] != StateExpired {
		t.Fatalf("states %v, want pending then expired", states)
	}
	got, err := s.Get(ctx, "acct", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateExpired || got.ResolvedBy != "fallback" || got.Reason != ReasonTimeout || !got.Allows() {
		t.Fatalf("after timeout: %+v", got)
	}
	if _, err := s.Resolve(ctx, "acct", a.ID, DecisionAllowOnce, "late"); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("resolve after timeout: %v, want conflict", err)
	}
}

// An approval whose requester left ends as expired with the reason, never
// allows (whatever its fallback), and a later answer is a conflict; an
// approval already answered is left as it is.
func TestAbandon(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a := newApproval("acct")
	a.FallbackAllows = true
	if err := s.Create(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := s.Abandon(ctx, "acct", a.ID, "the request ended")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateExpired || got.Reason != "the request ended" || got.ResolvedBy != "requester" || got.Allows() {
		t.Fatalf("abandoned: %+v", got)
	}
	if _, err := s.Resolve(ctx, "acct", a.ID, DecisionAllowOnce, "late"); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("resolve after abandon: %v, want conflict", err)
	}

	b := newApproval("acct")
	if err := s.Create(ctx, b, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "acct", b.ID, DecisionDeny, "me"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Abandon(ctx, "acct", b.ID, "the request ended"); err != nil || got.State != StateDenied || got.Reason != "" {
		t.Fatalf("abandon after deny: %+v %v", got, err)
	}
	if _, err := s.Abandon(ctx, "acct", "missing", "x"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("abandon of a missing approval: %v", err)
	}
}

func TestConsumeOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a := newApproval("acct")
	if err := s.Create(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "acct", a.ID, DecisionAllowOnce, "me"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var used atomic.Int64
	for range 8 {
		wg.Go(func() {
			got, err := s.Get(ctx, "acct", a.ID)
			if err != nil {
				t.Error(err)
				return
			}
			if s.Consume(ctx, got) == nil {
				used.Add(1)
			}
		})
	}
	wg.Wait()
	if used.Load() != 1 {
		t.Fatalf("an allow-once approval was used %d times", used.Load())
	}
}

func TestWatchResumesAfterEtcdRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	e, err := etcdx.StartEmbedded(ctx, etcdx.EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	keys := sealtest.Keyring(t)
	s, _ := New(cli, "/restart/", keys)
	a := newApproval("acct")
	if err := s.Create(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	seen := make(chan *Approval, 8)
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- s.Watch(ctx, "acct", a.ID, func(a *Approval) bool { seen <- a; return true })
	}()
	if first := <-seen; first.State != StatePending {
		t.Fatalf("first state %s", first.State)
	}
	e.Close()
	e2, err := etcdx.StartEmbedded(ctx, etcdx.EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	cli.SetEndpoints(e2.Endpoints()...)
	// A second client resolves, as another replica would.
	cli2, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: e2.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli2.Close() })
	s2, _ := New(cli2, "/restart/", keys)
	// Compact past the resolution too, so a watcher resuming from its old
	// revision must re-read.
	if _, err := s2.Resolve(ctx, "acct", a.ID, DecisionAllowOnce, "me"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli2.Put(ctx, "/restart/other", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli2.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-seen:
			if got.State == StateAllowed {
				if err := <-watchErr; err != nil {
					t.Fatal(err)
				}
				return
			}
		case err := <-watchErr:
			// The watch ends right after delivering the terminal state,
			// which may still be in the channel.
			for len(seen) > 0 {
				if got := <-seen; got.State == StateAllowed && err == nil {
					return
				}
			}
			t.Fatalf("watch ended before the decision: %v", err)
		case <-deadline:
			t.Fatal("the watcher never saw the decision made after the restart")
		}
	}
}

func TestDocumentRevisions(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	d, rev, err := s.Document(ctx, "acct")
	if err != nil || rev != 0 || d.Version != 1 {
		t.Fatalf("empty document: %+v %d %v", d, rev, err)
	}
	if _, err := d.AddPattern("main", "/usr/bin/rg"); err != nil {
		t.Fatal(err)
	}
	rev1, err := s.PutDocument(ctx, "acct", d, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDocument(ctx, "acct", document.Empty(), rev1-1); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("stale put: %v, want conflict", err)
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			_, _, err := s.UpdateDocument(ctx, "acct", func(d *document.Document) (bool, error) {
				_, err := d.AddPattern("main", fmt.Sprintf("/opt/bin/tool%d", i))
				return true, err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	d, _, _ = s.Document(ctx, "acct")
	if n := len(d.Agents["main"].Allowlist); n != 11 {
		t.Fatalf("%d entries after concurrent adds, want 11", n)
	}
	if _, _, err := s.Document(ctx, "other"); err != nil {
		t.Fatal(err)
	}
}

// Documents are served from memory while the watch runs: this replica's
// writes at once, another replica's as soon as the watch delivers them.
func TestDocumentCache(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	prefix := "/cache/"
	keys := sealtest.Keyring(t)
	a, _ := New(cli, prefix, keys)
	b, _ := New(cli, prefix, keys)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.WatchDocuments(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for !a.DocumentsCached() {
		if time.Now().After(deadline) {
			t.Fatal("the document cache never became ready")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Own write: visible at once.
	d := document.Empty()
	if _, err := d.AddPattern("main", "/usr/bin/rg"); err != nil {
		t.Fatal(err)
	}
	rev, err := a.PutDocument(ctx, "acct", d, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, gotRev, _ := a.CachedDocument(ctx, "acct")
	if gotRev != rev || len(got.Allowlist("main")) != 1 {
		t.Fatalf("own write not cached: rev %d/%d %v", gotRev, rev, got.Allowlist("main"))
	}
	// Another replica's write: visible once the watch delivers it.
	if _, _, err := b.UpdateDocument(ctx, "acct", func(d *document.Document) (bool, error) {
		return d.RemoveEntry("main", "/usr/bin/rg"), nil
	}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		got, _, _ := a.CachedDocument(ctx, "acct")
		if len(got.Allowlist("main")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("another replica's change never reached the cache")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if other, rev, _ := a.CachedDocument(ctx, "nobody"); rev != 0 || len(other.Agents) != 0 {
		t.Fatalf("unknown account: %+v %d", other, rev)
	}
	cancel()
	<-done
	if a.DocumentsCached() {
		t.Fatal("the cache still serves after its watch stopped")
	}
}

func TestArgShape(t *testing.T) {
	t.Parallel()
	same := [][2][]string{
		{{"-rf", "build"}, {"-rf", "dist"}},
		{{"-n", "5", "file"}, {"-n", "9", "other"}},
		{{}, {}},
	}
	differ := [][2][]string{
		{{"-rf", "build"}, {"-r", "build"}},
		{{"-rf", "a"}, {"-rf", "a", "b"}},
		{{"a", "-rf"}, {"-rf", "a"}},
		{{"-"}, {"--"}},
	}
	scope := GrantScope{Account: "a", Session: "s"}
	digest := func(args []string) string { return GrantDigest(scope, "/usr/bin/rm", ArgShape(args)) }
	for _, p := range same {
		if digest(p[0]) != digest(p[1]) {
			t.Errorf("%q and %q should share a shape", p[0], p[1])
		}
	}
	for _, p := range differ {
		if digest(p[0]) == digest(p[1]) {
			t.Errorf("%q and %q should not share a shape", p[0], p[1])
		}
	}
	if GrantDigest(scope, "/usr/bin/rm", nil) == GrantDigest(GrantScope{Account: "a", Session: "t"}, "/usr/bin/rm", nil) {
		t.Error("two sessions share a grant")
	}
}

// TestPendingApprovalsQuota: an account has at most its quota of
// approvals waiting; an answered, abandoned or expired one makes room.
func TestPendingApprovalsQuota(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	s.SetQuotaLimits(func(context.Context, string) (quotas.Limits, error) {
		return quotas.Limits{quotas.PendingApprovals: 2}, nil
	})
	ctx := t.Context()
	a, b, c := newApproval("acct"), newApproval("acct"), newApproval("acct")
	for _, x := range []*Approval{a, b} {
		if err := s.Create(ctx, x, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ctx, c, time.Minute); errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "quota pending_approvals exceeded (2 of 2)") {
		t.Fatalf("third pending approval: %v", err)
	}
	if err := s.Create(ctx, newApproval("other"), time.Minute); err != nil {
		t.Fatalf("another account's approval: %v", err)
	}
	if _, err := s.Resolve(ctx, "acct", a.ID, DecisionAllowOnce, "me"); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, c, time.Minute); err != nil {
		t.Fatalf("after one was answered: %v", err)
	}
	if _, err := s.Abandon(ctx, "acct", b.ID, "gone"); err != nil {
		t.Fatal(err)
	}
	// One that expires makes room once its lease ends.
	d := newApproval("acct")
	if err := s.Create(ctx, d, time.Second); err != nil {
		t.Fatalf("after one was abandoned: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := s.Create(ctx, newApproval("acct"), time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an expired approval still counts: %v", err)
		}
	}
}
