// Package gateways stores the named gateway configurations of each account in
// etcd (docs/reference/gateways.md) and keeps a watched cache of them for the
// agent loop. Secrets are sealed in etcd (see secrets.go) and plain
// everywhere else.
package gateways

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/quotas"
)

const prefix = "conch/gateways/" // <account>/<name> → Gateway (binary proto)

// Store keeps gateways in etcd.
type Store struct {
	cli   *clientv3.Client
	keys  *seal.Keyring
	log   *slog.Logger
	guard *outbound.Guard // judges the URLs a gateway saves
	ceil  ceiling.Config  // bounds the numbers it saves
	// limits returns an account's quotas; nil counts nothing.
	limits func(ctx context.Context, account string) (quotas.Limits, error)

	mu     sync.RWMutex
	synced bool
	cache  map[string]*routerv1.Gateway // key → gateway, with secrets
	// seen is the etcd revision the cache holds every change up to; wrote
	// the revision of this store's last write. A read after a write goes
	// to etcd until the watch has brought the write: a client that
	// changed a gateway reads its change.
	seen, wrote int64
}

// noteWrite notes a write of this store at revision rev.
func (s *Store) noteWrite(rev int64) {
	s.mu.Lock()
	s.wrote = max(s.wrote, rev)
	s.mu.Unlock()
}

// New returns a Store that seals secrets with keys and whose saves judge
// URLs with guard (nil: their form alone). Call Watch to keep its cache.
func New(cli *clientv3.Client, keys *seal.Keyring, log *slog.Logger, guard *outbound.Guard) (*Store, error) {
	if cli == nil {
		return nil, errors.New("gateways: no etcd client")
	}
	if keys == nil {
		return nil, errors.New("gateways: no keyring to seal secrets with")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Store{cli: cli, keys: keys, log: log, guard: guard, ceil: ceiling.Defaults, cache: map[string]*routerv1.Gateway{}}, nil
}

// SetCeilings makes saves refuse numbers above the operator's ceilings c
// (ceiling.Defaults until called). Call it before the store is used.
func (s *Store) SetCeilings(c ceiling.Config) { s.ceil = c }

func key(account, name string) string { return AccountPrefix(account) + name }

// AccountPrefix is where an account's gateways are kept, one key each.
func AccountPrefix(account string) string { return prefix + account + "/" }

// Create stores a new gateway; the name must be new in the account.
func (s *Store) Create(ctx context.Context, account string, g *routerv1.Gateway) (*routerv1.Gateway, error) {
	if err := Validate(g, s.guard, s.ceil); err != nil {
		return nil, err
	}
	if err := requireSecretValues(g); err != nil {
		return nil, err
	}
	g = proto.Clone(g).(*routerv1.Gateway)
	now := timestamppb.Now()
	g.CreatedAt, g.UpdatedAt = now, now
	clearOutputOnly(g)
	k := key(account, g.GetName())
	b, err := s.encode(k, g)
	if err != nil {
		return nil, err
	}
	for {
		var held []clientv3.Cmp
		if s.limits != nil {
			limits, err := s.limits(ctx, account)
			if err != nil {
				return nil, err
			}
			cmp, err := quotas.Count(ctx, s.cli, quotas.Gateways, AccountPrefix(account), limits[quotas.Gateways])
			if err != nil {
				return nil, err
			}
			held = append(held, cmp)
		}
		resp, err := s.cli.Txn(ctx).
			If(append(held, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))...).
			Then(clientv3.OpPut(k, string(b))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("gateways: create %s: %w", g.GetName(), err)
		}
		if resp.Succeeded {
			s.noteWrite(resp.Header.GetRevision())
			return g, nil
		}
		// Taken, or another gateway was made meanwhile: count again.
		got, err := s.cli.Get(ctx, k, clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("gateways: create %s: %w", g.GetName(), err)
		}
		if got.Count > 0 {
			return nil, errs.New(errs.AlreadyExists, "gateway %q already exists", g.GetName())
		}
	}
}

// SetQuotaLimits makes creates count an account's gateways against its
// quota, which limits returns (none until called). Call it before the
// store is used.
func (s *Store) SetQuotaLimits(limits func(ctx context.Context, account string) (quotas.Limits, error)) {
	s.limits = limits
}

// Get returns a gateway with its secrets, from the cache when it holds it.
// The result may be shared: callers must not modify it.
func (s *Store) Get(ctx context.Context, account, name string) (*routerv1.Gateway, error) {
	s.mu.RLock()
	g, synced := s.cache[key(account, name)], s.synced && s.seen >= s.wrote
	s.mu.RUnlock()
	// A cached gateway's name was checked when it was created, so a hit
	// on that very name needs no check (a regular expression, on every
	// completion); a name that only makes the same key, through a "/",
	// is checked and refused.
	if synced && g != nil && g.GetName() == name {
		return g, nil
	}
	if ValidName(name) != nil {
		return nil, errs.New(errs.NotFound, "gateway %q not found", name)
	}
	// A miss reads etcd: the gateway may have been created a moment ago,
	// before the watch delivered it.
	g, _, err := s.get(ctx, account, name)
	return g, err
}

func (s *Store) get(ctx context.Context, account, name string) (*routerv1.Gateway, int64, error) {
	resp, err := s.cli.Get(ctx, key(account, name))
	if err != nil {
		return nil, 0, fmt.Errorf("gateways: get %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, errs.New(errs.NotFound, "gateway %q not found", name)
	}
	g, err := s.decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return g, resp.Kvs[0].ModRevision, nil
}

// List returns the account's gateways by name, with secrets.
func (s *Store) List(ctx context.Context, account string) ([]*routerv1.Gateway, error) {
	resp, err := s.cli.Get(ctx, prefix+account+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("gateways: list: %w", err)
	}
	out := make([]*routerv1.Gateway, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		g, err := s.decode(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// Update changes a gateway. With a nil mask, or the mask "*", g replaces
// the whole gateway; otherwise only the fields of the mask's paths are
// taken from g (see UpdateGatewayRequest.update_mask), and an empty mask
// changes nothing. Either way secrets left empty keep their stored values,
// and the gateway that results is what Validate checks.
func (s *Store) Update(ctx context.Context, account, name string, g *routerv1.Gateway, mask *fieldmaskpb.FieldMask) (*routerv1.Gateway, error) {
	if g == nil {
		return nil, errs.New(errs.InvalidArgument, "gateway: is required")
	}
	paths, replace, err := updatePaths(mask)
	if err != nil {
		return nil, err
	}
	g = proto.Clone(g).(*routerv1.Gateway)
	if g.GetName() == "" {
		g.Name = name
	}
	if g.GetName() != name {
		return nil, errs.New(errs.InvalidArgument, "name: %q does not match the gateway in the path, %q (gateways cannot be renamed)", g.GetName(), name)
	}
	if replace {
		// Checked before reading the stored gateway, so a bad
		// replacement is refused as it would be on create.
		if err := Validate(g, s.guard, s.ceil); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		old, rev, err := s.get(ctx, account, name)
		if err != nil {
			return nil, err
		}
		if !replace && len(paths) == 0 {
			return old, nil
		}
		next := proto.Clone(g).(*routerv1.Gateway)
		if !replace {
			next = merged(old, g, paths)
			if err := Validate(next, s.guard, s.ceil); err != nil {
				return nil, err
			}
		}
		keepSecrets(next, old)
		if err := requireSecretValues(next); err != nil {
			return nil, err
		}
		clearOutputOnly(next)
		next.CreatedAt, next.UpdatedAt = old.GetCreatedAt(), timestamppb.Now()
		k := key(account, name)
		b, err := s.encode(k, next)
		if err != nil {
			return nil, err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, string(b))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("gateways: update %s: %w", name, err)
		}
		if resp.Succeeded {
			s.noteWrite(resp.Header.GetRevision())
			return next, nil
		}
		if attempt == 4 {
			return nil, errs.New(errs.Conflict, "gateway %q is being changed concurrently; try again", name)
		}
	}
}

// Delete removes a gateway.
func (s *Store) Delete(ctx context.Context, account, name string) error {
	if ValidName(name) != nil {
		return errs.New(errs.NotFound, "gateway %q not found", name)
	}
	resp, err := s.cli.Delete(ctx, key(account, name))
	if err != nil {
		return fmt.Errorf("gateways: delete %s: %w", name, err)
	}
	if resp.Deleted == 0 {
		return errs.New(errs.NotFound, "gateway %q not found", name)
	}
	s.noteWrite(resp.Header.GetRevision())
	return nil
}

// Ensure creates g unless the account already has a gateway of that name.
func (s *Store) Ensure(ctx context.Context, account string, g *routerv1.Gateway) error {
	_, err := s.Create(ctx, account, g)
	if errs.KindOf(err) == errs.AlreadyExists {
		return nil
	}
	return err
}

// Watch keeps the cache in step with etcd until ctx ends, resuming after
// disconnects and reloading after compaction. While it reloads, reads go
// to etcd.
func (s *Store) Watch(ctx context.Context) {
	etcdx.ListWatch(ctx, s.cli, prefix, etcdx.Handler{
		Reset:  s.load,
		Events: func(evs []*clientv3.Event) error { s.apply(ctx, evs); return nil },
		Stale:  s.unsync,
	}, etcdx.WithLogger(s.log))
}

func (s *Store) unsync() {
	s.mu.Lock()
	s.synced = false
	s.mu.Unlock()
}

// load replaces the cache. A gateway that does not decode, or whose
// secrets do not open (a key removed too early), is left out rather than
// failing the list, which a retry would not mend: a read of it goes to
// etcd and reports why.
func (s *Store) load(kvs []*mvccpb.KeyValue, rev int64) error {
	cache := make(map[string]*routerv1.Gateway, len(kvs))
	for _, kv := range kvs {
		g, err := s.decode(string(kv.Key), kv.Value)
		if err != nil {
			s.log.Warn("unreadable gateway ignored", "key", string(kv.Key), "error", err)
			continue
		}
		cache[string(kv.Key)] = g
	}
	s.mu.Lock()
	s.cache, s.synced, s.seen = cache, true, rev
	s.mu.Unlock()
	return nil
}

func (s *Store) apply(ctx context.Context, evs []*clientv3.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		s.seen = max(s.seen, ev.Kv.ModRevision)
		if ev.Type == clientv3.EventTypeDelete {
			delete(s.cache, k)
			continue
		}
		g, err := s.decode(k, ev.Kv.Value)
		if err != nil {
			s.log.WarnContext(ctx, "unreadable gateway ignored", "key", k, "error", err)
			delete(s.cache, k)
			continue
		}
		s.cache[k] = g
	}
}

// Redact returns a copy of g without its secrets, for output: the fields
// eachSecret visits, with the flags that say which are set.
func Redact(g *routerv1.Gateway) *routerv1.Gateway {
	g = proto.Clone(g).(*routerv1.Gateway)
	if u := g.GetUpstream(); u != nil {
		u.ApiKeySet = u.GetApiKey() != ""
	}
	for _, sec := range g.GetShell().GetNetwork().GetSecrets() {
		sec.ValueSet = sec.GetValue() != ""
	}
	// Header names stay, so that clients see which headers are set.
	_ = eachSecret(g, func(string, string) (string, error) { return "", nil })
	return g
}

func clearOutputOnly(g *routerv1.Gateway) {
	if u := g.GetUpstream(); u != nil {
		u.ApiKeySet = false
	}
	for _, sec := range g.GetShell().GetNetwork().GetSecrets() {
		sec.ValueSet = false
	}
}

// keepSecrets copies stored secrets into g where g leaves them empty.
func keepSecrets(g, old *routerv1.Gateway) {
	if u := g.GetUpstream(); u != nil && u.GetApiKey() == "" {
		u.ApiKey = old.GetUpstream().GetApiKey()
	}
	oldHooks := map[string]map[string]string{}
	for _, w := range old.GetTools().GetWebhooks() {
		oldHooks[w.GetName()] = w.GetHeaders()
	}
	for _, w := range g.GetTools().GetWebhooks() {
		keepHeaders(w.Headers, oldHooks[w.GetName()])
	}
	oldMCP := map[string]map[string]string{}
	for _, m := range old.GetTools().GetMcpServers() {
		oldMCP[m.GetName()] = m.GetHeaders()
	}
	for _, m := range g.GetTools().GetMcpServers() {
		keepHeaders(m.Headers, oldMCP[m.GetName()])
	}
	oldSecrets := map[string]string{}
	for _, sec := range old.GetShell().GetNetwork().GetSecrets() {
		oldSecrets[sec.GetEnv()] = sec.GetValue()
	}
	for _, sec := range g.GetShell().GetNetwork().GetSecrets() {
		if sec.GetValue() == "" {
			sec.Value = oldSecrets[sec.GetEnv()]
		}
	}
}

func keepHeaders(h, old map[string]string) {
	for k, v := range h {
		if v == "" {
			for ok, ov := range old {
				if strings.EqualFold(k, ok) {
					h[k] = ov
				}
			}
		}
	}
}
