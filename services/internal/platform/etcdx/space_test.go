package etcdx_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/pki"
)

// poll calls cond until it holds, failing the test with what after a
// deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metrics reads the int64 data points of reader by metric name and the
// value of one attribute ("member", "alarm", "action"), summed.
func metrics(t *testing.T, reader sdkmetric.Reader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				key := ""
				for _, kv := range p.Attributes.ToSlice() {
					key = kv.Value.Emit()
				}
				if out[m.Name] == nil {
					out[m.Name] = map[string]int64{}
				}
				out[m.Name][key] += p.Value
			}
		}
	}
	return out
}

// runWatcher runs a space watcher of cli, maintaining through a client of
// its own, with the high-water mark highWater (0: the default), until the
// test ends or stop is called.
func runWatcher(t *testing.T, cli *clientv3.Client, name string, highWater float64, reader sdkmetric.Reader) (w *etcdx.SpaceWatcher, stop func()) {
	t.Helper()
	admin, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: cli.Endpoints(), RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	opts := etcdx.SpaceOptions{Client: cli, Admin: admin, Name: name, Interval: 50 * time.Millisecond, HighWater: highWater}
	if reader != nil {
		opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}
	w, err = etcdx.NewSpaceWatcher(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("space watcher %s: %v", name, err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// TestSpaceWatcherRecoversFromNoSpace fills a real etcd with a tiny quota
// until it raises NOSPACE: the watcher reports the alarm (its Space, the
// bulk writers' admission, metrics); once the data is deleted it compacts,
// defragments and disarms, and writes work again, with no operator.
func TestSpaceWatcherRecoversFromNoSpace(t *testing.T) {
	t.Parallel()
	// With the mark at half the quota, the data that raised NOSPACE
	// is past it however fragmented etcd's file was: only deleting it
	// makes room.
	const quota, highWater = 8 << 20, 0.5
	cli := etcdxtest.StartWithQuotaForTest(t, quota)
	ctx := t.Context()
	reader := sdkmetric.NewManualReader()
	w, _ := runWatcher(t, cli, "only", highWater, reader)
	poll(t, "the only watcher maintains", w.Maintaining)
	poll(t, "the watcher read the space", func() bool { return !w.Space().Checked.IsZero() })
	if err := w.AdmitBulk(0); err != nil {
		t.Fatalf("bulk writes refused in an empty etcd: %v", err)
	}

	value := strings.Repeat("x", 256<<10)
	var err error
	for i := 0; err == nil; i++ {
		// etcd judges its quota by its file, which grows only as its
		// backend commits (every 100ms): a fast loop may pass the quota
		// by what one batch holds before it is refused.
		if i > 8*quota/len(value) {
			t.Fatal("etcd took eight times its quota without raising NOSPACE")
		}
		_, err = cli.Put(ctx, fmt.Sprintf("fill/%04d", i), value)
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("filling etcd: %v, want NOSPACE", err)
	}
	poll(t, "the watcher sees NOSPACE", func() bool { return w.Space().NoSpace() })
	if err := w.AdmitBulk(0); errs.KindOf(err) != errs.Unavailable || !strings.Contains(err.Error(), "NOSPACE") {
		t.Fatalf("bulk admission under NOSPACE: %v", err)
	}
	m := metrics(t, reader)
	if m["conch.etcd.alarm"]["NOSPACE"] != 1 || m["conch.etcd.db.quota"]["conch"] != quota || m["conch.etcd.db.size"]["conch"] < quota/2 || m["conch.etcd.space.maintainer"][""] != 1 {
		t.Fatalf("metrics under NOSPACE: %v", m)
	}
	// Small writes fail too: that is what the watcher must undo.
	if _, err := cli.Put(ctx, "small", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("small write under NOSPACE: %v", err)
	}

	// Deletes still go through; the watcher frees their space.
	if _, err := cli.Delete(ctx, "fill/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	poll(t, "the watcher disarms NOSPACE and lets bulk writes go", func() bool { return !w.Space().NoSpace() && w.AdmitBulk(0) == nil })
	if _, err := cli.Put(ctx, "small", "v"); err != nil {
		t.Fatalf("write after the watcher disarmed: %v", err)
	}
	m = metrics(t, reader)
	if m["conch.etcd.alarm"]["NOSPACE"] != 0 || m["conch.etcd.maintenance"]["compact"] < 1 || m["conch.etcd.maintenance"]["defragment"] < 1 || m["conch.etcd.maintenance"]["disarm"] < 1 {
		t.Fatalf("metrics after recovery: %v", m)
	}
	if s := w.Space(); len(s.Members) != 1 || float64(s.Members[0].Size) >= highWater*quota {
		t.Fatalf("space after recovery: %+v", s)
	}
}

// TestSpaceWatcherHighWater: past the high-water mark bulk writers are
// refused with a message naming the member and the mark, while small
// writes still go.
func TestSpaceWatcherHighWater(t *testing.T) {
	t.Parallel()
	// etcd's file grows in steps of its own: the mark is half the
	// quota, so that the fill stops well before etcd refuses it.
	const quota, highWater = 16 << 20, 0.5
	cli := etcdxtest.StartWithQuotaForTest(t, quota)
	ctx := t.Context()
	w, _ := runWatcher(t, cli, "only", highWater, nil)
	value := strings.Repeat("x", 256<<10)
	// etcd's file grows when a batch commits, after the write returned:
	// each value is waited for, so that the fill stops just past the
	// mark.
	for i, written := 0, 0; ; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("fill/%04d", i), value); err != nil {
			t.Fatalf("filling to the mark: %v", err)
		}
		written += len(value)
		var size int64
		poll(t, "etcd's file holds what was written", func() bool {
			s, err := cli.Status(ctx, cli.Endpoints()[0])
			if err != nil {
				t.Fatal(err)
			}
			size = s.DbSize
			return size >= int64(written)
		})
		if float64(size) >= highWater*quota {
			break
		}
	}
	poll(t, "bulk writes are refused past the mark", func() bool { return w.AdmitBulk(0) != nil })
	if err := w.AdmitBulk(0); errs.KindOf(err) != errs.Unavailable || !strings.Contains(err.Error(), "member conch") || !strings.Contains(err.Error(), "50%") {
		t.Fatalf("bulk admission past the mark: %v", err)
	}
	if _, err := cli.Put(ctx, "small", "v"); err != nil {
		t.Fatalf("small write past the mark: %v", err)
	}
}

// TestSpaceWatcherElection: of several watchers of one etcd, one
// maintains; when it stops, another takes over.
func TestSpaceWatcherElection(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	var ws []*etcdx.SpaceWatcher
	var stops []func()
	for i := range 3 {
		w, stop := runWatcher(t, cli, fmt.Sprintf("replica-%d", i), 0, nil)
		ws, stops = append(ws, w), append(stops, stop)
	}
	leaders := func() []int {
		var out []int
		for i, w := range ws {
			if w.Maintaining() {
				out = append(out, i)
			}
		}
		return out
	}
	poll(t, "one watcher maintains", func() bool { return len(leaders()) == 1 })
	first := leaders()[0]
	stops[first]()
	poll(t, "another watcher takes over", func() bool { l := leaders(); return len(l) == 1 && l[0] != first })
}

// TestSpaceWatcherWithoutRoot: with etcd's auth on, a watcher whose
// maintenance client is not root still reports NOSPACE; etcd refuses it
// the maintenance, and it leaves the election to replicas that may.
func TestSpaceWatcherWithoutRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir+"/pki", "test etcd")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("etcd", "etcd", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	tlsOf := func(user string) *tls.Config {
		pair, err := ca.Issue(user, user)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pki.ClientConfig(ca.CAFile(), pair)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	root := tlsOf("root")
	const quota = 8 << 20
	e, err := etcdx.StartEmbedded(t.Context(), etcdx.EmbeddedOptions{Dir: dir + "/etcd", UnsafeNoFsync: true, QuotaBytes: quota,
		TLS: &etcdx.ServerTLS{CAFile: ca.CAFile(), CertFile: server.CertFile, KeyFile: server.KeyFile, Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx := t.Context()
	if err := etcdx.EnsureUsers(ctx, e.Endpoints(), root, map[string][]etcdx.Permission{
		"router": {{Prefix: etcdx.DefaultSpaceElection + "/", Write: true}},
	}); err != nil {
		t.Fatal(err)
	}
	connect := func(cfg *tls.Config) *clientv3.Client {
		cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: e.Endpoints(), TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	rootCli, routerCli := connect(root), connect(tlsOf("router"))
	w, err := etcdx.NewSpaceWatcher(etcdx.SpaceOptions{Client: routerCli, Admin: routerCli, Name: "router", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	poll(t, "the router's watcher is elected", w.Maintaining)

	value := strings.Repeat("x", 256<<10)
	for i := 0; err == nil; i++ {
		_, err = rootCli.Put(ctx, fmt.Sprintf("fill/%04d", i), value)
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("filling etcd: %v, want NOSPACE", err)
	}
	poll(t, "the router's watcher reports NOSPACE", func() bool { return w.Space().NoSpace() })
	poll(t, "the refused watcher leaves the election", func() bool { return !w.Maintaining() })
	if s := w.Space(); !s.NoSpace() || len(s.Members) != 1 || s.Members[0].Size == 0 {
		t.Fatalf("space seen without root: %+v", s)
	}
}

// TestSpaceWatcherCountsAdmitted: what bulk writers were let write since
// etcd's size was read counts as written, so a burst between two reads
// meets the mark too.
func TestSpaceWatcherCountsAdmitted(t *testing.T) {
	t.Parallel()
	const quota = 8 << 20
	cli := etcdxtest.StartWithQuotaForTest(t, quota)
	w, err := etcdx.NewSpaceWatcher(etcdx.SpaceOptions{Client: cli, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	poll(t, "the watcher read the space", func() bool { return !w.Space().Checked.IsZero() })
	if w.Maintaining() {
		t.Fatal("a watcher without an admin client maintains")
	}
	if err := w.AdmitBulk(5 << 20); err != nil {
		t.Fatalf("5 MiB in an empty etcd of 8: %v", err)
	}
	if err := w.AdmitBulk(2 << 20); errs.KindOf(err) != errs.Unavailable || !strings.Contains(err.Error(), "short of space") {
		t.Fatalf("2 MiB more, past the mark at 6.4: %v", err)
	}
	if err := w.AdmitBulk(1 << 20); err != nil {
		t.Fatalf("1 MiB more, under the mark: %v", err)
	}
}
