// Package sweep runs a store's sweep of what no record holds any more:
// on every replica (removing garbage twice is harmless), spread out in
// time.
package sweep

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Every calls sweep every period, give or take a tenth so that replicas
// spread out, until ctx ends, and logs how many things each call removed
// or why it failed; what names them ("stored responses").
func Every(ctx context.Context, period time.Duration, log *slog.Logger, what string, sweep func(context.Context) (int, error)) {
	for {
		wait := period + time.Duration(rand.Int64N(int64(period/5))) - period/10
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := sweep(ctx)
		switch {
		case err != nil:
			log.WarnContext(ctx, "sweep of "+what, "removed", n, "error", err)
		case n > 0:
			log.InfoContext(ctx, "swept "+what, "removed", n)
		}
	}
}
