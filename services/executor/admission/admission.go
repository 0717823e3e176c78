// Package admission bounds the work an executor does at once, so that past
// its capacity it turns new sandboxes away instead of slowing every
// sandbox it holds: beyond the point where its cores are busy, more work
// at once costs more CPU per unit of work (context switches, contended
// locks, a cold cache), and throughput falls as load rises.
//
// A Gate holds a number of slots. Work of a sandbox already admitted (a
// command) waits for a slot as long as its caller does, and is served
// first; a new sandbox waits for a slot at most a short while, then is
// refused, so that a completion is turned away before it starts rather
// than failed halfway. Among new sandboxes waiting, accounts take turns,
// so that one account's burst does not starve another's one request.
package admission

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrBusy is Admit's refusal: no slot came free within its wait.
var ErrBusy = errors.New("admission: no slot came free")

// Gate hands out slots.
type Gate struct {
	mu    sync.Mutex
	slots int
	used  int
	// work waits first; admits waits per account, served in turn.
	work   []*waiter
	admits map[string][]*waiter
	turns  []string // accounts with admits waiting, in the order they take turns
}

type waiter struct {
	granted chan struct{} // closed when the slot is the waiter's
	done    bool          // granted or given up, under Gate.mu
}

// New returns a gate of slots slots (at least 1).
func New(slots int) *Gate {
	return &Gate{slots: max(slots, 1), admits: map[string][]*waiter{}}
}

// Slots is how many slots the gate holds.
func (g *Gate) Slots() int { return g.slots }

// Work takes a slot for work of an admitted sandbox, waiting for one
// until ctx ends. release gives it back; calling it again does nothing.
func (g *Gate) Work(ctx context.Context) (release func(), err error) {
	w, ok := g.enter(func(w *waiter) { g.work = append(g.work, w) })
	if ok {
		return g.releaser(), nil
	}
	select {
	case <-w.granted:
		return g.releaser(), nil
	case <-ctx.Done():
		if g.abandon(w, func() { g.work = without(g.work, w) }) {
			return nil, ctx.Err()
		}
		return g.releaser(), nil
	}
}

// Admit takes a slot for a new sandbox of account, waiting at most wait
// (and while ctx lasts), after admitted work and in turn with other
// accounts. It fails with ErrBusy when no slot came free in time.
func (g *Gate) Admit(ctx context.Context, account string, wait time.Duration) (release func(), err error) {
	w, ok := g.enter(func(w *waiter) {
		if len(g.admits[account]) == 0 {
			g.turns = append(g.turns, account)
		}
		g.admits[account] = append(g.admits[account], w)
	})
	if ok {
		return g.releaser(), nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var cause error
	select {
	case <-w.granted:
		return g.releaser(), nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-t.C:
		cause = ErrBusy
	}
	if g.abandon(w, func() {
		q := without(g.admits[account], w)
		if len(q) == 0 {
			delete(g.admits, account)
			g.turns = without(g.turns, account)
			return
		}
		g.admits[account] = q
	}) {
		return nil, cause
	}
	return g.releaser(), nil
}

// enter takes a free slot at once when there is one and nobody waits for
// it; else it queues a waiter with queue, under the lock.
func (g *Gate) enter(queue func(*waiter)) (*waiter, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used < g.slots && len(g.work) == 0 && len(g.turns) == 0 {
		g.used++
		return nil, true
	}
	w := &waiter{granted: make(chan struct{})}
	queue(w)
	return w, false
}

// abandon takes w out of its queue with dequeue, unless it was granted a
// slot meanwhile; it reports whether w gave up.
func (g *Gate) abandon(w *waiter, dequeue func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	dequeue()
	return true
}

func (g *Gate) releaser() func() {
	var once sync.Once
	return func() { once.Do(g.release) }
}

// release gives a slot back: to the first work waiting, else to the next
// account's first new sandbox, else to the pool.
func (g *Gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.work) > 0 {
		w := g.work[0]
		g.work = g.work[1:]
		g.grant(w)
		return
	}
	if len(g.turns) > 0 {
		account := g.turns[0]
		q := g.admits[account]
		w := q[0]
		g.turns = g.turns[1:]
		if len(q) == 1 {
			delete(g.admits, account)
		} else {
			g.admits[account] = q[1:]
			g.turns = append(g.turns, account) // its next waits its turn
		}
		g.grant(w)
		return
	}
	g.used--
}

// grant hands the slot being released to w, under the lock.
func (g *Gate) grant(w *waiter) {
	w.done = true
	close(w.granted)
}

// without is q less its first v, if any.
func without[T comparable](q []T, v T) []T {
	if i := slices.Index(q, v); i >= 0 {
		return slices.Delete(q, i, i+1)
	}
	return q
}
