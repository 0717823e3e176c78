package etcdx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// etcd refuses every write of every account once its database file
// reaches its quota: it raises the NOSPACE alarm, and the alarm stays
// until someone frees space and disarms it. A SpaceWatcher is the one
// owner of etcd's space. Every replica that runs one reads each member's
// status and the alarms, exports them as metrics, and tells bulk writers
// (stored responses) to wait once a member's file is past the high-water
// mark, so that small writes (sandbox records, approvals, quotas) keep
// the room left. The replica elected among them maintains: past the mark
// or under the alarm it compacts etcd's history; it defragments a member
// whose file holds much free space, one member at a time; and once the
// space is back under the mark it disarms NOSPACE.
const (
	// DefaultSpaceInterval is how often the space is read.
	DefaultSpaceInterval = 10 * time.Second
	// DefaultHighWater is the share of its quota a member's file may
	// reach before bulk writes are refused and history is compacted.
	DefaultHighWater = 0.8
	// DefaultDefragFree is the free space, as a share of the quota, that
	// makes defragmenting a member worth the pause it costs that member.
	DefaultDefragFree = 0.1
	// DefaultSpaceElection is the key prefix of the maintainers'
	// election.
	DefaultSpaceElection = "conch/etcd-space/maintainer"
	// SpaceMaintenanceTimeout is what one maintenance call may take:
	// a defragmentation rewrites a member's whole file, and blocks that
	// member meanwhile.
	SpaceMaintenanceTimeout = 5 * time.Minute
	// etcdDefaultQuota is etcd's own default, for a member that does not
	// report its quota.
	etcdDefaultQuota = 2 << 30
	// spaceSessionTTL is the maintainer's lease, in seconds.
	spaceSessionTTL = 10
)

// SpaceOptions configure a SpaceWatcher.
type SpaceOptions struct {
	// Client reads the members' status and the alarms, and campaigns in
	// the election. Required.
	Client *clientv3.Client
	// Admin compacts, defragments and disarms; with etcd's auth on that
	// takes its root role. It should allow a defragmentation time (its
	// request timeout). Nil: the watcher only watches. A watcher whose
	// Admin is refused stops maintaining and says so in its log.
	Admin *clientv3.Client
	// Name is this replica in the election.
	Name string
	// Election is the election's key prefix; empty means
	// DefaultSpaceElection.
	Election string
	// Interval, HighWater and DefragFree default to DefaultSpaceInterval,
	// DefaultHighWater and DefaultDefragFree.
	Interval   time.Duration
	HighWater  float64
	DefragFree float64
	// MeterProvider receives the metrics; nil means the global one.
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
}

// MemberSpace is one member's space as its status reported it.
type MemberSpace struct {
	Name     string `json:"name"`
	ID       uint64 `json:"-"`
	Endpoint string `json:"-"`
	// Size is the member's database file; etcd judges its quota by it.
	// InUse is what its data takes of it; the rest is free pages that a
	// defragmentation gives back.
	Size  int64 `json:"db_size"`
	InUse int64 `json:"db_size_in_use"`
	Quota int64 `json:"quota"`
	// Revision is the member's current revision.
	Revision int64 `json:"-"`
	// Err says why the member's status could not be read; the sizes are
	// then zero.
	Err string `json:"error,omitempty"`
}

// Alarm is an alarm a member raised.
type Alarm struct {
	Member string `json:"member"`
	Type   string `json:"type"`
	id     uint64
	alarm  pb.AlarmType
}

// String is "<type> on <member>".
func (a Alarm) String() string { return a.Type + " on " + a.Member }

// Space is what a SpaceWatcher last read.
type Space struct {
	Checked time.Time     `json:"checked"`
	Members []MemberSpace `json:"members"`
	Alarms  []Alarm       `json:"alarms"`
	// HighWater is the mark, as a share of each member's quota.
	HighWater float64 `json:"high_water"`
	// Err says why the last read failed; the rest is then that of the
	// read before.
	Err string `json:"error,omitempty"`
}

// NoSpace reports whether a member raised NOSPACE: etcd then refuses
// every write.
func (s Space) NoSpace() bool {
	return slices.ContainsFunc(s.Alarms, func(a Alarm) bool { return a.alarm == pb.AlarmType_NOSPACE })
}

// over is the first member whose file is past the high-water mark.
func (s Space) over() (MemberSpace, bool) {
	for _, m := range s.Members {
		if m.Err == "" && float64(m.Size) >= s.HighWater*float64(m.Quota) {
			return m, true
		}
	}
	return MemberSpace{}, false
}

// SpaceWatcher watches etcd's space and, when elected, maintains it (see
// the constants above). Run runs it; Space and AdmitBulk read what it
// last saw.
type SpaceWatcher struct {
	opts SpaceOptions
	log  *slog.Logger

	mu    sync.Mutex
	space Space
	// admitted is what AdmitBulk let go since space was read.
	admitted int64
	// compacted is the revision this watcher last compacted at, and
	// defragmented the value compacted had when each member was last
	// defragmented.
	compacted    int64
	defragmented map[uint64]int64

	// lead is the context of this replica's leadership, nil while it
	// does not lead.
	lead atomic.Pointer[context.Context]
	// refused is set once etcd refused Admin a maintenance call.
	refused atomic.Bool
	// stuck is set while NOSPACE stays raised for want of space that
	// maintenance can free, so that it is logged once.
	stuck        atomic.Bool
	stopCampaign atomic.Pointer[context.CancelFunc]

	meter       metric.Meter
	maintenance metric.Int64Counter
	gauges      []metric.Observable
	size        metric.Int64ObservableGauge
	inUse       metric.Int64ObservableGauge
	quota       metric.Int64ObservableGauge
	alarm       metric.Int64ObservableGauge
	maintainer  metric.Int64ObservableGauge
}

// NewSpaceWatcher returns a watcher of the etcd opts.Client reaches.
func NewSpaceWatcher(opts SpaceOptions) (*SpaceWatcher, error) {
	if opts.Client == nil {
		return nil, errors.New("etcdx: space watcher: no etcd client")
	}
	if opts.Election == "" {
		opts.Election = DefaultSpaceElection
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultSpaceInterval
	}
	if opts.HighWater <= 0 || opts.HighWater > 1 {
		opts.HighWater = DefaultHighWater
	}
	if opts.DefragFree <= 0 || opts.DefragFree > 1 {
		opts.DefragFree = DefaultDefragFree
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	w := &SpaceWatcher{opts: opts, log: opts.Logger, space: Space{HighWater: opts.HighWater}, defragmented: map[uint64]int64{}}
	w.meter = opts.MeterProvider.Meter("github.com/conch-sh/conch/services/internal/platform/etcdx")
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var g metric.Int64ObservableGauge
		g, err = w.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		w.gauges = append(w.gauges, g)
		return g
	}
	w.size = gauge("conch.etcd.db.size", "By", "Size of each etcd member's database file, which etcd judges its quota by")
	w.inUse = gauge("conch.etcd.db.in_use", "By", "Bytes of each etcd member's database file its data takes; the rest a defragmentation gives back")
	w.quota = gauge("conch.etcd.db.quota", "By", "Backend quota of each etcd member: past it etcd raises NOSPACE and refuses every write")
	w.alarm = gauge("conch.etcd.alarm", "", "1 while an etcd alarm of the type is raised (NOSPACE: etcd refuses every write)")
	w.maintainer = gauge("conch.etcd.space.maintainer", "", "1 while this process is the one that compacts, defragments and disarms etcd")
	if err == nil {
		w.maintenance, err = w.meter.Int64Counter("conch.etcd.maintenance",
			metric.WithDescription("etcd maintenance done by this process, by action (compact, defragment, disarm)"))
	}
	if err != nil {
		return nil, fmt.Errorf("etcdx: space watcher metrics: %w", err)
	}
	return w, nil
}

// Space returns what the watcher last read; its Checked is zero before
// the first read.
func (w *SpaceWatcher) Space() Space {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.space
	s.Members, s.Alarms = slices.Clone(s.Members), slices.Clone(s.Alarms)
	return s
}

// AdmitBulk is nil when a bulk write (one that may take megabytes) of
// size bytes may go, and counts it; it is an errs.Unavailable error
// saying why not when a member raised NOSPACE or its file would be past
// the high-water mark, the room left being kept for small writes. A
// member's file is taken to grow by every byte admitted since its size
// was read, so that a burst of writes between two reads meets the mark
// too. Before the first read it lets everything go; size 0 asks without
// counting.
func (w *SpaceWatcher) AdmitBulk(size int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.space
	if s.NoSpace() {
		return errs.New(errs.Unavailable, "etcd is out of space (its NOSPACE alarm is raised): it refuses writes until space is freed")
	}
	for _, m := range s.Members {
		if m.Err == "" && float64(m.Size+w.admitted+size) >= s.HighWater*float64(m.Quota) {
			return errs.New(errs.Unavailable, "etcd is short of space: member %s uses about %s of its %s quota, past the %.0f%% kept for small writes",
				m.Name, mib(m.Size+w.admitted), mib(m.Quota), s.HighWater*100)
		}
	}
	w.admitted += size
	return nil
}

// Maintaining reports whether this replica is the one that maintains.
func (w *SpaceWatcher) Maintaining() bool { return w.lead.Load() != nil }

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// Run reads the space every interval, and maintains it while this
// replica is elected, until ctx ends.
func (w *SpaceWatcher) Run(ctx context.Context) error {
	reg, err := w.meter.RegisterCallback(w.observe, w.gauges...)
	if err != nil {
		return fmt.Errorf("etcdx: space watcher metrics: %w", err)
	}
	defer func() { _ = reg.Unregister() }()
	if w.opts.Admin != nil {
		cctx, stop := context.WithCancel(ctx)
		w.stopCampaign.Store(&stop)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.campaign(cctx)
		}()
		defer func() {
			stop()
			<-done
		}()
	}
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		w.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// campaign keeps this replica in the maintainers' election. Every
// replica waits in it with its own key, so when the maintainer goes the
// next one leads without a write, which etcd would refuse under NOSPACE.
func (w *SpaceWatcher) campaign(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(w.opts.Client, concurrency.WithTTL(spaceSessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			if !Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		el := concurrency.NewElection(sess, w.opts.Election)
		if err := el.Campaign(ctx, w.opts.Name); err != nil {
			_ = sess.Close()
			if !Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		w.lead.Store(&lctx)
		w.log.InfoContext(ctx, "etcd space maintainer elected", "name", w.opts.Name)
		select {
		case <-sess.Done():
		case <-ctx.Done():
		}
		if ctx.Err() == nil {
			w.log.WarnContext(ctx, "etcd space maintainer lost its session", "name", w.opts.Name)
		}
		w.lead.Store(nil)
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = el.Resign(rctx)
		rcancel()
		_ = sess.Close()
	}
}

// round reads the space and, where this replica may, maintains it.
func (w *SpaceWatcher) round(ctx context.Context) {
	s, err := w.read(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.space.Err = errs.HideAddresses(err.Error())
		w.mu.Unlock()
		w.log.WarnContext(ctx, "etcd space unreadable", "error", err)
		return
	}
	w.publish(ctx, s)
	lctx, ok := w.maintainerContext(ctx, s)
	if !ok {
		return
	}
	if err := w.maintain(lctx, s); err != nil {
		if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) {
			w.refused.Store(true)
			if stop := w.stopCampaign.Load(); stop != nil {
				(*stop)()
			}
			w.log.ErrorContext(ctx, "etcd refused space maintenance: compaction, defragmentation and disarming need etcd's root role, so this process only watches", "error", err)
			return
		}
		if ctx.Err() == nil {
			w.log.WarnContext(ctx, "etcd space maintenance failed", "error", err)
		}
	}
}

// maintainerContext is the context to maintain under, and whether this
// replica maintains now: while it leads the election, or alone under
// NOSPACE when no replica is in the election (every one of them started
// after the alarm, so none could join: joining is a write).
func (w *SpaceWatcher) maintainerContext(ctx context.Context, s Space) (context.Context, bool) {
	if w.opts.Admin == nil || w.refused.Load() {
		return nil, false
	}
	if lctx := w.lead.Load(); lctx != nil {
		return *lctx, true
	}
	if !s.NoSpace() {
		return nil, false
	}
	resp, err := w.opts.Client.Get(ctx, w.opts.Election+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count > 0 {
		return nil, false
	}
	return ctx, true
}

// read reads every member's status and the alarms.
func (w *SpaceWatcher) read(ctx context.Context) (Space, error) {
	members, err := w.opts.Client.MemberList(ctx)
	if err != nil {
		return Space{}, fmt.Errorf("list members: %w", err)
	}
	s := Space{Checked: time.Now(), HighWater: w.opts.HighWater}
	names := map[uint64]string{}
	for _, m := range members.Members {
		name := m.Name
		if name == "" {
			name = strconv.FormatUint(m.ID, 16)
		}
		names[m.ID] = name
		ms := MemberSpace{Name: name, ID: m.ID}
		if len(m.ClientURLs) == 0 {
			ms.Err = "no client URL (not started yet)"
		} else {
			ms.Endpoint = m.ClientURLs[0]
			ms = w.status(ctx, ms)
		}
		s.Members = append(s.Members, ms)
	}
	slices.SortFunc(s.Members, func(a, b MemberSpace) int { return cmp.Compare(a.Name, b.Name) })
	alarms, err := w.opts.Client.AlarmList(ctx)
	if err != nil {
		return Space{}, fmt.Errorf("list alarms: %w", err)
	}
	for _, a := range alarms.Alarms {
		name, ok := names[a.MemberID]
		if !ok {
			name = strconv.FormatUint(a.MemberID, 16)
		}
		s.Alarms = append(s.Alarms, Alarm{Member: name, Type: a.Alarm.String(), id: a.MemberID, alarm: a.Alarm})
	}
	return s, nil
}

// status is ms with the sizes its member reports.
func (w *SpaceWatcher) status(ctx context.Context, ms MemberSpace) MemberSpace {
	st, err := w.opts.Client.Status(ctx, ms.Endpoint)
	if err != nil {
		ms.Err = errs.HideAddresses(err.Error())
		return ms
	}
	ms.Size, ms.InUse, ms.Quota = st.DbSize, st.DbSizeInUse, st.DbSizeQuota
	if ms.Quota <= 0 {
		ms.Quota = etcdDefaultQuota
	}
	if st.Header != nil {
		ms.Revision = st.Header.Revision
	}
	return ms
}

// publish makes s what the watcher last read, and logs what changed
// for the worse.
func (w *SpaceWatcher) publish(ctx context.Context, s Space) {
	w.mu.Lock()
	before := w.space
	w.space, w.admitted = s, 0
	w.mu.Unlock()
	if s.NoSpace() && !before.NoSpace() {
		w.log.ErrorContext(ctx, "etcd raised NOSPACE: it refuses every write until space is freed and the alarm disarmed", "alarms", s.Alarms)
	}
	m, over := s.over()
	if _, was := before.over(); over && !was {
		w.log.WarnContext(ctx, "etcd is past its high-water mark: bulk writes are refused", "member", m.Name, "db_size", m.Size, "db_size_in_use", m.InUse, "quota", m.Quota)
	}
}

// update replaces one member's space in what the watcher last read.
func (w *SpaceWatcher) update(ms MemberSpace) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, m := range w.space.Members {
		if m.ID == ms.ID {
			w.space.Members[i] = ms
		}
	}
}

// maintain compacts when the space is short, defragments each member
// with much free space in turn, and disarms NOSPACE once every member is
// back under the mark.
func (w *SpaceWatcher) maintain(ctx context.Context, s Space) error {
	// s.Members is what Space hands out too: this round's changes go to
	// a copy, and to the watcher's through update.
	s.Members = slices.Clone(s.Members)
	_, over := s.over()
	compacted := false
	if over || s.NoSpace() {
		var err error
		if compacted, err = w.compact(ctx, s); err != nil {
			return err
		}
	}
	for i, m := range s.Members {
		if m.Err != "" {
			continue
		}
		if compacted {
			// Compaction freed pages since s was read.
			if m = w.status(ctx, m); m.Err != "" {
				w.log.WarnContext(ctx, "etcd member status unreadable", "member", m.Name, "error", m.Err)
				continue
			}
		}
		if !w.worthDefragmenting(m, over || s.NoSpace()) {
			s.Members[i] = m
			continue
		}
		w.log.InfoContext(ctx, "defragmenting etcd member", "member", m.Name, "db_size", m.Size, "db_size_in_use", m.InUse)
		if _, err := w.opts.Admin.Defragment(ctx, m.Endpoint); err != nil {
			return fmt.Errorf("defragment %s: %w", m.Name, err)
		}
		w.maintenance.Add(ctx, 1, metric.WithAttributes(attribute.String("action", "defragment")))
		w.mu.Lock()
		w.defragmented[m.ID] = w.compacted
		w.mu.Unlock()
		m = w.status(ctx, m)
		w.update(m)
		s.Members[i] = m
		w.log.InfoContext(ctx, "etcd member defragmented", "member", m.Name, "db_size", m.Size)
	}
	if !s.NoSpace() {
		return nil
	}
	if m, over := s.over(); over {
		if w.stuck.Swap(true) {
			return nil
		}
		w.log.WarnContext(ctx, "etcd NOSPACE stays raised: its data itself fills the member past the mark, so space must be freed by deleting data or raising the quota", "member", m.Name, "db_size_in_use", m.InUse, "quota", m.Quota)
		return nil
	}
	w.stuck.Store(false)
	for _, a := range s.Alarms {
		if a.alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if _, err := w.opts.Admin.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.id, Alarm: a.alarm}); err != nil {
			return fmt.Errorf("disarm NOSPACE of %s: %w", a.Member, err)
		}
		w.maintenance.Add(ctx, 1, metric.WithAttributes(attribute.String("action", "disarm")))
		w.log.InfoContext(ctx, "etcd NOSPACE disarmed", "member", a.Member)
	}
	after, err := w.read(ctx)
	if err != nil {
		return err
	}
	w.publish(ctx, after)
	return nil
}

// worthDefragmenting reports whether m holds enough free space to be
// worth the pause a defragmentation costs it, or, when space is short,
// whether a compaction freed pages since m was last defragmented: etcd's
// in-use figure does not count pages a compaction freed after a
// defragmentation, so it cannot be trusted then.
func (w *SpaceWatcher) worthDefragmenting(m MemberSpace, short bool) bool {
	if float64(m.Size-m.InUse) >= w.opts.DefragFree*float64(m.Quota) {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return short && w.compacted > w.defragmented[m.ID]
}

// compact drops etcd's history up to the newest revision the members
// report, which frees the pages of every overwritten and deleted value,
// and reports whether it did (not when nothing was written since the last
// time). Watchers further behind list again (see ListWatch).
func (w *SpaceWatcher) compact(ctx context.Context, s Space) (compacted bool, err error) {
	var rev int64
	for _, m := range s.Members {
		rev = max(rev, m.Revision)
	}
	w.mu.Lock()
	done := rev <= w.compacted
	w.mu.Unlock()
	if rev == 0 || done {
		return false, nil
	}
	w.log.InfoContext(ctx, "compacting etcd history: its space is short", "revision", rev)
	if _, err := w.opts.Admin.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return false, fmt.Errorf("compact at %d: %w", rev, err)
	}
	w.mu.Lock()
	w.compacted = rev
	w.mu.Unlock()
	w.maintenance.Add(ctx, 1, metric.WithAttributes(attribute.String("action", "compact")))
	return true, nil
}

// observe reports the last read space as metrics.
func (w *SpaceWatcher) observe(_ context.Context, o metric.Observer) error {
	s := w.Space()
	for _, m := range s.Members {
		if m.Err != "" {
			continue
		}
		at := metric.WithAttributes(attribute.String("member", m.Name))
		o.ObserveInt64(w.size, m.Size, at)
		o.ObserveInt64(w.inUse, m.InUse, at)
		o.ObserveInt64(w.quota, m.Quota, at)
	}
	if !s.Checked.IsZero() {
		for _, t := range []pb.AlarmType{pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT} {
			var raised int64
			if slices.ContainsFunc(s.Alarms, func(a Alarm) bool { return a.alarm == t }) {
				raised = 1
			}
			o.ObserveInt64(w.alarm, raised, metric.WithAttributes(attribute.String("alarm", t.String())))
		}
	}
	var leads int64
	if w.Maintaining() {
		leads = 1
	}
	o.ObserveInt64(w.maintainer, leads)
	return nil
}
