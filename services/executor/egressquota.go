package executor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/accounts"
)

// egressDaily counts each account's egress bytes of the day (UTC) against
// its quota, on every executor together. Each executor counts what its
// sandboxes move, puts its count in etcd every sync, and reads the
// others' there: an account may pass its quota by what its sandboxes move
// on all executors between two syncs, no more.
type egressDaily struct {
	etcd  *clientv3.Client
	name  string // this executor, whose count it keeps
	quota *quotas.Config
	now   func() time.Time

	mu       sync.Mutex
	accounts map[string]*accountEgress
	lease    clientv3.LeaseID // the counts' lease, for the day leaseDay
	leaseDay string
}

// egressCountTTL keeps a day's counts a day after it.
const egressCountTTL = 48 * time.Hour

// accountEgress is one account's egress of the day, as this executor
// knows it: a SharedBudget of its sandboxes.
type accountEgress struct {
	account string
	day     string       // under egressDaily.mu
	synced  int64        // local when last put, under egressDaily.mu
	local   atomic.Int64 // moved by this executor's sandboxes today
	others  atomic.Int64 // moved by other executors' sandboxes today, at the last sync
	limit   atomic.Int64
}

var _ egressproxy.SharedBudget = (*accountEgress)(nil)

func (a *accountEgress) Left() int64   { return a.limit.Load() - a.local.Load() - a.others.Load() }
func (a *accountEgress) Spend(n int64) { a.local.Add(n) }
func (a *accountEgress) Why() string {
	return quotas.Exceeded(quotas.EgressBytesPerDay, a.local.Load()+a.others.Load(), a.limit.Load()).Error()
}

func newEgressDaily(etcd *clientv3.Client, name string, quota *quotas.Config) *egressDaily {
	return &egressDaily{etcd: etcd, name: name, quota: quota, now: time.Now, accounts: map[string]*accountEgress{}}
}

// account returns account's budget, read from etcd the first time.
func (d *egressDaily) account(ctx context.Context, account string) (*accountEgress, error) {
	d.mu.Lock()
	a := d.accounts[account]
	d.mu.Unlock()
	if a != nil {
		return a, nil
	}
	a = &accountEgress{account: account}
	if err := d.refresh(ctx, a); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.accounts[account]; b != nil {
		return b, nil
	}
	d.accounts[account] = a
	return a, nil
}

// refresh reads a's limit and the day's counts of every executor.
func (d *egressDaily) refresh(ctx context.Context, a *accountEgress) error {
	limits, err := accounts.Limits(ctx, d.etcd, d.quota, a.account)
	if err != nil {
		return err
	}
	day := quotas.Day(d.now())
	total, own, err := quotas.ReadEgress(ctx, d.etcd, a.account, day, d.name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a.day != day {
		// A new day: what this executor counted of the last is gone
		// from the budget; what it counted of this one (before a
		// restart) is its own.
		a.day, a.synced = day, own
		a.local.Store(own)
	}
	a.others.Store(total - own)
	a.limit.Store(limits[quotas.EgressBytesPerDay])
	return nil
}

// sync puts this executor's count of each account's egress that moved
// since the last sync, and reads the others' counts and the limits.
func (d *egressDaily) sync(ctx context.Context) error {
	d.mu.Lock()
	list := make([]*accountEgress, 0, len(d.accounts))
	for _, a := range d.accounts {
		list = append(list, a)
	}
	d.mu.Unlock()
	var first error
	for _, a := range list {
		if err := d.put(ctx, a); err != nil && first == nil {
			first = err
		}
		if err := d.refresh(ctx, a); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// put writes a's count of its day when it moved since the last put.
func (d *egressDaily) put(ctx context.Context, a *accountEgress) error {
	d.mu.Lock()
	day, n := a.day, a.local.Load()
	if n == a.synced {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	lease, err := d.dayLease(ctx, day)
	if err != nil {
		return err
	}
	if err := quotas.Restore(ctx, d.etcd, quotas.EgressBytesPerDay, a.account, day+"/"+d.name, quotas.Usage{quotas.EgressBytesPerDay: n}, clientv3.WithLease(lease)); err != nil {
		// The lease may be gone (etcd lost it): take a new one next time.
		d.mu.Lock()
		if d.lease == lease {
			d.lease = 0
		}
		d.mu.Unlock()
		return err
	}
	d.mu.Lock()
	if a.day == day {
		a.synced = n
	}
	d.mu.Unlock()
	return nil
}

// dayLease is the lease of day's counts, granted once a day.
func (d *egressDaily) dayLease(ctx context.Context, day string) (clientv3.LeaseID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leaseDay == day && d.lease != 0 {
		return d.lease, nil
	}
	resp, err := d.etcd.Grant(ctx, int64(egressCountTTL/time.Second))
	if err != nil {
		return 0, fmt.Errorf("executor: grant the egress counts' lease: %w", err)
	}
	d.lease, d.leaseDay = resp.ID, day
	return d.lease, nil
}
