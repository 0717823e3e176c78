// Package snapshots keeps sandboxes' snapshots in the object store, per
// account: each an archive of the sandbox's writable state, which the
// executor makes and restores inside the sandbox, and a record.
//
// Layout: "accounts/<account>/snapshots/<id>/archive.tar" and, beside it,
// "record.json". The archive is staged while it streams in and published
// once whole; the record is written last, so that a snapshot is found only
// whole. A snapshot is deleted record first. What a crash leaves between
// the two (an archive without a record) is removed by the next listing of
// its account, once older than the longest upload could take.
package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store"
)

// MaxNameChars bounds a snapshot's name.
const MaxNameChars = 256

// orphanAge is how old an archive without a record must be before a
// listing removes it: longer than any upload runs.
const orphanAge = 6 * time.Hour

const (
	archiveName = "archive.tar"
	recordName  = "record.json"
)

// idPattern is the shape of a snapshot's id.
var idPattern = regexp.MustCompile(`^snap-[0-9a-f]{32}$`)

// Record describes a snapshot.
type Record struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	Size      int64     `json:"size_bytes"`
	SHA256    string    `json:"sha256"`
	Created   time.Time `json:"created_at"`
	Template  string    `json:"template,omitempty"`
}

// Store keeps snapshots in an object store.
type Store struct {
	st store.Store
}

// New returns the snapshots kept in st.
func New(st store.Store) *Store { return &Store{st: st} }

// ValidID reports whether id is a snapshot's id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// NotFound is the error of a snapshot that is not the account's.
func NotFound(id string) error {
	return errs.New(errs.NotFound, "snapshot %q not found", truncate(id))
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func dir(account, id string) (string, error) {
	if !tenant.ValidUserID(account) {
		return "", errs.New(errs.Unauthenticated, "no valid account in the call")
	}
	if !ValidID(id) {
		return "", NotFound(id)
	}
	return prefix(account) + id + "/", nil
}

func prefix(account string) string { return "accounts/" + account + "/snapshots/" }

// Put stores a snapshot of account whose archive r holds, at most maxBytes
// of it: more is refused with ResourceExhausted and nothing is kept. rec's
// size and hash are set from what was stored.
func (s *Store) Put(ctx context.Context, account string, rec Record, r io.Reader, maxBytes int64) (Record, error) {
	d, err := dir(account, rec.ID)
	if err != nil {
		return Record{}, errs.New(errs.InvalidArgument, "snapshot id: must be snap- and 32 hexadecimal digits")
	}
	if utf8.RuneCountInString(rec.Name) > MaxNameChars || !utf8.ValidString(rec.Name) {
		return Record{}, errs.New(errs.InvalidArgument, "name: at most %d characters of UTF-8", MaxNameChars)
	}
	if _, err := s.st.Stat(ctx, d+recordName); err == nil {
		return Record{}, errs.New(errs.AlreadyExists, "snapshot %s exists", rec.ID)
	}
	cr := &counted{r: r, max: maxBytes}
	staged, err := s.st.Stage(ctx, d+archiveName, cr, store.PutOptions{Size: -1, Mode: 0o600, ModTime: rec.Created})
	if cr.over {
		if err == nil {
			_ = s.st.Discard(ctx, staged)
		}
		return Record{}, errs.New(errs.ResourceExhausted, "snapshot is larger than the %d bytes the account's snapshot quota leaves", maxBytes)
	}
	if err != nil {
		return Record{}, fmt.Errorf("snapshots: stage archive: %w", err)
	}
	rec.Size, rec.SHA256 = staged.Size, staged.SHA256
	if _, err := s.st.Publish(ctx, staged, store.PutOptions{Mode: 0o600, ModTime: rec.Created}); err != nil {
		_ = s.st.Discard(ctx, staged)
		return Record{}, fmt.Errorf("snapshots: publish archive: %w", err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return Record{}, err
	}
	if _, err := s.st.Put(ctx, d+recordName, strings.NewReader(string(b)), store.PutOptions{Size: int64(len(b)), Mode: 0o600, ModTime: rec.Created}); err != nil {
		_ = s.st.Delete(context.WithoutCancel(ctx), []string{d + archiveName})
		return Record{}, fmt.Errorf("snapshots: write record: %w", err)
	}
	return rec, nil
}

// counted counts what it reads, refusing more than max bytes.
type counted struct {
	r    io.Reader
	n    int64
	max  int64
	over bool
}

var errTooLarge = errors.New("snapshots: archive too large")

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.over = true
		return n, errTooLarge
	}
	return n, err
}

// Get returns a snapshot's record.
func (s *Store) Get(ctx context.Context, account, id string) (Record, error) {
	d, err := dir(account, id)
	if err != nil {
		return Record{}, err
	}
	return s.record(ctx, d, id)
}

func (s *Store) record(ctx context.Context, d, id string) (Record, error) {
	rc, _, err := s.st.Get(ctx, d+recordName)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, NotFound(id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("snapshots: read record: %w", err)
	}
	defer rc.Close()
	var rec Record
	if err := json.NewDecoder(io.LimitReader(rc, 64<<10)).Decode(&rec); err != nil || rec.ID != id {
		return Record{}, fmt.Errorf("snapshots: record of %s is damaged", id)
	}
	return rec, nil
}

// Open returns a snapshot's record and its archive, which the caller
// closes.
func (s *Store) Open(ctx context.Context, account, id string) (Record, io.ReadCloser, error) {
	rec, err := s.Get(ctx, account, id)
	if err != nil {
		return Record{}, nil, err
	}
	d, _ := dir(account, id)
	rc, info, err := s.st.Get(ctx, d+archiveName)
	if err != nil {
		return Record{}, nil, fmt.Errorf("snapshots: open archive of %s: %w", id, err)
	}
	if info.Size != rec.Size {
		rc.Close()
		return Record{}, nil, fmt.Errorf("snapshots: archive of %s is %d bytes, its record says %d", id, info.Size, rec.Size)
	}
	return rec, rc, nil
}

// List returns account's snapshots, newest first, and removes archives a
// crash left without a record.
func (s *Store) List(ctx context.Context, account string) ([]Record, error) {
	if !tenant.ValidUserID(account) {
		return nil, errs.New(errs.Unauthenticated, "no valid account in the call")
	}
	records := map[string]bool{}
	archives := map[string]store.Info{}
	for info, err := range s.st.List(ctx, prefix(account), true) {
		if err != nil {
			return nil, fmt.Errorf("snapshots: list: %w", err)
		}
		id, name, ok := strings.Cut(strings.TrimPrefix(info.Key, prefix(account)), "/")
		if !ok || !ValidID(id) {
			continue
		}
		switch name {
		case recordName:
			records[id] = true
		case archiveName:
			archives[id] = info
		}
	}
	var orphans []string
	for id, info := range archives {
		if !records[id] && time.Since(info.ModTime) > orphanAge {
			orphans = append(orphans, prefix(account)+id+"/"+archiveName)
		}
	}
	if len(orphans) > 0 {
		_ = s.st.Delete(ctx, orphans)
	}
	out := make([]Record, 0, len(records))
	for id := range records {
		rec, err := s.record(ctx, prefix(account)+id+"/", id)
		if errs.KindOf(err) == errs.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Delete deletes a snapshot, record first; it reports whether there was
// one.
func (s *Store) Delete(ctx context.Context, account, id string) (bool, error) {
	d, err := dir(account, id)
	if err != nil {
		return false, err
	}
	if _, err := s.st.Stat(ctx, d+recordName); errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err := s.st.Delete(ctx, []string{d + recordName}); err != nil {
		return false, fmt.Errorf("snapshots: delete record: %w", err)
	}
	if err := s.st.Delete(ctx, []string{d + archiveName}); err != nil {
		return true, fmt.Errorf("snapshots: delete archive: %w", err)
	}
	return true, nil
}
