package executor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/accounts"
)

// Snapshots keeps snapshots' archives and records: the workspace service.
type Snapshots interface {
	// Put stores a snapshot of account from its archive r, at most
	// maxBytes of it, and returns its record with size and hash.
	Put(ctx context.Context, account string, rec *workspacev1.SnapshotRecord, r io.Reader, maxBytes int64) (*workspacev1.SnapshotRecord, error)
	// Open returns a snapshot's record and archive, which the caller
	// closes.
	Open(ctx context.Context, account, id string) (*workspacev1.SnapshotRecord, io.ReadCloser, error)
	List(ctx context.Context, account string) ([]*workspacev1.SnapshotRecord, error)
	// Delete reports whether there was a snapshot to delete.
	Delete(ctx context.Context, account, id string) (bool, error)
}

// snapshotTimeout bounds the making or restoring of one snapshot
// (sandbox.Sandbox.Archive, Restore).
const snapshotTimeout = 30 * time.Minute

// needSnapshots is the refusal of an executor without snapshot storage.
func (s *Service) needSnapshots(field string) error {
	if s.snaps == nil {
		return errs.New(errs.FailedPrecondition, "%s: snapshots need the workspace service, which this executor is not connected to", field)
	}
	return nil
}

// Snapshot saves the writable state of account's sandbox id while it runs
// on: whatever its commands write meanwhile may or may not be in it.
func (s *Service) Snapshot(ctx context.Context, account, id, name string) (*workspacev1.SnapshotRecord, error) {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return nil, err
	}
	if err := s.needSnapshots("snapshot"); err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(name) > MaxNameChars || !utf8.ValidString(name) {
		return nil, errs.New(errs.InvalidArgument, "name: must be at most %d characters of UTF-8", MaxNameChars)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	snapID := "snap-" + hex.EncodeToString(b)
	room, limits, err := s.snapshotRoom(ctx, account)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	ar, err := e.sb.Archive(ctx)
	if err != nil {
		return nil, err
	}
	defer ar.Close()
	rec, err := s.snaps.Put(ctx, account, &workspacev1.SnapshotRecord{
		Id: snapID, Name: name, SandboxId: id, CreatedAt: timestamppb.Now(), Template: e.params.Template,
	}, ar, room)
	if err != nil {
		var failed *sandbox.ArchiveError
		if errors.As(err, &failed) {
			return nil, errs.New(errs.FailedPrecondition, "snapshot of %s: %s", id, failed.Msg)
		}
		return nil, err
	}
	if limits != nil {
		amounts := quotas.Usage{quotas.Snapshots: 1, quotas.SnapshotBytes: rec.GetSizeBytes()}
		if err := quotas.Claim(ctx, s.etcd, quotas.Snapshots, account, snapID, amounts, limits, nil); err != nil {
			_, _ = s.snaps.Delete(context.WithoutCancel(ctx), account, snapID)
			return nil, err
		}
	}
	s.log.Info("sandbox snapshot taken", "sandbox", id, "snapshot", snapID, "bytes", rec.GetSizeBytes())
	return rec, nil
}

// snapshotRoom checks that account may keep one more snapshot and
// returns the bytes its snapshots may still grow by, with its quotas (nil
// when nothing is counted).
func (s *Service) snapshotRoom(ctx context.Context, account string) (int64, quotas.Limits, error) {
	if s.quota == nil {
		return 1 << 62, nil, nil
	}
	limits, err := accounts.Limits(ctx, s.etcd, s.quota, account)
	if err != nil {
		return 0, nil, err
	}
	if err := quotas.Check(ctx, s.etcd, quotas.Snapshots, account, quotas.Usage{quotas.Snapshots: 1}, limits); err != nil {
		return 0, nil, err
	}
	used, _, err := quotas.Read(ctx, s.etcd, quotas.Snapshots, account)
	if err != nil {
		return 0, nil, err
	}
	room := limits[quotas.SnapshotBytes] - used[quotas.SnapshotBytes]
	if room <= 0 {
		return 0, nil, quotas.Exceeded(quotas.SnapshotBytes, used[quotas.SnapshotBytes], limits[quotas.SnapshotBytes])
	}
	return room, limits, nil
}

// restore fills a new sandbox with snapshot id's archive.
func (s *Service) restore(ctx context.Context, e *entry, account, id string) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	_, rc, err := s.snaps.Open(ctx, account, id)
	if err != nil {
		return err
	}
	defer rc.Close()
	return s.extract(ctx, e, rc, "snapshot "+id)
}

// extract restores the archive r (what names it in errors) into e's
// sandbox.
func (s *Service) extract(ctx context.Context, e *entry, r io.Reader, what string) error {
	err := e.sb.Restore(ctx, r)
	var failed *sandbox.ArchiveError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errs.New(errs.DeadlineExceeded, "restoring %s took longer than %v", what, snapshotTimeout)
	case errors.As(err, &failed) && failed.Restore:
		return errs.New(errs.FailedPrecondition, "restoring %s failed: %s", what, failed.Msg)
	case errors.As(err, &failed):
		// The archive failed first: the restoring tar's complaint is
		// only its end.
		return errs.New(errs.FailedPrecondition, "%s: %s", what, failed.Msg)
	}
	return fmt.Errorf("executor: restore %s: %w", what, err)
}

// MaxForks bounds the copies one fork makes.
const MaxForks = 16

// Fork makes count copies of account's sandbox id on this executor, each
// with its files, its settings and labels, not its conversation; the
// source runs on. A copy failing fails the fork, and no copy is kept.
func (s *Service) Fork(ctx context.Context, account, id string, count int) ([]*entry, []string, error) {
	src, err := s.lookup(ctx, account, id)
	if err != nil {
		return nil, nil, err
	}
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxForks {
		return nil, nil, errs.New(errs.InvalidArgument, "count: must be 1 to %d, got %d", MaxForks, count)
	}
	if src.persistent {
		return nil, nil, errs.New(errs.InvalidArgument, "sandbox %s mounts a persistent workspace, which its copies would share; snapshot it instead", id)
	}
	return s.copies(ctx, account, id, src, count, func(p *CreateParams) { p.Session = "" })
}

// copies makes count sandboxes with src's CreateParams, as edit changes
// them, and src's files: copy-on-write snapshots of src's when the
// runtime keeps sandboxes on btrfs storage, else one archive of src
// streamed from its tar into every copy's, never stored. It keeps every
// copy or none.
func (s *Service) copies(ctx context.Context, account, id string, src *entry, count int, edit func(*CreateParams)) ([]*entry, []string, error) {
	p := src.params
	p.Snapshot = ""
	edit(&p)
	if s.rt.CopyOnWrite() {
		p.from = src.sb
	}
	entries, ids := make([]*entry, 0, count), make([]string, 0, count)
	done := false
	defer func() {
		if !done {
			for _, cid := range ids {
				_ = s.destroy(context.WithoutCancel(ctx), cid)
			}
		}
	}()
	for range count {
		e, cid, err := s.Create(ctx, account, p)
		if err != nil {
			return nil, nil, err
		}
		entries, ids = append(entries, e), append(ids, cid)
	}
	if p.from != nil {
		done = true
		s.log.Info("sandbox copied", "sandbox", id, "copies", ids, "copy_on_write", true)
		return entries, ids, nil
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	ar, err := src.sb.Archive(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ar.Close()
	writers := make([]io.Writer, len(entries))
	pipes := make([]*io.PipeWriter, len(entries))
	errc := make(chan error, len(entries))
	for i, e := range entries {
		pr, pw := io.Pipe()
		writers[i], pipes[i] = pw, pw
		go func() {
			err := s.extract(ctx, e, pr, "the copy of "+id)
			// A copy that failed stops the others' stream too.
			pr.CloseWithError(cmp.Or(err, errors.New("the copy ended early")))
			errc <- err
		}()
	}
	_, copyErr := io.Copy(io.MultiWriter(writers...), ar)
	for _, pw := range pipes {
		pw.CloseWithError(copyErr)
	}
	var first error
	for range entries {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, nil, first
	}
	done = true
	s.log.Info("sandbox copied", "sandbox", id, "copies", ids)
	return entries, ids, nil
}

// ListSnapshots returns account's snapshots, newest first.
func (s *Service) ListSnapshots(ctx context.Context, account string) ([]*workspacev1.SnapshotRecord, error) {
	if err := s.needSnapshots("snapshots"); err != nil {
		return nil, err
	}
	return s.snaps.List(ctx, account)
}

// GetSnapshot returns one of account's snapshots.
func (s *Service) GetSnapshot(ctx context.Context, account, id string) (*workspacev1.SnapshotRecord, error) {
	if err := s.needSnapshots("snapshot"); err != nil {
		return nil, err
	}
	rec, rc, err := s.snaps.Open(ctx, account, id)
	if err != nil {
		return nil, err
	}
	rc.Close()
	return rec, nil
}

// DeleteSnapshot deletes one of account's snapshots and frees its quota.
func (s *Service) DeleteSnapshot(ctx context.Context, account, id string) error {
	if err := s.needSnapshots("snapshot"); err != nil {
		return err
	}
	deleted, err := s.snaps.Delete(ctx, account, id)
	if err != nil {
		return err
	}
	if !deleted {
		return errs.New(errs.NotFound, "snapshot %q not found", id)
	}
	return quotas.Release(ctx, s.etcd, quotas.Snapshots, account, id)
}
