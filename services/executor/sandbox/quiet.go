package sandbox

import (
	"sync/atomic"
	"time"
)

// Spares wait for a quiet moment. Making a warm sandbox or a launch costs
// a few milliseconds of CPU (bubblewrap, its namespaces and mounts, the
// agent's start); made the moment a spare is taken, that work lands on a
// small host's cores at once with the command run next in the sandbox just
// taken. So while another spare is still ready for the next caller, the
// next is made only once no sandbox has been taken and no command started
// or ended for quietFor, and at the latest quietMaxWait after the last was
// made or the wait began: a pool refills later under load, never not at
// all. When none is ready, one is made at once.
const (
	quietFor     = 10 * time.Millisecond
	quietMaxWait = 100 * time.Millisecond
)

// quiet marks when the runtime last did work a caller waits for.
type quiet struct {
	last atomic.Int64 // unix nanoseconds of the last mark; 0 before any
}

// mark records work a caller waits for: a sandbox taken, a command started
// or ended.
func (q *quiet) mark() { q.last.Store(time.Now().UnixNano()) }

// delay is how much longer a spare that began waiting at since waits at
// now; zero or less means none.
func (q *quiet) delay(now, since time.Time) time.Duration {
	return quietDelay(now, time.Unix(0, q.last.Load()), since)
}

// quietDelay is delay with the last mark at last.
func quietDelay(now, last, since time.Time) time.Duration {
	return min(last.Add(quietFor).Sub(now), since.Add(quietMaxWait).Sub(now))
}
