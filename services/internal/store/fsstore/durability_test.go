package fsstore

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/internal/store"
)

// syncs records the directories a store syncs, and fails the syncs of
// those fail names.
type syncs struct {
	mu     sync.Mutex
	synced []string
	fail   map[string]bool
}

var errSync = errors.New("injected: sync failed")

func (s *syncs) sync(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = append(s.synced, dir)
	if s.fail[dir] {
		return errSync
	}
	return syncDir(dir)
}

func (s *syncs) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.synced
	s.synced = nil
	return out
}

// Every directory a store creates is synced into its parent, and the
// directory an object is renamed into is synced after the rename: a Put
// that returned survives a crash.
func TestNewDirectoriesAreSynced(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "data", "store")
	rec := &syncs{}
	s, err := newStore(dir, rec.sync)
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "objects")
	rel := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			r, err := filepath.Rel(base, p)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = r
		}
		return out
	}
	// New created data, data/store, its objects and tmp.
	if diff := cmp.Diff([]string{".", "data", "data/store", "data/store"}, rel(rec.take())); diff != "" {
		t.Fatalf("New synced (-want +got):\n%s", diff)
	}
	ctx := t.Context()
	for _, tc := range []struct {
		key  string
		want []string
	}{
		// Two new directories, each synced into its parent, then the one
		// the file is renamed into.
		{"ws/a/one", []string{obj, filepath.Join(obj, "d.ws"), filepath.Join(obj, "d.ws", "d.a")}},
		// The directories exist: only the rename is synced.
		{"ws/a/two", []string{filepath.Join(obj, "d.ws", "d.a")}},
		// A directory marker.
		{"ws/b/", []string{filepath.Join(obj, "d.ws"), filepath.Join(obj, "d.ws", "d.b")}},
		// A segment too long for its prefix, in "+f".
		{"ws/" + strings.Repeat("x", 254), []string{filepath.Join(obj, "d.ws"), filepath.Join(obj, "d.ws", "+f")}},
	} {
		if _, err := s.Put(ctx, tc.key, nil, store.PutOptions{Size: 0}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, rec.take()); diff != "" {
			t.Errorf("put %s synced (-want +got):\n%s", tc.key, diff)
		}
	}
	// A staged upload published.
	st, err := s.Stage(ctx, "ws/c/staged", strings.NewReader("x"), store.PutOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	if _, err := s.Publish(ctx, st, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(obj, "d.ws"), filepath.Join(obj, "d.ws", "d.c")}, rec.take()); diff != "" {
		t.Errorf("publish synced (-want +got):\n%s", diff)
	}
}

// A directory sync that fails fails the call that needed it.
func TestDirectorySyncErrorsAreReturned(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// fail is the directory whose sync fails, relative to the
		// store's directory.
		fail string
		// put is the key put, or "" when New itself fails; stage puts
		// it with Stage and Publish.
		put   string
		stage bool
		// existing puts another key first, so that put creates no
		// directory and its only sync is its rename's.
		existing bool
	}{
		{name: "new: the store's directory", fail: "."},
		{name: "put: a new directory's parent", fail: "objects", put: "ws/f"},
		{name: "put: a new directory's parent, deeper", fail: "objects/d.ws", put: "ws/a/f"},
		{name: "put: after the rename", fail: "objects/d.ws", put: "ws/f", existing: true},
		{name: "put: a marker after the rename", fail: "objects/d.ws/d.m", put: "ws/m/"},
		{name: "publish: a new directory's parent", fail: "objects", put: "ws/f", stage: true},
		{name: "publish: after the rename", fail: "objects/d.ws", put: "ws/f", stage: true, existing: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			rec := &syncs{fail: map[string]bool{}}
			if tc.put == "" {
				rec.fail[filepath.Join(dir, tc.fail)] = true
				if _, err := newStore(dir, rec.sync); !errors.Is(err, errSync) {
					t.Fatalf("New = %v, want %v", err, errSync)
				}
				return
			}
			s, err := newStore(dir, rec.sync)
			if err != nil {
				t.Fatal(err)
			}
			if tc.existing {
				if _, err := s.Put(t.Context(), "ws/other", nil, store.PutOptions{Size: -1}); err != nil {
					t.Fatal(err)
				}
			}
			rec.fail[filepath.Join(dir, tc.fail)] = true
			if tc.stage {
				st, err := s.Stage(t.Context(), tc.put, strings.NewReader("x"), store.PutOptions{Size: 1})
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.Publish(t.Context(), st, store.PutOptions{})
				if !errors.Is(err, errSync) {
					t.Fatalf("publish = %v, want %v", err, errSync)
				}
			} else if _, err := s.Put(t.Context(), tc.put, nil, store.PutOptions{Size: 0}); !errors.Is(err, errSync) {
				t.Fatalf("put = %v, want %v", err, errSync)
			}
			if !slices.Contains(rec.take(), filepath.Join(dir, tc.fail)) {
				t.Fatalf("%s was not synced", tc.fail)
			}
		})
	}
}
