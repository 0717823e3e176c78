// Package nodes pairs machines with an account so that exec commands can run
// on them (docs/how-to/hosts.md, host node). Pairing issues a token that
// `conch node` presents when it connects; only the token's SHA-256 is kept,
// as for API keys. Whether a node is connected, and to which executor, is the
// executor's record in package placement.
package nodes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// TokenPrefix starts every node token, so leaked tokens are easy to
// recognise and are never mistaken for API keys.
const TokenPrefix = "conch_node_"

const (
	pairedPrefix = "conch/nodes/paired/" // <account>/<name> → paired JSON
	tokensPrefix = "conch/nodes/tokens/" // <sha256 hex> → <account>/<name>
)

// Node is a paired node and, while connected, its connection.
type Node struct {
	Name        string
	CreatedAt   time.Time
	Connected   bool
	Platform    string
	Executor    string
	ConnectedAt time.Time
}

type paired struct {
	TokenHash string    `json:"token_sha256"`
	CreatedAt time.Time `json:"created_at"`
}

// Store keeps paired nodes in etcd.
type Store struct {
	cli *clientv3.Client
}

// New returns a Store.
func New(cli *clientv3.Client) *Store { return &Store{cli: cli} }

func pairedKey(account, name string) string { return pairedPrefix + account + "/" + name }

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func checkName(name string) error {
	if !placement.NodeName.MatchString(name) {
		return errs.New(errs.InvalidArgument, "name: must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit")
	}
	return nil
}

// Create pairs node name with account and returns its token, which is not
// kept.
func (s *Store) Create(ctx context.Context, account, name string) (Node, string, error) {
	if err := checkName(name); err != nil {
		return Node{}, "", err
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token := TokenPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
	hash := hashToken(token)
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec, _ := json.Marshal(paired{TokenHash: hash, CreatedAt: now})
	key := pairedKey(account, name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(rec)), clientv3.OpPut(tokensPrefix+hash, account+"/"+name)).
		Commit()
	if err != nil {
		return Node{}, "", errs.Wrap(errs.Unavailable, err, "nodes: create %s", name)
	}
	if !resp.Succeeded {
		return Node{}, "", errs.New(errs.AlreadyExists, "node %q already exists", name)
	}
	return Node{Name: name, CreatedAt: now}, token, nil
}

// List returns account's nodes by name, with their connections.
func (s *Store) List(ctx context.Context, account string) ([]Node, error) {
	resp, err := s.cli.Get(ctx, pairedPrefix+account+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "nodes: list")
	}
	conns, err := s.cli.Get(ctx, placement.NodePrefix+account+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "nodes: list connections")
	}
	live := map[string]placement.Record{}
	for _, kv := range conns.Kvs {
		var r placement.Record
		if json.Unmarshal(kv.Value, &r) == nil && r.Account == account {
			live[strings.TrimPrefix(string(kv.Key), placement.NodePrefix+account+"/")] = r
		}
	}
	out := make([]Node, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p paired
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("nodes: decode %s: %w", kv.Key, err)
		}
		n := Node{Name: strings.TrimPrefix(string(kv.Key), pairedPrefix+account+"/"), CreatedAt: p.CreatedAt}
		if r, ok := live[n.Name]; ok {
			n.Connected, n.Platform, n.Executor, n.ConnectedAt = true, r.Platform, r.Executor, r.Created
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete unpairs account's node name: its token stops working at once.
func (s *Store) Delete(ctx context.Context, account, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	key := pairedKey(account, name)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "nodes: delete %s", name)
	}
	if len(resp.Kvs) == 0 {
		return errs.New(errs.NotFound, "node %q not found", name)
	}
	var p paired
	_ = json.Unmarshal(resp.Kvs[0].Value, &p)
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(tokensPrefix+p.TokenHash)).
		Commit()
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "nodes: delete %s", name)
	}
	if !txn.Succeeded {
		return errs.New(errs.Conflict, "node %q changed meanwhile; try again", name)
	}
	return nil
}

// Authenticate returns the account and name a node token was issued for.
func (s *Store) Authenticate(ctx context.Context, token string) (account, name string, err error) {
	if !strings.HasPrefix(token, TokenPrefix) {
		return "", "", errs.New(errs.Unauthenticated, "invalid node token")
	}
	hash := hashToken(token)
	resp, err := s.cli.Get(ctx, tokensPrefix+hash)
	if err != nil {
		return "", "", errs.Wrap(errs.Unavailable, err, "nodes: look up token")
	}
	if len(resp.Kvs) == 0 {
		return "", "", errs.New(errs.Unauthenticated, "invalid node token")
	}
	account, name, _ = strings.Cut(string(resp.Kvs[0].Value), "/")
	// The pairing record must still hold this token: a token whose node
	// was deleted, or paired again, does not count.
	rec, err := s.cli.Get(ctx, pairedKey(account, name))
	if err != nil {
		return "", "", errs.Wrap(errs.Unavailable, err, "nodes: look up node")
	}
	var p paired
	if len(rec.Kvs) == 0 || json.Unmarshal(rec.Kvs[0].Value, &p) != nil || subtle.ConstantTimeCompare([]byte(p.TokenHash), []byte(hash)) != 1 {
		return "", "", errs.New(errs.Unauthenticated, "invalid node token")
	}
	return account, name, nil
}

// Unpaired returns a channel closed when account's node name is deleted or
// ctx ends.
func (s *Store) Unpaired(ctx context.Context, account, name string) <-chan struct{} {
	done := make(chan struct{})
	ctx, unpaired := context.WithCancel(ctx)
	go func() {
		defer close(done)
		defer unpaired()
		etcdx.ListWatch(ctx, s.cli, pairedKey(account, name), etcdx.Handler{
			Reset: func(kvs []*mvccpb.KeyValue, _ int64) error {
				if len(kvs) == 0 {
					unpaired()
				}
				return nil
			},
			Events: func(evs []*clientv3.Event) error {
				for _, ev := range evs {
					if ev.Type == clientv3.EventTypeDelete {
						unpaired()
					}
				}
				return nil
			},
		}, etcdx.ExactKey(), etcdx.KeysOnly())
	}()
	return done
}
