package files

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Garbage collection of staged uploads that a crash left unpublished.
const (
	// StaleStaged is how old unpublished staged content must be before it
	// is collected: far longer than any flush or upload takes.
	StaleStaged = time.Hour
	// collectEvery is the period of collection, jittered so that replicas
	// spread out.
	collectEvery = 15 * time.Minute
)

// Run collects stale staged content at once, then every so often until
// ctx ends. Every replica may run it: removing garbage twice is harmless.
// The first sweep at start-up removes what a crash of this or another
// replica left, rather than keep it for another period.
func (s *Service) Run(ctx context.Context) error {
	log := slog.Default()
	for wait := time.Duration(0); ; wait = collectEvery/2 + rand.N(collectEvery) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		n, err := s.store.Collect(ctx, StaleStaged)
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "collecting stale uploads failed", "error", err)
		case n > 0:
			log.InfoContext(ctx, "collected stale uploads", "removed", n)
		}
	}
}
