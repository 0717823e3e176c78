// Package accounts stores conch's accounts and their API keys in etcd and
// authenticates bearer keys.
//
// Keys are 32 random bytes; only their SHA-256 is stored, so a copy of etcd
// does not hold usable keys. A slow hash buys nothing for keys of that
// entropy and would cost every request.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/quotas"
)

// KeyPrefix starts every API key, so leaked keys are easy to recognise.
const KeyPrefix = "conch_"

const (
	accountsPrefix = "conch/accounts/"     // <id> → account JSON
	keysPrefix     = "conch/apikeys/"      // <sha256 hex> → key JSON
	indexPrefix    = "conch/account-keys/" // <account>/<key id> → sha256 hex
)

// Account is a tenant.
type Account struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Grants are what an admin gave the account (grants.go).
	Grants []string `json:"grants,omitempty"`
	// Quotas are an admin's overrides of the operator's default quotas
	// (package quotas), by quota name.
	Quotas map[string]int64 `json:"quotas,omitempty"`
}

// Key describes an API key without its secret.
type Key struct {
	ID        string    `json:"id"`
	AccountID string    `json:"account_id"`
	CreatedAt time.Time `json:"created_at"`
}

// AdminKeyID names the admin key where a key id is recorded (it has no
// stored key, so no generated id).
const AdminKeyID = "admin"

// Principal is who a request authenticated as.
type Principal struct {
	Account string
	Admin   bool
	// KeyID is the id of the key that authenticated (AdminKeyID for the
	// admin key), so what a caller does can be recorded against the key
	// rather than a name the caller chose.
	KeyID string
}

// Store keeps accounts and keys in etcd.
type Store struct {
	cli          *clientv3.Client
	adminHash    [sha256.Size]byte
	adminAccount string
	// quota is the operator's default quotas (quotas.Defaults until
	// SetQuotaDefaults).
	quota quotas.Config

	// The key cache spares an etcd read per request. It is used only while
	// a watch on the keys runs, which evicts revoked keys at once; deleted
	// remembers revocations so a lookup that raced one is not cached.
	mu       sync.Mutex
	watching bool
	cache    map[string]Principal // sha256 hex → principal
	deleted  map[string]int64     // sha256 hex → revision of its deletion
}

// New returns a Store. adminKey (may be empty: no admin) authenticates as the
// admin of adminAccount, which is created if missing.
func New(ctx context.Context, cli *clientv3.Client, adminKey, adminAccount string) (*Store, error) {
	if cli == nil {
		return nil, fmt.Errorf("accounts: nil etcd client")
	}
	s := &Store{cli: cli, adminAccount: adminAccount, quota: quotas.Defaults, cache: map[string]Principal{}, deleted: map[string]int64{}}
	if adminKey != "" {
		if err := validAccountID(adminAccount); err != nil {
			return nil, fmt.Errorf("accounts: admin account: %w", err)
		}
		s.adminHash = sha256.Sum256([]byte(adminKey))
		if err := s.ensureAccount(ctx, Account{ID: adminAccount, Name: adminAccount, CreatedAt: time.Now().UTC()}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ensureAccount creates a if no account with its id exists.
func (s *Store) ensureAccount(ctx context.Context, a Account) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	key := accountsPrefix + a.ID
	_, err = s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return fmt.Errorf("accounts: create %s: %w", a.ID, err)
	}
	return nil
}

// Authenticate returns the principal of a bearer key.
func (s *Store) Authenticate(ctx context.Context, key string) (Principal, error) {
	if key == "" {
		return Principal{}, errs.New(errs.Unauthenticated, "missing API key")
	}
	sum := sha256.Sum256([]byte(key))
	if s.adminAccount != "" && subtle.ConstantTimeCompare(sum[:], s.adminHash[:]) == 1 {
		return Principal{Account: s.adminAccount, Admin: true, KeyID: AdminKeyID}, nil
	}
	if !strings.HasPrefix(key, KeyPrefix) {
		return Principal{}, errs.New(errs.Unauthenticated, "invalid API key")
	}
	hash := hex.EncodeToString(sum[:])
	s.mu.Lock()
	p, hit := s.cache[hash]
	hit = hit && s.watching
	s.mu.Unlock()
	if hit {
		return p, nil
	}
	k, rev, found, err := etcdx.GetJSON[Key](ctx, s.cli, keysPrefix+hash)
	if err != nil {
		return Principal{}, fmt.Errorf("accounts: look up key: %w", err)
	}
	if !found {
		return Principal{}, errs.New(errs.Unauthenticated, "invalid API key")
	}
	p = Principal{Account: k.AccountID, KeyID: k.ID}
	s.mu.Lock()
	// Cache only if no deletion is known after the version read: a key
	// is never written again (its hash is of a fresh secret), so such a
	// deletion raced this read.
	if s.watching && s.deleted[hash] < rev {
		s.cache[hash] = p
	}
	s.mu.Unlock()
	return p, nil
}

// Watch keeps the key cache until ctx ends: revoked keys are evicted as
// etcd reports their deletion; while no watch runs the cache is unused.
func (s *Store) Watch(ctx context.Context) {
	etcdx.ListWatch(ctx, s.cli, keysPrefix, etcdx.Handler{
		// Only revocations matter, and the cache was emptied when the
		// last watch ended: the list only says where to watch from.
		Reset: func([]*mvccpb.KeyValue, int64) error {
			s.mu.Lock()
			s.watching = true
			s.mu.Unlock()
			return nil
		},
		Events: func(evs []*clientv3.Event) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, ev := range evs {
				if ev.Type == clientv3.EventTypeDelete {
					hash := strings.TrimPrefix(string(ev.Kv.Key), keysPrefix)
					delete(s.cache, hash)
					s.deleted[hash] = ev.Kv.ModRevision
				}
			}
			return nil
		},
		Stale: func() {
			s.mu.Lock()
			s.watching = false
			clear(s.cache)
			s.mu.Unlock()
		},
	}, etcdx.KeysOnly())
}

// WatchRevocations calls revoked with the account and id of every key
// deleted from now until ctx ends, so that what a key holds open (an MCP
// session) ends with it.
func (s *Store) WatchRevocations(ctx context.Context, revoked func(account, keyID string)) {
	etcdx.ListWatch(ctx, s.cli, indexPrefix, etcdx.Handler{
		Reset: func([]*mvccpb.KeyValue, int64) error { return nil },
		Events: func(evs []*clientv3.Event) error {
			for _, ev := range evs {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				account, id, ok := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), indexPrefix), "/")
				if ok {
					revoked(account, id)
				}
			}
			return nil
		},
	}, etcdx.KeysOnly())
}

// validName reports whether name is 1-128 printable characters.
func validName(name string) bool {
	if name == "" || utf8.RuneCountInString(name) > 128 || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// CreateAccount creates an account with a new id.
func (s *Store) CreateAccount(ctx context.Context, name string) (Account, error) {
	if !validName(name) {
		return Account{}, errs.New(errs.InvalidArgument, "name: must be 1-128 printable characters")
	}
	a := Account{ID: "acct-" + randomID(10), Name: name, CreatedAt: time.Now().UTC()}
	if err := s.ensureAccount(ctx, a); err != nil {
		return Account{}, err
	}
	return a, nil
}

// GetAccount returns an account.
func (s *Store) GetAccount(ctx context.Context, id string) (Account, error) {
	if err := validAccountID(id); err != nil {
		return Account{}, errs.New(errs.NotFound, "account %q not found", id)
	}
	a, _, found, err := etcdx.GetJSON[Account](ctx, s.cli, accountsPrefix+id)
	if err != nil {
		return Account{}, fmt.Errorf("accounts: get %s: %w", id, err)
	}
	if !found {
		return Account{}, errs.New(errs.NotFound, "account %q not found", id)
	}
	return a, nil
}

// ListAccounts lists every account, by id.
func (s *Store) ListAccounts(ctx context.Context) ([]Account, error) {
	resp, err := s.cli.Get(ctx, accountsPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("accounts: list: %w", err)
	}
	out := make([]Account, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var a Account
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return nil, fmt.Errorf("accounts: decode %s: %w", kv.Key, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// CreateKey issues a key for an account and returns its secret, shown once.
func (s *Store) CreateKey(ctx context.Context, accountID string) (string, Key, error) {
	if _, err := s.GetAccount(ctx, accountID); err != nil {
		return "", Key{}, err
	}
	secret := KeyPrefix + randomID(52)
	sum := sha256.Sum256([]byte(secret))
	hash := hex.EncodeToString(sum[:])
	k := Key{ID: "key-" + randomID(10), AccountID: accountID, CreatedAt: time.Now().UTC()}
	b, err := json.Marshal(k)
	if err != nil {
		return "", Key{}, err
	}
	acct := accountsPrefix + accountID
	for {
		limits, err := s.Limits(ctx, accountID)
		if err != nil {
			return "", Key{}, err
		}
		held, err := quotas.Count(ctx, s.cli, quotas.APIKeys, KeysPrefix(accountID), limits[quotas.APIKeys])
		if err != nil {
			return "", Key{}, err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(acct), ">", 0), held).
			Then(clientv3.OpPut(keysPrefix+hash, string(b)), clientv3.OpPut(indexPrefix+accountID+"/"+k.ID, hash)).
			Commit()
		if err != nil {
			return "", Key{}, fmt.Errorf("accounts: store key: %w", err)
		}
		if resp.Succeeded {
			return secret, k, nil
		}
		// The account is gone, or another key was made meanwhile.
		if _, err := s.GetAccount(ctx, accountID); err != nil {
			return "", Key{}, err
		}
	}
}

// KeysPrefix is where an account's keys are indexed, one key each.
func KeysPrefix(account string) string { return indexPrefix + account + "/" }

// SetQuotaDefaults sets the operator's default quotas (quotas.Defaults
// until called). Call it before the store is used.
func (s *Store) SetQuotaDefaults(c quotas.Config) { s.quota = c }

// Limits returns an account's quotas, read from etcd now.
func (s *Store) Limits(ctx context.Context, account string) (quotas.Limits, error) {
	return Limits(ctx, s.cli, &s.quota, account)
}

// QuotaDefaults is the operator's default quotas.
func (s *Store) QuotaDefaults() *quotas.Config { return &s.quota }

// ListKeys lists an account's keys.
func (s *Store) ListKeys(ctx context.Context, accountID string) ([]Key, error) {
	if _, err := s.GetAccount(ctx, accountID); err != nil {
		return nil, err
	}
	idx, err := s.cli.Get(ctx, indexPrefix+accountID+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("accounts: list keys: %w", err)
	}
	out := make([]Key, 0, len(idx.Kvs))
	for _, kv := range idx.Kvs {
		k, _, found, err := etcdx.GetJSON[Key](ctx, s.cli, keysPrefix+string(kv.Value))
		if err != nil {
			return nil, fmt.Errorf("accounts: list keys: %w", err)
		}
		if found {
			out = append(out, k)
		}
	}
	return out, nil
}

// DeleteKey revokes a key.
func (s *Store) DeleteKey(ctx context.Context, accountID, keyID string) error {
	if !idPattern.MatchString(accountID) || !idPattern.MatchString(keyID) {
		return errs.New(errs.NotFound, "key %q not found", keyID)
	}
	idx := indexPrefix + accountID + "/" + keyID
	resp, err := s.cli.Get(ctx, idx)
	if err != nil {
		return fmt.Errorf("accounts: delete key: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return errs.New(errs.NotFound, "key %q not found", keyID)
	}
	kv := resp.Kvs[0]
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(idx), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(idx), clientv3.OpDelete(keysPrefix+string(kv.Value))).
		Commit()
	if err != nil {
		return fmt.Errorf("accounts: delete key: %w", err)
	}
	if !txn.Succeeded {
		return errs.New(errs.NotFound, "key %q not found", keyID)
	}
	// Evict here too, so this router refuses the key before the watch
	// reports the deletion.
	s.mu.Lock()
	delete(s.cache, string(kv.Value))
	s.deleted[string(kv.Value)] = txn.Header.Revision
	s.mu.Unlock()
	return nil
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func validAccountID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("id %q: must be 1-63 characters of [a-z0-9-], starting with a letter or digit", id)
	}
	return nil
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// randomID returns n characters of lowercase base32 from the system's CSPRNG.
func randomID(n int) string {
	b := make([]byte, (n*5+7)/8)
	_, _ = rand.Read(b) // never fails: crypto/rand.Read panics rather than return an error
	return lowerBase32.EncodeToString(b)[:n]
}

// KeyLive reports whether account's key keyID still authenticates: a
// token it minted (a terminal's) is good only as long as it is.
func (s *Store) KeyLive(ctx context.Context, account, keyID string) (bool, error) {
	if keyID == AdminKeyID {
		return s.adminAccount != "" && account == s.adminAccount, nil
	}
	if !idPattern.MatchString(account) || !idPattern.MatchString(keyID) {
		return false, nil
	}
	resp, err := s.cli.Get(ctx, indexPrefix+account+"/"+keyID, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("accounts: look up key: %w", err)
	}
	return resp.Count > 0, nil
}
