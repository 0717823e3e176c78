package approval

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// BenchmarkResolveToWaiter measures how long a waiting command takes to
// learn a decision: from the start of ResolveApproval to the waiter's
// watch delivering the allowed state, over a real embedded etcd.
func BenchmarkResolveToWaiter(b *testing.B) {
	st, err := store.New(etcdxtest.StartForTest(b), KeyPrefix, sealtest.Keyring(b))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(st, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := tenant.With(b.Context(), tenant.Scope{Account: "acct", Session: "s1", Key: "key-test"})
	var lat []time.Duration
	for b.Loop() {
		resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm -rf build"), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
		if err != nil {
			b.Fatal(err)
		}
		id := resp.GetApproval().GetId()
		pending, woke := make(chan struct{}), make(chan time.Time, 1)
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			_ = st.Watch(wctx, "acct", id, func(a *store.Approval) bool {
				switch a.State {
				case store.StatePending:
					close(pending)
				case store.StateAllowed:
					woke <- time.Now()
				}
				return true
			})
		}()
		<-pending
		start := time.Now()
		if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: id, Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-woke).Sub(start))
		cancel()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkEvaluateService is Evaluate as the service answers it: the
// document read from etcd, the engine built and the command judged.
func BenchmarkEvaluateService(b *testing.B) {
	st, err := store.New(etcdxtest.StartForTest(b), KeyPrefix, sealtest.Keyring(b))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(st, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := tenant.With(b.Context(), tenant.Scope{Account: "acct"})
	go func() { _ = s.Run(ctx) }()
	for !st.DocumentsCached() {
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := s.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "default", Pattern: "/usr/bin/git"}); err != nil {
		b.Fatal(err)
	}
	req := &approvalv1.EvaluateRequest{Command: "cd / && git log --oneline -n 20 | grep -i fix", Agent: "default", Host: approvalv1.Host_HOST_GATEWAY, Cwd: "/"}
	for b.Loop() {
		resp, err := s.Evaluate(ctx, req)
		if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
