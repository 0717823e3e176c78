package sandbox

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

func TestQuietDelay(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	ms := time.Millisecond
	tests := []struct {
		name        string
		now, last   time.Time
		since, want time.Duration // since and last as offsets from t0
	}{
		{"never marked", t0, time.Time{}, 0, -time.Duration(1)},
		{"marked just now", t0, t0, 0, quietFor},
		{"marked a while ago", t0.Add(4 * ms), t0, 0, quietFor - 4*ms},
		{"quiet long enough", t0.Add(quietFor), t0, 0, 0},
		{"busy, waited almost the most", t0.Add(quietMaxWait - ms), t0.Add(quietMaxWait - ms), 0, ms},
		{"busy, waited the most", t0.Add(quietMaxWait), t0.Add(quietMaxWait), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := quietDelay(tt.now, tt.last, t0.Add(tt.since))
			if tt.want < 0 {
				if got > 0 {
					t.Fatalf("quietDelay = %v, want none", got)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("quietDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSparesRefillWhileBusy checks that spares are made again under a
// load that never pauses: the one taken last at once, the others by
// quietMaxWait.
func TestSparesRefillWhileBusy(t *testing.T) {
	var q quiet
	made := 0
	sp := newSpares(&spares[int]{
		what: "int", size: 2, quiet: &q, log: slog.New(slog.DiscardHandler),
		make:    func(context.Context) (int, error) { made++; return made, nil },
		dead:    func(int) bool { return false },
		discard: func(int) {},
	})
	defer sp.close()
	waitSpares(t, sp, 2)
	busy, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(busy)
		for {
			select {
			case <-stop:
				return
			default:
				q.mark()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	defer func() { close(stop); <-busy }()
	for range 3 {
		for range 2 {
			if _, ok := sp.take(); !ok {
				t.Fatal("no spare ready")
			}
		}
		waitSpares(t, sp, 2)
	}
}
