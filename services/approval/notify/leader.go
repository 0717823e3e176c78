package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// Notifier announces new approvals while it leads.
type Notifier struct {
	Store *store.Store
	// Convert turns a stored approval into its API form.
	Convert func(*store.Approval) *approvalv1.Approval
	// Sender delivers, through the outbound guard.
	Sender *Sender
	Logger *slog.Logger
	// Name identifies this replica in the election.
	Name string
	// SessionTTL is the leader lease in seconds; 0 means 10.
	SessionTTL int
}

// Run campaigns for leadership and, while leading, announces every new
// pending approval, until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	if n.Store == nil || n.Convert == nil || n.Sender == nil {
		return errors.New("notify: Store, Convert and Sender are required")
	}
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
	ttl := n.SessionTTL
	if ttl <= 0 {
		ttl = 10
	}
	cli := n.Store.Client()
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			n.Logger.WarnContext(ctx, "notifier session failed", "error", err)
			if !etcdx.Sleep(ctx, time.Second) {
				break
			}
			continue
		}
		el := concurrency.NewElection(sess, n.Store.Prefix()+"leader/notify")
		if err := el.Campaign(ctx, n.Name); err != nil {
			_ = sess.Close()
			continue
		}
		n.Logger.InfoContext(ctx, "notifier leads", "name", n.Name)
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
			case <-lctx.Done():
			}
			cancel()
		}()
		n.lead(lctx)
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = el.Resign(rctx)
		rcancel()
		_ = sess.Close()
		if ctx.Err() == nil {
			n.Logger.WarnContext(ctx, "notifier lost its etcd session")
		}
	}
	return nil
}

// lead announces pending approvals that nobody announced yet, and the
// outcomes still owed for approvals answered while no replica led, then
// every new approval and outcome, until ctx ends. When its watch is lost
// it scans again; the claims make each notice go out once.
func (n *Notifier) lead(ctx context.Context) {
	etcdx.ListWatch(ctx, n.Store.Client(), n.Store.ApprovalsPrefix(), etcdx.Handler{
		Reset:  func(kvs []*mvccpb.KeyValue, _ int64) error { n.scan(ctx, kvs); return nil },
		Events: func(evs []*clientv3.Event) error { n.follow(ctx, evs); return nil },
	}, etcdx.WithLogger(n.Logger))
}

// scan announces what a list of every approval shows is still owed.
func (n *Notifier) scan(ctx context.Context, kvs []*mvccpb.KeyValue) {
	// The markers of what was sent sit beside each record, so one read
	// tells which notices and outcomes are owed without asking etcd per
	// approval; a scan after a lost watch skips what was announced.
	marked := map[string]bool{}
	for _, kv := range kvs {
		if k := string(kv.Key); strings.HasSuffix(k, store.NoticedSuffix) || strings.HasSuffix(k, store.OutcomeSuffix) {
			marked[k] = true
		}
	}
	for _, kv := range kvs {
		k := string(kv.Key)
		a, ok := store.DecodeRecord(k, kv.Value, kv.ModRevision)
		switch {
		case !ok:
		case a.State == store.StatePending && !marked[k+store.NoticedSuffix] && a.UnderReview(time.Now()):
			n.afterReview(ctx, a)
		case a.State == store.StatePending && !marked[k+store.NoticedSuffix]:
			n.announce(ctx, a)
		case a.Terminal() && marked[k+store.NoticedSuffix] && !marked[k+store.OutcomeSuffix]:
			n.announceOutcome(ctx, a)
		}
	}
}

// follow announces new approvals and outcomes as they are stored.
func (n *Notifier) follow(ctx context.Context, evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Type != clientv3.EventTypePut {
			continue
		}
		a, ok := store.DecodeRecord(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
		switch {
		case !ok:
		case a.State == store.StatePending && a.UnderReview(time.Now()):
			n.afterReview(ctx, a)
		case a.State == store.StatePending:
			// New, or back from its reviewer: humans are asked now
			// (once: the notice is claimed).
			n.announce(ctx, a)
		case a.Terminal():
			n.announceOutcome(ctx, a)
		}
	}
}

// afterReview announces a once its review deadline passed, if it is still
// pending then: a reviewer whose replica died never hands it on itself.
// An earlier hand-on is an update this notifier follows anyway.
func (n *Notifier) afterReview(ctx context.Context, a *store.Approval) {
	time.AfterFunc(time.Until(a.ReviewUntil)+100*time.Millisecond, func() {
		if ctx.Err() != nil {
			return
		}
		cur, err := n.Store.Get(ctx, a.Account, a.ID)
		if err == nil && cur.State == store.StatePending && !cur.UnderReview(time.Now()) {
			n.announce(ctx, cur)
		}
	})
}

// announce sends a's request to the account's targets, once.
func (n *Notifier) announce(ctx context.Context, a *store.Approval) {
	cfg, err := n.Store.Forwarding(ctx, a.Account)
	if err != nil {
		n.Logger.WarnContext(ctx, "forwarding config unreadable", "account", a.Account, "error", err)
		return
	}
	pa := n.Convert(a)
	if !Matches(cfg, pa) || len(cfg.GetTargets()) == 0 {
		return
	}
	claimed, err := n.Store.ClaimNotice(ctx, a.Account, a.ID)
	if err != nil || !claimed {
		return
	}
	for _, t := range cfg.GetTargets() {
		if err := n.Sender.Send(ctx, cfg.GetChannels(), t, pa); err != nil {
			n.Logger.WarnContext(ctx, "approval notice not delivered", "account", a.Account, "approval", a.ID, "channel", t.GetChannel().String(), "error", err)
		}
	}
}

// announceOutcome tells the targets that were asked how an approval ended,
// once.
func (n *Notifier) announceOutcome(ctx context.Context, a *store.Approval) {
	cfg, err := n.Store.Forwarding(ctx, a.Account)
	if err != nil || !Matches(cfg, n.Convert(a)) {
		return
	}
	claimed, err := n.Store.ClaimOutcome(ctx, a.Account, a.ID)
	if err != nil || !claimed {
		return
	}
	text := OutcomeText(a.ID, a.State, a.Decision, a.ResolvedBy)
	for _, t := range cfg.GetTargets() {
		if err := n.Sender.SendText(ctx, cfg.GetChannels(), t, text); err != nil {
			n.Logger.WarnContext(ctx, "approval outcome not delivered", "account", a.Account, "approval", a.ID, "channel", t.GetChannel().String(), "error", err)
		}
	}
}
