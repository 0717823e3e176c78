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
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// BenchmarkResolveToWaiter measures how long a waiting command takes to
// learn a decision: from the start of ResolveApproval to the waiter's
// watch delivering the allowed state, over a real embedded etcd.
func BenchmarkResolveToWaiter(b *testing.B) {
	st, err := store.New(etcdxtest.StartForTest(b), KeyPrefix)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(st, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := tenant.With(b.Context(), tenant.Scope{Account: "acct", Session: "s1"})
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
