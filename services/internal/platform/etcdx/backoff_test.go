package etcdx

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBackoff(t *testing.T) {
	const ms = time.Millisecond
	highest := func(n int64) int64 { return n - 1 }
	lowest := func(int64) int64 { return 0 }
	tests := []struct {
		name  string
		rand  func(int64) int64
		steps string // f: a failure, recording its pause; s: a success
		want  []time.Duration
	}{
		{"doubles", highest, "fff", []time.Duration{200 * ms, 400 * ms, 800 * ms}},
		{"stops at the maximum", highest, "ffffffff", []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10000 * ms, 10000 * ms}},
		{"starts over after a success", highest, "ffsff", []time.Duration{200 * ms, 400 * ms, 200 * ms, 400 * ms}},
		{"a success before any failure changes nothing", highest, "sf", []time.Duration{200 * ms}},
		{"jitter takes at most half", lowest, "fff", []time.Duration{100 * ms, 200 * ms, 400 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := backoff{min: minRetry, max: maxRetry, rand: tt.rand}
			var got []time.Duration
			for _, s := range tt.steps {
				if s == 's' {
					b.reset()
					continue
				}
				got = append(got, b.next())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pauses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoffJitters(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	for range 100 {
		b := backoff{min: minRetry, max: maxRetry, rand: rand.Int64N}
		got = append(got, b.next())
	}
	for _, d := range got {
		if d < minRetry/2 || d > minRetry {
			t.Fatalf("first pause %v, want it within [%v, %v]", d, minRetry/2, minRetry)
		}
	}
	slices.Sort(got)
	if len(slices.Compact(got)) < 2 {
		t.Errorf("100 first pauses were all %v, want them spread", got[0])
	}
}
