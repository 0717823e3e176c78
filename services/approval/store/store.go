package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/quotas"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// States of an approval.
const (
	StatePending = "pending"
	StateAllowed = "allowed"
	StateDenied  = "denied"
	StateExpired = "expired"
)

// Decisions a human can make.
const (
	DecisionAllowOnce    = "allow-once"
	DecisionAllowAlways  = "allow-always"
	DecisionAllowSession = "allow-session"
	DecisionDeny         = "deny"
)

// ReasonTimeout is the reason of an approval nobody answered in time.
const ReasonTimeout = "nobody answered before the approval timeout"

// RecordTTL is how long an approval stays listable after it was created.
const RecordTTL = 24 * time.Hour

// Segment is a judged simple command as stored with an approval.
type Segment struct {
	Argv         []string `json:"argv"`
	ResolvedPath string   `json:"resolvedPath,omitempty"`
	Decision     string   `json:"decision"`
	Reason       string   `json:"reason,omitempty"`
}

// Approval is a request for a human decision.
type Approval struct {
	ID            string    `json:"id"`
	Account       string    `json:"account"`
	State         string    `json:"state"`
	Decision      string    `json:"decision,omitempty"`
	Command       string    `json:"command"`
	Cwd           string    `json:"cwd"`
	Agent         string    `json:"agent"`
	ResolvedPaths []string  `json:"resolvedPaths,omitempty"`
	Host          string    `json:"host"`
	Node          string    `json:"node,omitempty"`
	Security      string    `json:"security"`
	Session       string    `json:"session,omitempty"`
	User          string    `json:"user,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	ExpiresAt     time.Time `json:"expiresAt"`
	ResolvedAt    time.Time `json:"resolvedAt,omitzero"`
	ResolvedBy    string    `json:"resolvedBy,omitempty"`
	// Reason says why an expired approval ended without an answer.
	Reason   string    `json:"reason,omitempty"`
	Segments []Segment `json:"segments,omitempty"`
	// Binding is a digest of everything the approval is bound to.
	Binding string `json:"binding"`
	// Recordable are the binaries allow-always adds to the allowlist.
	Recordable []string `json:"recordable,omitempty"`
	// FallbackAllows is the ask_fallback verdict, applied on expiry.
	FallbackAllows bool `json:"fallbackAllows,omitempty"`
	// Consumed is set once an allowed approval was used to run.
	Consumed bool `json:"consumed,omitempty"`
	// Egress is the host:port of a network approval; Sandbox the sandbox
	// that asked for it.
	Egress  string `json:"egress,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// EgressHost is what allow-always remembers for the agent.
	EgressHost string `json:"egressHost,omitempty"`
	// SessionTTLSeconds and SessionByShape are what an allow-session
	// answer grants: for how long, and whether by argument shape.
	SessionTTLSeconds int  `json:"sessionTTLSeconds,omitempty"`
	SessionByShape    bool `json:"sessionByShape,omitempty"`
	// Preview is what the command did on a copy of its sandbox before
	// anyone was asked, within contract's preview bounds.
	Preview *approvalv1.Preview `json:"preview,omitempty"`
	// Reviewing is set while a reviewer model has the approval, until
	// ReviewUntil at the latest; ReviewerNote is its answer and reasoning.
	Reviewing    bool      `json:"reviewing,omitempty"`
	ReviewUntil  time.Time `json:"reviewUntil,omitzero"`
	ReviewerNote string    `json:"reviewerNote,omitempty"`

	rev int64
}

// UnderReview reports whether a reviewer model still has the approval at
// now: humans are not asked meanwhile. A review past its deadline (its
// replica died) no longer holds them back.
func (a *Approval) UnderReview(now time.Time) bool {
	return a.State == StatePending && a.Reviewing && now.Before(a.ReviewUntil)
}

// EndReview records the reviewer's note on a pending approval and hands it
// to humans. An approval no longer pending is left as it is.
func (s *Store) EndReview(ctx context.Context, account, id, note string) error {
	for {
		a, _, _, err := s.read(ctx, account, id)
		if err != nil || a.State != StatePending {
			return err
		}
		next := *a
		next.Reviewing, next.ReviewerNote = false, note
		b, err := json.Marshal(&next)
		if err != nil {
			return errs.Wrap(errs.Internal, err, "approval store: encode approval")
		}
		rk := s.recKey(account, id)
		// The live key stays: the approval still waits for a human.
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(rk), "=", a.rev)).
			Then(clientv3.OpPut(rk, string(b), clientv3.WithIgnoreLease())).Commit()
		if err != nil {
			return unavailable(err, "end review")
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// Terminal reports whether the approval will not change state again.
func (a *Approval) Terminal() bool { return a.State != StatePending }

// Allows reports whether the approval lets its command run.
func (a *Approval) Allows() bool {
	return a.State == StateAllowed || (a.State == StateExpired && a.FallbackAllows)
}

// Store is the etcd-backed state of the approval service.
type Store struct {
	cli    *clientv3.Client
	prefix string
	keys   *seal.Keyring
	now    func() time.Time
	cache  docCache
	// limits returns an account's quotas, against which pending
	// approvals count; nil counts nothing.
	limits func(ctx context.Context, account string) (quotas.Limits, error)
}

// SetQuotaLimits makes pending approvals count against their account's
// quota, which limits returns. Call it before the store is used.
func (s *Store) SetQuotaLimits(limits func(ctx context.Context, account string) (quotas.Limits, error)) {
	s.limits = limits
}

// New returns a store keeping its keys under prefix (e.g. "/conch/approval/")
// and sealing the secrets of forwarding configs with keys. A store given
// no keys (an executor's, which reads the exec-approvals documents alone)
// refuses to read or write forwarding configs: the keys stay with the
// approval service.
func New(cli *clientv3.Client, prefix string, keys *seal.Keyring) (*Store, error) {
	if cli == nil {
		return nil, fmt.Errorf("approval store: no etcd client")
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{cli: cli, prefix: prefix, keys: keys, now: time.Now}, nil
}

func esc(s string) string { return url.PathEscape(s) }

func (s *Store) docKey(account string) string { return s.prefix + "doc/" + esc(account) }
func (s *Store) recPrefix(account string) string {
	return s.prefix + "approvals/" + esc(account) + "/"
}
func (s *Store) recKey(account, id string) string  { return s.recPrefix(account) + esc(id) }
func (s *Store) liveKey(account, id string) string { return s.recKey(account, id) + "/live" }

// Seals reports whether the store holds the keys that seal forwarding
// configs' secrets, without which it cannot read or write those configs.
func (s *Store) Seals() bool { return s.keys != nil }

// Client returns the etcd client, for leader election.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

func unavailable(err error, what string) error {
	switch {
	case errors.Is(err, context.Canceled):
		return errs.Wrap(errs.Canceled, err, "approval store: %s", what)
	case errors.Is(err, context.DeadlineExceeded):
		return errs.Wrap(errs.DeadlineExceeded, err, "approval store: %s", what)
	}
	return errs.Wrap(errs.Unavailable, err, "approval store: %s", what)
}

// Document returns the account's exec-approvals document and its revision
// (0 when none is stored).
func (s *Store) Document(ctx context.Context, account string) (*document.Document, int64, error) {
	resp, err := s.cli.Get(ctx, s.docKey(account))
	if err != nil {
		return nil, 0, unavailable(err, "read document")
	}
	if len(resp.Kvs) == 0 {
		return document.Empty(), 0, nil
	}
	d, err := document.Parse(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, errs.Wrap(errs.Internal, err, "approval store: stored document of %s", account)
	}
	return d, resp.Kvs[0].ModRevision, nil
}

// PutDocument replaces the account's document. A non-zero expect makes the
// put conditional on the stored revision.
func (s *Store) PutDocument(ctx context.Context, account string, d *document.Document, expect int64) (int64, error) {
	b, err := d.Marshal()
	if err != nil {
		return 0, errs.Wrap(errs.Internal, err, "approval store: encode document")
	}
	if len(b) > document.MaxBytes {
		return 0, errs.New(errs.InvalidArgument, "exec-approvals: document larger than %d bytes", document.MaxBytes)
	}
	key := s.docKey(account)
	txn := s.cli.Txn(ctx)
	if expect != 0 {
		txn = txn.If(clientv3.Compare(clientv3.ModRevision(key), "=", expect))
	}
	resp, err := txn.Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return 0, unavailable(err, "write document")
	}
	if !resp.Succeeded {
		return 0, errs.New(errs.Conflict, "exec-approvals: the document changed since revision %d", expect)
	}
	s.cached(account, b, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// UpdateDocument applies fn to the account's document and stores it,
// retrying when another writer won.
func (s *Store) UpdateDocument(ctx context.Context, account string, fn func(*document.Document) (bool, error)) (*document.Document, int64, error) {
	for attempt := 0; ; attempt++ {
		d, rev, err := s.Document(ctx, account)
		if err != nil {
			return nil, 0, err
		}
		changed, err := fn(d)
		if err != nil || !changed {
			return d, rev, err
		}
		b, err := d.Marshal()
		if err != nil {
			return nil, 0, errs.Wrap(errs.Internal, err, "approval store: encode document")
		}
		key := s.docKey(account)
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return nil, 0, unavailable(err, "write document")
		}
		if resp.Succeeded {
			s.cached(account, b, resp.Header.Revision)
			return d, resp.Header.Revision, nil
		}
		if attempt > 20 {
			return nil, 0, errs.New(errs.Conflict, "exec-approvals: too many concurrent changes; try again")
		}
	}
}

func decode(kv []byte, rev int64) (*Approval, error) {
	var a Approval
	if err := json.Unmarshal(kv, &a); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "approval store: decode approval")
	}
	a.rev = rev
	return &a, nil
}

// Create stores a new pending approval whose live key expires after ttl.
func (s *Store) Create(ctx context.Context, a *Approval, ttl time.Duration) error {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	live, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return unavailable(err, "grant approval lease")
	}
	keep, err := s.cli.Grant(ctx, int64(RecordTTL/time.Second)+secs)
	if err != nil {
		return unavailable(err, "grant record lease")
	}
	a.State = StatePending
	b, err := json.Marshal(a)
	if err != nil {
		return errs.Wrap(errs.Internal, err, "approval store: encode approval")
	}
	rk, lk := s.recKey(a.Account, a.ID), s.liveKey(a.Account, a.ID)
	if s.limits != nil {
		// The claim lives as long as the approval waits: the live
		// key's lease, or until it is answered.
		limits, err := s.limits(ctx, a.Account)
		if err != nil {
			return err
		}
		if err := quotas.Claim(ctx, s.cli, quotas.PendingApprovals, a.Account, a.ID, quotas.Usage{quotas.PendingApprovals: 1}, limits, []clientv3.OpOption{clientv3.WithLease(live.ID)}); err != nil {
			return err
		}
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(rk), "=", 0)).
		Then(clientv3.OpPut(rk, string(b), clientv3.WithLease(keep.ID)), clientv3.OpPut(lk, "", clientv3.WithLease(live.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		_ = quotas.Release(context.WithoutCancel(ctx), s.cli, quotas.PendingApprovals, a.Account, a.ID)
	}
	if err != nil {
		return unavailable(err, "create approval")
	}
	if !resp.Succeeded {
		return errs.New(errs.AlreadyExists, "approval %s already exists", a.ID)
	}
	a.rev = resp.Header.Revision
	return nil
}

// read returns the approval and whether its live key still exists, at one
// revision.
func (s *Store) read(ctx context.Context, account, id string) (*Approval, bool, int64, error) {
	rk, lk := s.recKey(account, id), s.liveKey(account, id)
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(rk), clientv3.OpGet(lk)).Commit()
	if err != nil {
		return nil, false, 0, unavailable(err, "read approval")
	}
	rec := resp.Responses[0].GetResponseRange().Kvs
	if len(rec) == 0 {
		return nil, false, resp.Header.Revision, errs.New(errs.NotFound, "approval %s not found", id)
	}
	a, err := decode(rec[0].Value, rec[0].ModRevision)
	if err != nil {
		return nil, false, 0, err
	}
	return a, len(resp.Responses[1].GetResponseRange().Kvs) > 0, resp.Header.Revision, nil
}

// Get returns an approval of the account. A pending approval whose lease
// ran out is expired on the way.
func (s *Store) Get(ctx context.Context, account, id string) (*Approval, error) {
	a, live, _, err := s.read(ctx, account, id)
	if err != nil {
		return nil, err
	}
	if a.State == StatePending && !live {
		return s.expire(ctx, a)
	}
	return a, nil
}

// expire records that nobody answered a (whose live key is gone) unless
// something else changed it first, and returns the approval as stored.
func (s *Store) expire(ctx context.Context, a *Approval) (*Approval, error) {
	for {
		if a.State != StatePending {
			return a, nil
		}
		next := *a
		next.State = StateExpired
		next.ResolvedAt = s.now()
		next.ResolvedBy = "fallback"
		next.Reason = ReasonTimeout
		ok, err := s.swap(ctx, a, &next, clientv3.Compare(clientv3.CreateRevision(s.liveKey(a.Account, a.ID)), "=", 0))
		if err != nil {
			return nil, err
		}
		if ok {
			return &next, nil
		}
		cur, live, _, err := s.read(ctx, a.Account, a.ID)
		if err != nil {
			return nil, err
		}
		if cur.State == StatePending && live {
			return cur, nil
		}
		a = cur
	}
}

// swap replaces old with next when old is still the stored version (and
// the extra conditions hold), keeping the record's lease.
func (s *Store) swap(ctx context.Context, old, next *Approval, extra ...clientv3.Cmp) (bool, error) {
	return s.swapThen(ctx, old, next, extra, nil)
}

// swapThen is swap doing ops in the same transaction.
func (s *Store) swapThen(ctx context.Context, old, next *Approval, extra []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	b, err := json.Marshal(next)
	if err != nil {
		return false, errs.Wrap(errs.Internal, err, "approval store: encode approval")
	}
	rk := s.recKey(old.Account, old.ID)
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(rk), "=", old.rev)}, extra...)
	then := append([]clientv3.Op{clientv3.OpPut(rk, string(b), clientv3.WithIgnoreLease()), clientv3.OpDelete(s.liveKey(old.Account, old.ID)),
		clientv3.OpDelete(quotas.ClaimKey(quotas.PendingApprovals, old.Account, old.ID))}, ops...)
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(then...).Commit()
	if err != nil {
		return false, unavailable(err, "update approval")
	}
	if resp.Succeeded {
		next.rev = resp.Header.Revision
	}
	return resp.Succeeded, nil
}

// ResolveOptions are what an answer does besides deciding.
type ResolveOptions struct {
	// Note is the reviewer model's note, when it answered.
	Note string
	// Document, when set, changes the account's exec-approvals document
	// (allow-always's additions); it reports whether it changed it.
	Document func(d *document.Document, a *Approval) (bool, error)
}

// Resolve records a human's decision on a pending approval. Exactly one
// of several concurrent answers wins; the others get a conflict. What the
// answer grants besides (an allow-session's grants, an allow-always's
// document change) is written in the same transaction: the command it
// lets run finds it when it runs again, however soon, and an answer that
// lost the race changes nothing.
func (s *Store) Resolve(ctx context.Context, account, id, decision, approver string, opts ...ResolveOptions) (*Approval, error) {
	var o ResolveOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	for attempt := 0; ; attempt++ {
		a, live, _, err := s.read(ctx, account, id)
		if err != nil {
			return nil, err
		}
		if a.State != StatePending {
			return nil, errs.New(errs.Conflict, "approval %s is already %s", id, a.State)
		}
		if !live {
			if _, err := s.expire(ctx, a); err != nil {
				return nil, err
			}
			return nil, errs.New(errs.Conflict, "approval %s is already expired", id)
		}
		if decision == DecisionAllowSession && a.Session == "" {
			return nil, errs.New(errs.InvalidArgument, "decision: allow-session needs an approval asked in a session (X-Conch-Session-Id)")
		}
		next := *a
		next.Decision = decision
		next.State = StateAllowed
		if decision == DecisionDeny {
			next.State = StateDenied
		}
		next.ResolvedAt = s.now()
		next.ResolvedBy = approver
		next.Reviewing = false
		if o.Note != "" {
			next.ReviewerNote = o.Note
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.liveKey(account, id)), ">", 0)}
		var ops []clientv3.Op
		// A network approval's allow-session lets its sandbox connect, as
		// allow-once does; it grants no command to the session.
		if decision == DecisionAllowSession && a.Egress == "" {
			if ops, err = s.grantOps(ctx, a); err != nil {
				return nil, err
			}
		}
		var doc []byte
		if o.Document != nil {
			d, rev, err := s.Document(ctx, account)
			if err != nil {
				return nil, err
			}
			changed, err := o.Document(d, a)
			if err != nil {
				return nil, err
			}
			if changed {
				if doc, err = d.Marshal(); err != nil {
					return nil, errs.Wrap(errs.Internal, err, "approval store: encode document")
				}
				key := s.docKey(account)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
				ops = append(ops, clientv3.OpPut(key, string(doc)))
			}
		}
		ok, err := s.swapThen(ctx, a, &next, cmps, ops)
		if err != nil {
			return nil, err
		}
		if ok {
			if doc != nil {
				s.cached(account, doc, next.rev)
			}
			return &next, nil
		}
		// The approval was answered or expired meanwhile (the next read
		// says so), or only the document changed: try again.
		if attempt > 20 {
			return nil, errs.New(errs.Conflict, "approval %s: too many concurrent changes; try again", id)
		}
	}
}

// Abandon ends a pending approval whose requester is gone: it expires
// with reason and never allows, whatever its fallback, since nobody waits
// to run its command. An approval no longer pending is returned as is; an
// answer racing this one either wins (and is returned) or gets a conflict.
func (s *Store) Abandon(ctx context.Context, account, id, reason string) (*Approval, error) {
	for {
		a, _, _, err := s.read(ctx, account, id)
		if err != nil || a.State != StatePending {
			return a, err
		}
		next := *a
		next.State = StateExpired
		next.FallbackAllows = false
		next.ResolvedAt = s.now()
		next.ResolvedBy = "requester"
		next.Reason = reason
		ok, err := s.swap(ctx, a, &next)
		if err != nil {
			return nil, err
		}
		if ok {
			return &next, nil
		}
	}
}

// Consume marks an allowing approval as used; an approval runs its command
// once.
func (s *Store) Consume(ctx context.Context, a *Approval) error {
	if a.Consumed {
		return errs.New(errs.FailedPrecondition, "approval %s was already used", a.ID)
	}
	next := *a
	next.Consumed = true
	ok, err := s.swap(ctx, a, &next)
	if err != nil {
		return err
	}
	if !ok {
		return errs.New(errs.FailedPrecondition, "approval %s was already used", a.ID)
	}
	*a = next
	return nil
}

// List returns the account's approvals, newest first.
func (s *Store) List(ctx context.Context, account string) ([]*Approval, error) {
	resp, err := s.cli.Get(ctx, s.recPrefix(account), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "list approvals")
	}
	live := map[string]bool{}
	var out []*Approval
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if strings.HasSuffix(k, "/live") {
			live[strings.TrimSuffix(k, "/live")] = true
			continue
		}
		if strings.HasSuffix(k, NoticedSuffix) || strings.HasSuffix(k, OutcomeSuffix) {
			continue
		}
		a, err := decode(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	for i, a := range out {
		if a.State == StatePending && !live[s.recKey(account, a.ID)] {
			if out[i], err = s.expire(ctx, a); err != nil {
				return nil, err
			}
		}
	}
	sortNewestFirst(out)
	return out, nil
}

func sortNewestFirst(as []*Approval) {
	slices.SortStableFunc(as, func(a, b *Approval) int { return b.CreatedAt.Compare(a.CreatedAt) })
}

// retryable reports whether err may go away by itself.
func retryable(err error) bool {
	k := errs.KindOf(err)
	return k == errs.Unavailable || k == errs.DeadlineExceeded
}

// cached puts a document this replica just wrote into the cache, as a
// fresh copy the caller cannot modify.
func (s *Store) cached(account string, b []byte, rev int64) {
	if d, err := document.Parse(b); err == nil {
		s.cache.put(account, cachedDoc{doc: d, rev: rev, seen: rev})
	}
}
