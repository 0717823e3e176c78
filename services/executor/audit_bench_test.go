package executor

import (
	"context"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
)

// BenchmarkCommandRoundTripAudit runs `true` alternately on an executor
// that writes the audit trail (asynchronously, to local disk and etcd, as
// conch dev does) and on one that does not, in the same run, and reports
// both p50s and what the trail adds. A cluster's executors hand records to
// an AuditForwarder, whose Write only appends; the Writer here also hashes
// each record on the command's path, as the approval service does.
//
// Each command is timed after an untimed pause, as in
// BenchmarkCommandRoundTrip: a model's turn comes between two commands.
// Without it, on two cores, each side's command ran beside the other's
// background work (the trail's write, the agent starting its next shells)
// and the difference of the two p50s swung from -0.6 to +0.9 ms between
// runs.
func BenchmarkCommandRoundTripAudit(b *testing.B) {
	st, err := fsstore.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	w, err := audit.NewWriter(audit.Config{Store: st, Etcd: etcdxtest.StartForTest(b), Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(b.Context())
	done := make(chan struct{})
	go func() { _ = w.Run(wctx); close(done) }()
	defer func() { stop(); <-done }()

	type side struct {
		x   *testExecutor
		req *executorv1.RunCommandRequest
		ds  []time.Duration
	}
	with, without := &side{x: startExecutor(b, WithAudit(w))}, &side{x: startExecutor(b)}
	ctx := as(b, "bench")
	for _, s := range []*side{with, without} {
		s.req = &executorv1.RunCommandRequest{SandboxId: createSandbox(b, s.x, "bench"), Command: "true"}
		if _, err := s.x.client.RunCommand(ctx, s.req); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		for _, s := range []*side{with, without} {
			b.StopTimer()
			time.Sleep(commandPause)
			b.StartTimer()
			start := time.Now()
			res, err := s.x.client.RunCommand(ctx, s.req)
			if err != nil || res.GetOutcome().GetExitCode() != 0 {
				b.Fatal(res, err)
			}
			s.ds = append(s.ds, time.Since(start))
		}
	}
	withP50, withoutP50 := p50(with.ds), p50(without.ds)
	b.ReportMetric(withP50.Seconds()*1000, "p50-ms")
	b.ReportMetric(withoutP50.Seconds()*1000, "no-audit-p50-ms")
	b.ReportMetric((withP50-withoutP50).Seconds()*1000, "added-ms")
	if w.Dropped() > 0 {
		b.Fatalf("%d records dropped", w.Dropped())
	}
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}
