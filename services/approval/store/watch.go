package store

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch calls fn with the approval's state now and after every change
// until the approval is terminal (fn's last call), fn returns false, or ctx
// ends. It resumes from the last revision it saw after a dropped
// connection, and re-reads the state when etcd compacted past it, so no
// transition is missed. A pending approval whose lease ran out is expired
// here, so a waiter always learns the outcome.
func (s *Store) Watch(ctx context.Context, account, id string, fn func(*Approval) bool) error {
	rk, lk := s.recKey(account, id), s.liveKey(account, id)
	var last *Approval
	emit := func(a *Approval) bool {
		if last != nil && last.rev == a.rev {
			return true
		}
		last = a
		return fn(a) && !a.Terminal()
	}
	backoff := 50 * time.Millisecond
	for {
		a, live, rev, err := s.read(ctx, account, id)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if !retryable(err) {
				return err
			}
			if !pause(ctx, &backoff) {
				return ctx.Err()
			}
			continue
		}
		if a.State == StatePending && !live {
			if a, err = s.expire(ctx, a); err != nil {
				if !pause(ctx, &backoff) {
					return ctx.Err()
				}
				continue
			}
		}
		if !emit(a) {
			return nil
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, rk, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		done, changed, err := s.follow(ctx, wch, rk, lk, emit)
		cancel()
		if done || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Either the approval changed in a way the record must tell
		// (changed), or the watch ended (compaction, lost leader): read
		// the state again and watch from there, after a pause if etcd is
		// in trouble.
		if changed {
			// The watch worked: only a run of failures grows the pause.
			backoff = 50 * time.Millisecond
		} else if !pause(ctx, &backoff) {
			return ctx.Err()
		}
	}
}

// follow consumes watch events; done is true when the caller should stop.
func (s *Store) follow(ctx context.Context, wch clientv3.WatchChan, rk, lk string, emit func(*Approval) bool) (done, changed bool, err error) {
	for wr := range wch {
		if wr.Err() != nil || wr.Canceled {
			return false, false, nil
		}
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			switch {
			case k == lk && ev.Type == clientv3.EventTypeDelete:
				// The lease ran out or a decision removed it; the record
				// tells which (re-read below).
				return false, true, nil
			case k == rk && ev.Type == clientv3.EventTypePut:
				a, err := decode(ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					return true, false, err
				}
				if !emit(a) {
					return true, false, nil
				}
			case k == rk && ev.Type == clientv3.EventTypeDelete:
				return false, true, nil
			}
		}
	}
	return false, false, ctx.Err()
}

func pause(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	if *backoff < 2*time.Second {
		*backoff *= 2
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
