package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// A paused sandbox is a snapshot of its files and the request it was
// created with, kept in etcd under its account with no lease, so that it
// outlives its executor: no process runs and no executor holds it. A
// command to it, or a resume, builds it again, with the same id and
// settings, on whichever executor the call reaches, and restores the
// snapshot, which is then deleted.
//
// What must not be stored in etcd is refused: egress secrets (a sandbox
// holds their values, which are stored sealed only by the router) and
// skills' files (up to megabytes); so is a persistent workspace, already
// saved on its own.
const (
	pausedPrefix = "conch/executor/paused/"
	// maxPausedRequest bounds the request a paused sandbox keeps in etcd.
	maxPausedRequest = 64 << 10
)

func pausedKey(account, id string) string { return pausedPrefix + account + "/" + id }

// paused is a paused sandbox's record.
type paused struct {
	Snapshot string    `json:"snapshot"`
	Request  []byte    `json:"request"` // CreateSandboxRequest, proto
	Created  time.Time `json:"created"`
	PausedAt time.Time `json:"paused_at"`
	// Expires is the end of its lifetime, zero for none: a paused
	// sandbox past it is deleted.
	Expires time.Time `json:"expires,omitzero"`
}

// pausedSweep is how often an executor deletes the paused sandboxes past
// their lifetime (every executor does; one transaction wins each).
const pausedSweep = time.Minute

// pauseIdle pauses the idle sandbox id if it asked for that and can be;
// it reports whether it was.
func (s *Service) pauseIdle(ctx context.Context, id string) bool {
	s.mu.Lock()
	e := s.sandboxes[id]
	s.mu.Unlock()
	if e == nil || !e.params.PauseWhenIdle {
		return false
	}
	if _, err := s.Pause(ctx, e.account, id); err != nil {
		s.log.Warn("idle sandbox not paused; ending it", "sandbox", id, "error", err)
		return false
	}
	return true
}

// endPaused deletes the paused sandboxes past their lifetime, with their
// snapshots.
func (s *Service) endPaused(ctx context.Context, now time.Time) {
	resp, err := s.etcd.Get(ctx, pausedPrefix, clientv3.WithPrefix())
	if err != nil {
		s.log.Warn("paused sandboxes not swept", "error", err)
		return
	}
	for _, kv := range resp.Kvs {
		var p paused
		if json.Unmarshal(kv.Value, &p) != nil || p.Expires.IsZero() || now.Before(p.Expires) {
			continue
		}
		account, id, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), pausedPrefix), "/")
		if !ok {
			continue
		}
		if _, err := s.destroyPaused(ctx, account, id); err != nil {
			s.log.Warn("paused sandbox past its lifetime not deleted", "sandbox", id, "error", err)
			continue
		}
		s.log.Info("paused sandbox deleted", "sandbox", id, "reason", "ttl")
	}
}

// Pause saves account's sandbox id and ends it.
func (s *Service) Pause(ctx context.Context, account, id string) (*executorv1.Sandbox, error) {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		if p, _, perr := s.pausedRecord(ctx, account, id); perr == nil && p != nil {
			return pausedPB(id, p)
		}
		return nil, err
	}
	if err := s.needSnapshots("pause"); err != nil {
		return nil, err
	}
	req := e.params.Request
	switch {
	case req == nil:
		return nil, errs.New(errs.FailedPrecondition, "sandbox %s cannot be paused: this executor did not keep how it was made", id)
	case e.persistent:
		return nil, errs.New(errs.InvalidArgument, "sandbox %s mounts a persistent workspace, which is saved on its own: delete the sandbox and create it again instead", id)
	case len(req.GetNetwork().GetSecrets()) > 0:
		return nil, errs.New(errs.InvalidArgument, "sandbox %s holds egress secrets, which are not kept while paused", id)
	case len(req.GetSkills()) > 0:
		return nil, errs.New(errs.InvalidArgument, "sandbox %s mounts skills, which are not kept while paused", id)
	}
	keep := proto.Clone(req).(*executorv1.CreateSandboxRequest)
	keep.Snapshot, keep.Session = "", ""
	b, err := proto.Marshal(keep)
	if err != nil {
		return nil, err
	}
	if len(b) > maxPausedRequest {
		return nil, errs.New(errs.InvalidArgument, "sandbox %s was made with a request of %d bytes, more than the %d a paused sandbox keeps", id, len(b), maxPausedRequest)
	}
	rec, err := s.Snapshot(ctx, account, id, "paused "+id)
	if err != nil {
		return nil, err
	}
	p := &paused{Snapshot: rec.GetId(), Request: b, Created: e.created, PausedAt: time.Now().UTC(), Expires: e.expiresAt()}
	v, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if _, err := s.etcd.Put(ctx, pausedKey(account, id), string(v)); err != nil {
		_ = s.DeleteSnapshot(context.WithoutCancel(ctx), account, rec.GetId())
		return nil, fmt.Errorf("executor: record paused sandbox %s: %w", id, err)
	}
	if err := s.destroy(ctx, id); err != nil {
		s.log.Warn("paused sandbox not torn down", "sandbox", id, "error", err)
	}
	s.log.Info("sandbox paused", "sandbox", id, "snapshot", rec.GetId())
	return pausedPB(id, p)
}

// pausedRecord returns account's paused sandbox id, with its record's
// revision, or nil.
func (s *Service) pausedRecord(ctx context.Context, account, id string) (*paused, int64, error) {
	if !tenant.ValidUserID(account) || id == "" || strings.ContainsAny(id, "/\x00") || len(id) > 128 {
		return nil, 0, nil
	}
	resp, err := s.etcd.Get(ctx, pausedKey(account, id))
	if err != nil {
		return nil, 0, errs.Wrap(errs.Unavailable, err, "reading paused sandbox %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var p paused
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return nil, 0, fmt.Errorf("executor: paused sandbox %s: %w", id, err)
	}
	return &p, resp.Kvs[0].ModRevision, nil
}

// Resume brings account's paused sandbox id back on this executor.
func (s *Service) Resume(ctx context.Context, account, id string) (*entry, error) {
	e, err := s.lookup(ctx, account, id)
	if errs.KindOf(err) != errs.NotFound {
		return e, err // running already, or on another executor
	}
	p, rev, err := s.pausedRecord(ctx, account, id)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errs.New(errs.NotFound, "sandbox %q not found", id)
	}
	req := &executorv1.CreateSandboxRequest{}
	if err := proto.Unmarshal(p.Request, req); err != nil {
		return nil, fmt.Errorf("executor: paused sandbox %s: %w", id, err)
	}
	params, err := paramsFrom(req, s.ceil)
	if err != nil {
		return nil, errs.Wrap(errs.FailedPrecondition, err, "sandbox %s cannot resume under today's ceilings", id)
	}
	// One resume wins: the record goes only if no other took it first.
	key := pausedKey(account, id)
	txn, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "resuming sandbox %s", id)
	}
	if !txn.Succeeded {
		return nil, errs.New(errs.Unavailable, "sandbox %s is being resumed; retry", id)
	}
	params.ID, params.Created, params.Snapshot = id, p.Created, p.Snapshot
	e, _, err = s.Create(ctx, account, params)
	if err != nil {
		// Still paused: the record goes back as it was.
		if _, perr := s.etcd.Put(context.WithoutCancel(ctx), key, mustJSON(p)); perr != nil {
			s.log.Error("paused sandbox lost its record after a failed resume", "sandbox", id, "snapshot", p.Snapshot, "error", perr)
		}
		return nil, err
	}
	e.snapshot = ""
	if err := s.DeleteSnapshot(context.WithoutCancel(ctx), account, p.Snapshot); err != nil {
		s.log.Warn("snapshot of a resumed sandbox not deleted", "sandbox", id, "snapshot", p.Snapshot, "error", err)
	}
	s.log.Info("sandbox resumed", "sandbox", id)
	return e, nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// listPaused returns account's paused sandboxes, of user if not empty.
func (s *Service) listPaused(ctx context.Context, account, user string) (map[string]*executorv1.Sandbox, error) {
	out := map[string]*executorv1.Sandbox{}
	if !tenant.ValidUserID(account) {
		return out, nil
	}
	resp, err := s.etcd.Get(ctx, pausedPrefix+account+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "listing paused sandboxes")
	}
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), pausedPrefix+account+"/")
		var p paused
		if json.Unmarshal(kv.Value, &p) != nil {
			continue
		}
		sb, err := pausedPB(id, &p)
		if err != nil || (user != "" && sb.GetUser() != user) {
			continue
		}
		out[id] = sb
	}
	return out, nil
}

// destroyPaused deletes account's paused sandbox id and its snapshot; it
// reports whether there was one.
func (s *Service) destroyPaused(ctx context.Context, account, id string) (bool, error) {
	p, rev, err := s.pausedRecord(ctx, account, id)
	if err != nil || p == nil {
		return false, err
	}
	key := pausedKey(account, id)
	txn, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, errs.Wrap(errs.Unavailable, err, "deleting paused sandbox %s", id)
	}
	if !txn.Succeeded {
		return false, errs.New(errs.Unavailable, "sandbox %s is being resumed; retry", id)
	}
	if err := s.DeleteSnapshot(ctx, account, p.Snapshot); err != nil && errs.KindOf(err) != errs.NotFound {
		return true, err
	}
	return true, nil
}

// pausedPB is a paused sandbox as the API shows it.
func pausedPB(id string, p *paused) (*executorv1.Sandbox, error) {
	req := &executorv1.CreateSandboxRequest{}
	if err := proto.Unmarshal(p.Request, req); err != nil {
		return nil, fmt.Errorf("executor: paused sandbox %s: %w", id, err)
	}
	labels := maps.Clone(req.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	sb := &executorv1.Sandbox{
		Id: id, User: req.GetUser(), State: executorv1.SandboxState_SANDBOX_STATE_PAUSED, Name: req.GetName(),
		Limits: req.GetLimits(), Network: req.GetNetwork(), CreatedAt: timestamppb.New(p.Created), LastUsedAt: timestamppb.New(p.PausedAt),
		IdleTimeoutSeconds: req.GetIdleTimeoutSeconds(), TtlSeconds: req.GetTtlSeconds(), Labels: labels, Snapshot: p.Snapshot,
		PauseWhenIdle: req.GetPauseWhenIdle(),
	}
	if !p.Expires.IsZero() {
		sb.ExpiresAt, sb.TtlSeconds = timestamppb.New(p.Expires), int32(p.Expires.Sub(p.Created)/time.Second)
	}
	return sb, nil
}

// pausedIDs returns the ids of ms, sorted.
func pausedIDs(m map[string]*executorv1.Sandbox) []string {
	return slices.Sorted(maps.Keys(m))
}
