package executor

import (
	"sync"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/egressproxy"
)

// Bounds of what a sandbox's egress log keeps and a command reports.
const (
	maxEgressLog      = 256
	maxEgressReported = 64
	// egressSettle is how long a finished command waits for the proxy to
	// see its connections end: they close as its processes exit.
	egressSettle = 250 * time.Millisecond
)

// egressLog keeps the last connections a sandbox's proxy reported, so that
// each command can say which ended while it ran (SPEC §4 network,
// visibility).
type egressLog struct {
	mu      sync.Mutex
	seq     int64 // records ever added
	open    int   // connections opened and not ended
	recs    []egressproxy.Record
	changed chan struct{} // closed and replaced on every change
}

func newEgressLog() *egressLog { return &egressLog{changed: make(chan struct{})} }

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
	l.seq++
	l.recs = append(l.recs, r)
	if len(l.recs) > maxEgressLog {
		l.recs = append(l.recs[:0], l.recs[len(l.recs)-maxEgressLog:]...)
	}
	l.notify()
}

func (l *egressLog) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// mark is where a command's records start.
func (l *egressLog) mark() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// since waits up to settle for the sandbox's open connections to end,
// then returns the records added after mark, at most maxEgressReported,
// and how many more there were.
func (l *egressLog) since(mark int64, settle time.Duration) ([]*executorv1.EgressConnection, int32) {
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
	n := int(l.seq - mark)
	recs := l.recs[max(len(l.recs)-n, 0):]
	out := make([]*executorv1.EgressConnection, 0, min(len(recs), maxEgressReported))
	for _, r := range recs[:min(len(recs), maxEgressReported)] {
		out = append(out, &executorv1.EgressConnection{
			Host: r.Host, Port: int32(r.Port), Address: r.Address, Decision: r.Decision, Reason: r.Reason,
			BytesSent: r.BytesSent, BytesReceived: r.BytesReceived, DurationMs: r.Duration.Milliseconds(),
		})
	}
	return out, int32(n - len(out))
}
