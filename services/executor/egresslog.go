package executor

import (
	"math"
	"sync"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/egress"
)

// egressSettle is how long a finished command waits for the proxy to see
// its connections end: they close as its processes exit.
const egressSettle = 250 * time.Millisecond

// egressLog hands the connections a sandbox's proxy reports, as they end, to
// the report of every command running in the sandbox meanwhile
// (docs/reference/sandboxes.md, Network): a command reports the connections
// that ended while it ran, by any of the sandbox's processes, as
// egress.Report keeps them — every delivery before any refusal, and the exact
// count of what it leaves out.
type egressLog struct {
	mu      sync.Mutex
	open    int // connections opened and not ended
	watches map[*egressWatch]struct{}
	changed chan struct{} // closed and replaced on every change
}

func newEgressLog() *egressLog {
	return &egressLog{watches: map[*egressWatch]struct{}{}, changed: make(chan struct{})}
}

func (l *egressLog) opened() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open++
	l.notify()
}

func (l *egressLog) add(r egressproxy.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A connection the proxy made ends with its address, allowed or
	// given up after (failed).
	if r.Address != "" && l.open > 0 {
		l.open--
	}
	if len(l.watches) > 0 {
		c := &executorv1.EgressConnection{
			Host: r.Host, Port: int32(r.Port), Address: r.Address, Decision: r.Decision, Reason: r.Reason,
			BytesSent: r.BytesSent, BytesReceived: r.BytesReceived, DurationMs: r.Duration.Milliseconds(),
		}
		for w := range l.watches {
			w.report.Add(c, r.Decision == "allowed")
		}
	}
	l.notify()
}

func (l *egressLog) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// egressWatch is one command's report of its sandbox's connections, from
// watch until take.
type egressWatch struct {
	l      *egressLog
	report egress.Report[*executorv1.EgressConnection] // guarded by l.mu
}

// watch starts a command's report; take ends it.
func (l *egressLog) watch() *egressWatch {
	w := &egressWatch{l: l}
	l.mu.Lock()
	l.watches[w] = struct{}{}
	l.mu.Unlock()
	return w
}

// egressSeen is what a command reports of its sandbox's connections: those
// kept, and how many more ended while it ran.
type egressSeen struct {
	conns   []*executorv1.EgressConnection
	omitted int32
}

// take waits up to settle for the sandbox's open connections to end, then
// ends the report and returns it. A nil watch (a command outside any
// sandbox with network) reports nothing.
func (w *egressWatch) take(settle time.Duration) egressSeen {
	if w == nil {
		return egressSeen{}
	}
	l := w.l
	deadline := time.NewTimer(settle)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		open, changed := l.open, l.changed
		l.mu.Unlock()
		if open == 0 {
			break
		}
		select {
		case <-changed:
			continue
		case <-deadline.C:
		}
		break
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.watches, w)
	return egressSeen{conns: w.report.Kept(), omitted: int32(min(w.report.Omitted(), math.MaxInt32))}
}
