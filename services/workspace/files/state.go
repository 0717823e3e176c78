package files

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// etcd keys.
const (
	lockPrefix  = "/conch/workspace/lock/"
	statePrefix = "/conch/workspace/state/"
)

// state is a workspace's bookkeeping in etcd, written only under its lock.
type state struct {
	// Revision counts committed changes.
	Revision int64 `json:"revision"`
	// Bytes and Files are the usage.
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
	// Dirty is set while a change is being applied: a process that died
	// in between leaves it set, and the next change recounts the usage.
	Dirty bool `json:"dirty"`
}

// locker hands out per-workspace locks held by one etcd session (lease) of
// the process: a process that dies releases them when the lease expires.
type locker struct {
	cli *clientv3.Client
	ttl int

	mu      sync.Mutex
	session *concurrency.Session
	// local serialises this process's own holders: etcd mutexes of one
	// session share a key, so they exclude other processes only.
	local map[string]*localLock
}

type localLock struct {
	ch   chan struct{}
	refs int
}

// acquireLocal takes the in-process lock of key; release gives it back.
func (l *locker) acquireLocal(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.local == nil {
		l.local = map[string]*localLock{}
	}
	ll := l.local[key]
	if ll == nil {
		ll = &localLock{ch: make(chan struct{}, 1)}
		l.local[key] = ll
	}
	ll.refs++
	l.mu.Unlock()
	drop := func() {
		l.mu.Lock()
		if ll.refs--; ll.refs == 0 {
			delete(l.local, key)
		}
		l.mu.Unlock()
	}
	select {
	case ll.ch <- struct{}{}:
		return func() { <-ll.ch; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}

func (l *locker) sessionOf(ctx context.Context) (*concurrency.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		select {
		case <-l.session.Done():
			l.session = nil
		default:
			return l.session, nil
		}
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithTTL(l.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "workspace: etcd session")
	}
	l.session = s
	return s, nil
}

func (l *locker) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		_ = l.session.Close()
	}
}

// held is a taken workspace lock.
type held struct {
	release func()
	m       *concurrency.Mutex
	cli     *clientv3.Client
	key     string
	st      state
	has     bool
	modRev  int64 // the etcd revision of st's last write
}

// lock takes ws's lock, waiting at most timeout, and reads its state.
func (l *locker) lock(ctx context.Context, ws Workspace, timeout time.Duration) (*held, error) {
	s, err := l.sessionOf(ctx)
	if err != nil {
		return nil, err
	}
	key := lockPrefix + ws.Account + "/" + ws.User + "/"
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	release, err := l.acquireLocal(lctx, key)
	if err != nil {
		if ctx.Err() == nil {
			return nil, errs.New(errs.Unavailable, "workspace %s is busy: another change holds its lock; try again", ws.User)
		}
		return nil, errs.Wrap(errs.KindOf(err), err, "workspace: lock")
	}
	m := concurrency.NewMutex(s, key)
	if err := m.Lock(lctx); err != nil {
		release()
		if ctx.Err() == nil && lctx.Err() != nil {
			return nil, errs.New(errs.Unavailable, "workspace %s is busy: another change holds its lock; try again", ws.User)
		}
		return nil, errs.Wrap(errs.KindOf(err), err, "workspace: lock")
	}
	h := &held{release: release, m: m, cli: l.cli, key: statePrefix + ws.Account + "/" + ws.User}
	st, modRev, found, err := etcdx.GetJSON[state](ctx, l.cli, h.key)
	if err != nil {
		h.unlock(ctx)
		return nil, fmt.Errorf("workspace: read state: %w", err)
	}
	h.st, h.has, h.modRev = st, found, modRev
	return h, nil
}

// peek reads ws's state without the lock.
func (l *locker) peek(ctx context.Context, ws Workspace) (state, bool, error) {
	st, _, found, err := l.peekAt(ctx, ws)
	return st, found, err
}

// peekAt is peek that also returns the etcd revision of the state's last
// write, which no other write of any key ever has.
func (l *locker) peekAt(ctx context.Context, ws Workspace) (state, int64, bool, error) {
	st, modRev, found, err := etcdx.GetJSON[state](ctx, l.cli, statePrefix+ws.Account+"/"+ws.User)
	if err != nil {
		return state{}, 0, false, fmt.Errorf("workspace: read state: %w", err)
	}
	return st, modRev, found, nil
}

// put writes the state if the lock is still ours.
func (h *held) put(ctx context.Context, st state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	resp, err := h.cli.Txn(ctx).If(h.m.IsOwner()).Then(clientv3.OpPut(h.key, string(b))).Commit()
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "workspace: write state")
	}
	if !resp.Succeeded {
		return errs.New(errs.Unavailable, "workspace: lost the workspace lock (etcd session expired); try again")
	}
	h.st, h.has, h.modRev = st, true, resp.Header.Revision
	return nil
}

func (h *held) unlock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = h.m.Unlock(ctx)
	h.release()
}
