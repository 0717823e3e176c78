package skills

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/sweep"
)

const (
	// SweepEvery is how often Run sweeps.
	SweepEvery = 10 * time.Minute
	// sweepGrace is how old an archive no record names must be to be
	// removed: far longer than storing one takes before its record is
	// written.
	sweepGrace = time.Hour
)

// Run sweeps every SweepEvery, give or take a tenth, until ctx ends. Every
// router may run it: a sweep removes only archives no record names.
func (s *Store) Run(ctx context.Context) {
	sweep.Every(ctx, SweepEvery, s.opts.Logger, "skill archives", s.Sweep)
}

// Sweep removes the archives no record names that are older than
// sweepGrace: those a router stored and then failed to record, or whose
// removal after a delete failed. It returns how many it removed.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	removed := 0
	for acct, err := range s.opts.Objects.List(ctx, objectsPrefix, false) {
		if err != nil {
			return removed, err
		}
		if !acct.Prefix {
			continue
		}
		account, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(acct.Key, objectsPrefix), "/"))
		if err != nil {
			continue
		}
		// The records are read before the archives are listed: an
		// archive recorded after this read is younger than the grace.
		list, err := s.List(ctx, account)
		if err != nil {
			return removed, err
		}
		named := map[string]bool{}
		for _, sk := range list {
			for _, v := range sk.Versions {
				named[v.Object] = true
			}
		}
		var gone []string
		for obj, err := range s.opts.Objects.List(ctx, acct.Key, true) {
			if err != nil {
				return removed, err
			}
			if obj.IsDir() || named[obj.Key] || s.now().Sub(obj.ModTime) < sweepGrace {
				continue
			}
			gone = append(gone, obj.Key)
		}
		if len(gone) == 0 {
			continue
		}
		if err := s.opts.Objects.Delete(ctx, gone); err != nil {
			return removed, err
		}
		removed += len(gone)
	}
	return removed, nil
}
