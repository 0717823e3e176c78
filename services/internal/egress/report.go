package egress

import "unicode/utf8"

// Bounds of what a command, and a completion, report of its sandbox's
// connections one by one (THREATS 30: the record holds every connection,
// or says exactly how many it left out). Every allowed connection is kept
// up to MaxAllowedReported, and the first MaxOtherReported of those
// refused, failed or limited, so that no flood of refusals pushes a
// delivery out of the record. A connection reported keeps at most
// MaxHostReported bytes of its host and MaxReasonReported of its reason:
// a full report is some 300 KiB, well within a gRPC message (4 MiB) and an
// etcd request (1.5 MiB) (THREATS D.25).
const (
	MaxAllowedReported = 256
	MaxOtherReported   = 64
	MaxHostReported    = 256
	MaxReasonReported  = 512
)

// Report is what a run reports of its connections: each one kept within
// the bounds above, in the order added, and the exact count of those left
// out. Its zero value is an empty report.
type Report[T any] struct {
	kept           []T
	allowed, other int
	omitted        int
}

// Add reports c, an allowed connection or not; it is kept unless its
// kind already has all the report keeps, and counted as left out then.
func (r *Report[T]) Add(c T, allowed bool) {
	n, most := &r.other, MaxOtherReported
	if allowed {
		n, most = &r.allowed, MaxAllowedReported
	}
	if *n >= most {
		r.omitted++
		return
	}
	*n++
	r.kept = append(r.kept, c)
}

// Omit counts n connections that an earlier report left out.
func (r *Report[T]) Omit(n int) { r.omitted += max(n, 0) }

// Kept is the connections kept, in the order added.
func (r *Report[T]) Kept() []T { return r.kept }

// Omitted is how many connections were reported and not kept.
func (r *Report[T]) Omitted() int { return r.omitted }

// Clip returns s cut to at most n bytes at a character boundary, its end
// marked with "…" when cut.
func Clip(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	if n < len(mark) {
		return ""
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
