// Package responsestore keeps the Responses API's stored responses: their
// bodies and conversation items in an object store (MinIO, or a directory
// for conch dev), and in etcd only what must be agreed on and is small —
// one record per response, and one quota claim per conversation.
//
// A conversation is a tree: a response made without previous_response_id
// is its root, and every response continued from one of its responses
// belongs to it. Each response stores only what it added (its input and
// the turn it ran) as a segment, with the ids of the responses it
// continues, so a continuation reads each segment once and writes only
// its own. The objects of a conversation live under its root:
//
//	responses/<account>/<root>/<id>/conversation   the segment (ancestors' ids, messages)
//	responses/<account>/<root>/<id>/response       the response object and its input items
//
// A conversation is stored as one: its claim (quota StoredResponses, id
// the root) counts its responses and its bytes, and lasts as long as its
// newest response. Deleting a response removes its record at once (GET and
// previous_response_id no longer find it) but its segment stays part of
// the conversations continued from it; once no response of a conversation
// is left, by deletes or by expiry, its claim goes and its objects are
// removed (at once on the last delete, else by Sweep). A response that
// expired is not found either, but its items stay in the conversations
// continued from it while those live.
package responsestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/router/upstream"
)

const (
	// DefaultRetention is how long a stored response is kept.
	DefaultRetention = 30 * 24 * time.Hour
	// MaxSegment bounds each object of one response, compressed: a larger
	// one is not stored.
	MaxSegment = 4 << 20
	// MaxTurns bounds the responses of one chain of previous_response_id:
	// a continuation reads one segment per response before it.
	MaxTurns = 10000
	// recordPrefix is where the records are: one per response, under its
	// account, so an id from another account finds nothing.
	recordPrefix = "conch/stored-responses/"
	// fetchers is how many segments one continuation reads at once.
	fetchers = 8
)

// Options configure a Store.
type Options struct {
	Etcd    *clientv3.Client
	Objects store.Store
	// Retention is how long a response is kept; zero: DefaultRetention.
	Retention time.Duration
	// Limits returns an account's quotas; nil counts nothing.
	Limits func(ctx context.Context, account string) (quotas.Limits, error)
	// Room, when set, says whether etcd has room for small writes now
	// (etcdx.SpaceWatcher.AdmitBulk with 0): a response is refused when it
	// has not, though it stores only a small record there.
	Room   func(size int64) error
	Logger *slog.Logger
}

// Store keeps stored responses.
type Store struct {
	opts       Options
	leases     *etcdx.Leases
	turnLeases *etcdx.Leases
	// dead are conversations the last sweep found without a claim: the
	// next removes those still without one (a response being stored
	// writes its objects before its claim).
	dead map[string]bool
}

// New returns a Store.
func New(opts Options) (*Store, error) {
	if opts.Etcd == nil || opts.Objects == nil {
		return nil, errors.New("responsestore: Etcd and Objects are required")
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Store{opts: opts, leases: etcdx.NewLeases(opts.Etcd, opts.Retention, time.Hour),
		turnLeases: etcdx.NewLeases(opts.Etcd, TurnTTL, time.Hour)}, nil
}

// Response is a stored response as GET and input_items read it.
type Response struct {
	Response map[string]any   `json:"response"`
	Input    []map[string]any `json:"input"`
}

// Thread is the conversation up to and including a stored response: what
// a continuation of it sends upstream before its own input.
type Thread struct {
	// Root is the conversation's root; Chain the ids of its responses
	// from the root to the last, in order.
	Root  string
	Chain []string
	// Messages are every message of the chain, instructions excepted.
	Messages []upstream.StoredMessage
	// Container and User are the last response's (Turn).
	Container, User string
}

// record is a response's record in etcd.
type record struct {
	Root string `json:"root"`
}

// Turn is what one response adds to its conversation.
type Turn struct {
	Messages []upstream.StoredMessage `json:"messages"`
	// Container is the sandbox its shell ran in ("" when none), and User
	// the end user it ran for: a continuation for the same user runs in
	// that sandbox again while it runs.
	Container string `json:"container,omitempty"`
	User      string `json:"user,omitempty"`
}

// segment is a Turn as stored.
type segment struct {
	// Chain are the ids of the responses it continues, root first.
	Chain []string `json:"chain,omitempty"`
	Turn
}

// messagesOnly reads a segment's messages, skipping its chain.
type messagesOnly struct {
	Messages []upstream.StoredMessage `json:"messages"`
}

func recordKey(account, id string) string {
	return recordPrefix + url.PathEscape(account) + "/" + url.PathEscape(id)
}

// segment names: ids and accounts are escaped as in etcd, and a "." or
// ".." no object key may hold is escaped too.
func segName(s string) string {
	s = url.PathEscape(s)
	if strings.Trim(s, ".") == "" {
		s = strings.ReplaceAll(s, ".", "%2E")
	}
	return s
}

// objectsPrefix is where the objects of stored responses are.
const objectsPrefix = "responses/"

func treePrefix(account, root string) string {
	return objectsPrefix + segName(account) + "/" + segName(root) + "/"
}

func objectKey(account, root, id, part string) string {
	return treePrefix(account, root) + segName(id) + "/" + part
}

// notFound is the error of a response that is not stored (any more).
func notFound(id string) error {
	return errs.New(errs.NotFound, "Response with id '%s' not found.", id)
}

// IsNotFound reports whether err says a response is not stored.
func IsNotFound(err error) bool { return errs.KindOf(err) == errs.NotFound }

func (s *Store) root(ctx context.Context, account, id string) (string, error) {
	resp, err := s.opts.Etcd.Get(ctx, recordKey(account, id))
	if err != nil {
		return "", errs.Wrap(errs.Unavailable, err, "responsestore: read a record")
	}
	if len(resp.Kvs) == 0 {
		return "", notFound(id)
	}
	var rec record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.Root == "" {
		return "", errs.New(errs.Internal, "responsestore: record of %s: %v", id, err)
	}
	return rec.Root, nil
}

// getObject decodes the object key into v. A response whose record was
// found but whose object is not is gone (deleted, or the conversation
// expired between the two reads).
func (s *Store) getObject(ctx context.Context, key, id string, v any) error {
	r, info, err := s.opts.Objects.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return notFound(id)
	}
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "responsestore: read %s", id)
	}
	defer r.Close()
	return etcdx.DecodeBlobFrom(r, info.Size, v)
}

// Get reads a stored response.
func (s *Store) Get(ctx context.Context, account, id string) (*Response, error) {
	root, err := s.root(ctx, account, id)
	if err != nil {
		return nil, err
	}
	var r Response
	if err := s.getObject(ctx, objectKey(account, root, id, "response"), id, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Thread reads the conversation up to and including the stored response
// id: its segment, then every segment before it, a few at once. What it
// holds is what a continuation sends upstream, and little more.
func (s *Store) Thread(ctx context.Context, account, id string) (*Thread, error) {
	root, err := s.root(ctx, account, id)
	if err != nil {
		return nil, err
	}
	var last segment
	if err := s.getObject(ctx, objectKey(account, root, id, "conversation"), id, &last); err != nil {
		return nil, err
	}
	chain := append(last.Chain, id)
	parts := make([][]upstream.StoredMessage, len(chain))
	parts[len(chain)-1] = last.Messages
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchers)
	for i, anc := range last.Chain {
		g.Go(func() error {
			var seg messagesOnly
			if err := s.getObject(gctx, objectKey(account, root, anc, "conversation"), anc, &seg); err != nil {
				if IsNotFound(err) {
					// The conversation went while it was read.
					return notFound(id)
				}
				return err
			}
			parts[i] = seg.Messages
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	msgs := make([]upstream.StoredMessage, 0, n)
	for _, p := range parts {
		msgs = append(msgs, p...)
	}
	return &Thread{Root: root, Chain: chain, Messages: msgs, Container: last.Container, User: last.User}, nil
}

// Check reports, before a response runs, whether it could be stored
// after: etcd has room and the account room for one more response. prev
// is the conversation it continues, or nil.
func (s *Store) Check(ctx context.Context, account string, prev *Thread) error {
	if prev != nil && len(prev.Chain) >= MaxTurns {
		return errs.New(errs.InvalidArgument, "a conversation holds at most %d responses: start a new one, or continue with \"store\": false", MaxTurns)
	}
	if s.opts.Room != nil {
		if err := s.opts.Room(0); err != nil {
			return errs.New(errs.Unavailable, "responses cannot be stored now (%v); send \"store\": false to run without storing", err)
		}
	}
	if s.opts.Limits == nil {
		return nil
	}
	limits, err := s.opts.Limits(ctx, account)
	if err != nil {
		return err
	}
	return quotas.Check(ctx, s.opts.Etcd, quotas.StoredResponses, account,
		quotas.Usage{quotas.StoredResponses: 1, quotas.StoredResponseBytes: 0}, limits)
}

// Put stores the response id, continuing prev (nil: a new conversation),
// with what it added. A quota that refuses it is its
// errs.ResourceExhausted error (wrapped in a *QuotaError); what a failed
// Put wrote is removed.
func (s *Store) Put(ctx context.Context, account, id string, prev *Thread, resp *Response, turn Turn) error {
	root, seg := id, segment{Turn: turn}
	if prev != nil {
		root, seg.Chain = prev.Root, prev.Chain
	}
	conv, err := etcdx.EncodeBlob(&seg, MaxSegment)
	if err != nil {
		return err
	}
	body, err := etcdx.EncodeBlob(resp, MaxSegment)
	if err != nil {
		return err
	}
	if s.opts.Room != nil {
		if err := s.opts.Room(0); err != nil {
			return err
		}
	}
	// The objects first: a crash before the claim leaves objects no
	// claim holds, which Sweep removes (for a new conversation) or which
	// go with their conversation.
	// Both at once: each waits for its own sync.
	keys := []string{objectKey(account, root, id, "conversation"), objectKey(account, root, id, "response")}
	var g errgroup.Group
	for i, data := range [][]byte{conv, body} {
		g.Go(func() error {
			_, err := s.opts.Objects.Put(ctx, keys[i], bytes.NewReader(data), store.PutOptions{Size: int64(len(data)), Mode: 0o600, ModTime: time.Now()})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		s.removeObjects(ctx, keys)
		return errs.Wrap(errs.Unavailable, err, "responsestore: store %s", id)
	}
	var limits quotas.Limits
	if s.opts.Limits != nil {
		if limits, err = s.opts.Limits(ctx, account); err != nil {
			s.removeObjects(ctx, keys)
			return err
		}
	} else {
		limits = unlimited()
	}
	rec, _ := json.Marshal(record{Root: root})
	size := int64(len(conv) + len(body))
	// One transaction: the record, and the conversation's claim grown by
	// one response and its bytes, put on the newest lease. A continuation
	// needs its conversation's claim still there: else the conversation
	// was deleted or expired while it ran.
	err = s.leases.With(ctx, func(lease clientv3.LeaseID) error {
		return quotas.Grow(ctx, s.opts.Etcd, quotas.StoredResponses, account, root,
			quotas.Usage{quotas.StoredResponses: 1, quotas.StoredResponseBytes: size}, limits, prev != nil,
			[]clientv3.OpOption{clientv3.WithLease(lease)}, clientv3.OpPut(recordKey(account, id), string(rec), clientv3.WithLease(lease)))
	})
	if err != nil {
		s.removeObjects(ctx, keys)
		switch errs.KindOf(err) {
		case errs.ResourceExhausted:
			return &QuotaError{err}
		case errs.NotFound:
			return errs.New(errs.FailedPrecondition, "the conversation it continues (%s) was deleted or expired while it ran", prev.Chain[len(prev.Chain)-1])
		}
		return errs.Wrap(errs.Unavailable, err, "responsestore: store %s", id)
	}
	return nil
}

// QuotaError is a Put refused by the account's quotas.
type QuotaError struct{ error }

func (e *QuotaError) Unwrap() error { return e.error }

// unlimited are limits no use passes, when the store counts nothing.
func unlimited() quotas.Limits {
	l := quotas.Limits{}
	for _, k := range quotas.Kinds {
		l[k] = 1 << 62
	}
	return l
}

// Delete removes the response id: found says there was one. Its
// conversation counts one response less; the last one removes the
// conversation's objects.
func (s *Store) Delete(ctx context.Context, account, id string) (found bool, err error) {
	root, err := s.root(ctx, account, id)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The delete that removed the record takes the response off its
	// conversation's count, once however many race.
	del, err := s.opts.Etcd.Delete(ctx, recordKey(account, id))
	if err != nil {
		return false, errs.Wrap(errs.Unavailable, err, "responsestore: delete %s", id)
	}
	if del.Deleted == 0 {
		return false, nil
	}
	err = quotas.Grow(ctx, s.opts.Etcd, quotas.StoredResponses, account, root,
		quotas.Usage{quotas.StoredResponses: -1}, unlimited(), true, nil)
	if err != nil && errs.KindOf(err) != errs.NotFound { // NotFound: the conversation expired
		return true, err
	}
	if err := s.removeUnclaimed(ctx, account, root, treePrefix(account, root)); err != nil {
		s.opts.Logger.WarnContext(ctx, "a deleted conversation's objects are left for the next sweep", "account", account, "root", root, "error", err)
	}
	return true, nil
}

func (s *Store) removeObjects(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	if err := s.opts.Objects.Delete(context.WithoutCancel(ctx), keys); err != nil {
		s.opts.Logger.WarnContext(ctx, "objects of a response not stored are left for the sweep", "keys", keys, "error", err)
	}
}
