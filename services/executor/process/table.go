// Package process keeps the records of commands started in sandboxes: their
// state, their recorded output for poll and log, and notifications of their
// end. Finished records are kept for a retention period (30 minutes).
package process

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrNotFound means no such process (or it was forgotten after retention).
var ErrNotFound = errors.New("process: not found")

// MaxLog is how many bytes of output a record keeps; older output is
// discarded first.
const MaxLog = 1 << 20

// MaxRecords bounds the records kept per sandbox: beyond it the oldest
// finished ones are forgotten before their retention ends.
const MaxRecords = 1000

// Record is one process.
type Record struct {
	ID        string
	SandboxID string
	Command   string
	Pty       bool
	Notify    bool
	StartedAt time.Time

	mu        sync.Mutex
	log       []byte
	discarded int64 // bytes dropped from the front of log
	polled    int64 // absolute offset of the next poll
	running   bool
	endedAt   time.Time
	exitCode  int
	timedOut  bool
	errMsg    string
	changed   chan struct{} // closed and replaced on every change
	kill      func() error
	write     func([]byte, bool) error
}

// Snapshot is a record's state at one moment.
type Snapshot struct {
	ID, SandboxID, Command string
	Pty, Running, TimedOut bool
	ExitCode               int
	Error                  string
	StartedAt, EndedAt     time.Time
	OutputBytes            int64
}

// NewRecord returns a running record; kill and write act on the process.
func NewRecord(id, sandboxID, command string, pty, notify bool, kill func() error, write func([]byte, bool) error) *Record {
	return &Record{
		ID: id, SandboxID: sandboxID, Command: command, Pty: pty, Notify: notify, StartedAt: time.Now(),
		running: true, changed: make(chan struct{}), kill: kill, write: write,
	}
}

func (r *Record) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Append records output.
func (r *Record) Append(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, b...)
	if over := len(r.log) - MaxLog; over > 0 {
		r.log = append(r.log[:0:0], r.log[over:]...)
		r.discarded += int64(over)
	}
	r.signal()
}

// MarkPolled counts everything recorded so far as already seen by the
// caller, so that the next poll starts after it.
func (r *Record) MarkPolled() {
	r.mu.Lock()
	r.polled = r.discarded + int64(len(r.log))
	r.mu.Unlock()
}

// End marks the process ended.
func (r *Record) End(exitCode int, timedOut bool, errMsg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return
	}
	r.running, r.exitCode, r.timedOut, r.errMsg, r.endedAt = false, exitCode, timedOut, errMsg, time.Now()
	r.signal()
}

// Snapshot returns the record's state.
func (r *Record) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshot()
}

func (r *Record) snapshot() Snapshot {
	return Snapshot{
		ID: r.ID, SandboxID: r.SandboxID, Command: r.Command, Pty: r.Pty, Running: r.running,
		TimedOut: r.timedOut, ExitCode: r.exitCode, Error: r.errMsg, StartedAt: r.StartedAt, EndedAt: r.endedAt,
		OutputBytes: r.discarded + int64(len(r.log)),
	}
}

// Poll waits up to wait for new output or the end, then returns the output
// since the previous poll, at most maxBytes of it, and whether some was
// skipped or left for the next poll.
func (r *Record) Poll(ctx context.Context, wait time.Duration, maxBytes int) (Snapshot, []byte, bool) {
	r.mu.Lock()
	if r.running && r.discarded+int64(len(r.log)) == r.polled && wait > 0 {
		ch := r.changed
		r.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	truncated := false
	if r.polled < r.discarded {
		r.polled, truncated = r.discarded, true
	}
	out := r.log[r.polled-r.discarded:]
	if len(out) > maxBytes {
		out, truncated = out[:maxBytes], true
	}
	r.polled += int64(len(out))
	return r.snapshot(), append([]byte(nil), out...), truncated
}

// Lines returns lines [offset, offset+limit) of the recorded output (limit
// 0: all), at most maxBytes of them, the next offset and the total.
func (r *Record) Lines(offset, limit int64, maxBytes int) (string, int64, int64) {
	r.mu.Lock()
	text := string(r.log)
	r.mu.Unlock()
	text = strings.TrimSuffix(text, "\n")
	var lines []string
	if text != "" {
		lines = strings.Split(text, "\n")
	}
	total := int64(len(lines))
	if offset < 0 {
		offset = 0
	}
	var b strings.Builder
	next := offset
	for next < total && (limit <= 0 || next-offset < limit) {
		l := lines[next]
		if b.Len()+len(l)+1 > maxBytes && next > offset {
			break
		}
		if next > offset {
			b.WriteByte('\n')
		}
		b.WriteString(l)
		next++
	}
	return b.String(), next, total
}

// Kill kills the process.
func (r *Record) Kill() error { return r.kill() }

// Write writes to the process's standard input.
func (r *Record) Write(b []byte, eof bool) error { return r.write(b, eof) }

// Wait waits for the end or ctx.
func (r *Record) Wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		running, ch := r.running, r.changed
		r.mu.Unlock()
		if !running {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Event is a notification of a sandbox's process.
type Event struct {
	Process Snapshot
	Message string
}

// Table holds the records of all sandboxes on this executor.
type Table struct {
	retention time.Duration
	mu        sync.Mutex
	recs      map[string]*sandboxRecords
	watchers  map[string]map[chan Event]struct{}
}

// sandboxRecords are one sandbox's records, by id and in the order they
// were added (order may still name records since forgotten).
type sandboxRecords struct {
	byID  map[string]*Record
	order []*Record
}

// evictOne forgets the record added first among those that have ended.
func (m *sandboxRecords) evictOne() {
	for len(m.order) > 0 && m.byID[m.order[0].ID] != m.order[0] {
		m.order[0] = nil
		m.order = m.order[1:]
	}
	for i, r := range m.order {
		if m.byID[r.ID] != r || r.Snapshot().Running {
			continue // forgotten already (compact drops it), or running
		}
		delete(m.byID, r.ID)
		if i == 0 {
			m.order[0] = nil
			m.order = m.order[1:]
		}
		return
	}
}

// compact drops from order the records no longer kept.
func (m *sandboxRecords) compact() {
	kept := m.order[:0]
	for _, r := range m.order {
		if m.byID[r.ID] == r {
			kept = append(kept, r)
		}
	}
	clear(m.order[len(kept):])
	m.order = kept
}

// NewTable returns a table that forgets finished records after retention.
func NewTable(retention time.Duration) *Table {
	return &Table{retention: retention, recs: map[string]*sandboxRecords{}, watchers: map[string]map[chan Event]struct{}{}}
}

// Add adds a record. Beyond MaxRecords for its sandbox, the finished record
// added first is forgotten: commands mostly end in the order they start,
// so that is found at once.
func (t *Table) Add(r *Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.recs[r.SandboxID]
	if m == nil {
		m = &sandboxRecords{byID: map[string]*Record{}}
		t.recs[r.SandboxID] = m
	}
	if len(m.byID) >= MaxRecords {
		m.evictOne()
	}
	if len(m.order) >= 2*MaxRecords {
		m.compact()
	}
	m.byID[r.ID] = r
	m.order = append(m.order, r)
}

// Get returns a sandbox's record.
func (t *Table) Get(sandboxID, id string) (*Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r *Record
	if m := t.recs[sandboxID]; m != nil {
		r = m.byID[id]
	}
	if r == nil {
		return nil, ErrNotFound
	}
	return r, nil
}

// List returns a sandbox's records, oldest first.
func (t *Table) List(sandboxID string) []Snapshot {
	t.mu.Lock()
	var recs []*Record
	if m := t.recs[sandboxID]; m != nil {
		recs = make([]*Record, 0, len(m.byID))
		for _, r := range m.byID {
			recs = append(recs, r)
		}
	}
	t.mu.Unlock()
	out := make([]Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Snapshot())
	}
	slices.SortStableFunc(out, func(a, b Snapshot) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// Notify tells the sandbox's watchers about an event; a watcher that does
// not keep up misses it.
func (t *Table) Notify(sandboxID string, e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ch := range t.watchers[sandboxID] {
		select {
		case ch <- e:
		default:
		}
	}
}

// Watch returns a channel of the sandbox's events and a function to stop.
func (t *Table) Watch(sandboxID string) (<-chan Event, func()) {
	ch := make(chan Event, 64)
	t.mu.Lock()
	if t.watchers[sandboxID] == nil {
		t.watchers[sandboxID] = map[chan Event]struct{}{}
	}
	t.watchers[sandboxID][ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.watchers[sandboxID], ch)
		if len(t.watchers[sandboxID]) == 0 {
			delete(t.watchers, sandboxID)
		}
		t.mu.Unlock()
	}
}

// DropSandbox forgets a sandbox's records.
func (t *Table) DropSandbox(sandboxID string) {
	t.mu.Lock()
	delete(t.recs, sandboxID)
	t.mu.Unlock()
}

// Sweep forgets records that ended more than the retention ago.
func (t *Table) Sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sb, m := range t.recs {
		for id, r := range m.byID {
			s := r.Snapshot()
			if !s.Running && now.Sub(s.EndedAt) > t.retention {
				delete(m.byID, id)
			}
		}
		if len(m.byID) == 0 {
			delete(t.recs, sb)
			continue
		}
		m.compact()
	}
}
