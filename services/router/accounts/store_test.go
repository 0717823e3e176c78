package accounts

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

const adminKey = "admin-key-0123456789"

func TestStore(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	s, err := New(ctx, cli, adminKey, "dev")
	if err != nil {
		t.Fatal(err)
	}

	// The admin account exists and the admin key authenticates as it.
	if _, err := s.GetAccount(ctx, "dev"); err != nil {
		t.Fatalf("admin account: %v", err)
	}
	p, err := s.Authenticate(ctx, adminKey)
	if err != nil || p != (Principal{Account: "dev", Admin: true, KeyID: AdminKeyID}) {
		t.Fatalf("Authenticate(admin) = %+v, %v", p, err)
	}

	acct, err := s.CreateAccount(ctx, "Acme Corp")
	if err != nil {
		t.Fatal(err)
	}
	secret, key, err := s.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, KeyPrefix) || key.AccountID != acct.ID {
		t.Fatalf("CreateKey = %q, %+v", secret, key)
	}
	p, err = s.Authenticate(ctx, secret)
	if err != nil || p != (Principal{Account: acct.ID, KeyID: key.ID}) {
		t.Fatalf("Authenticate(key) = %+v, %v", p, err)
	}

	// Only the hash is stored: no value in etcd holds the secret.
	resp, err := cli.Get(ctx, "conch/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key)+string(kv.Value), secret) {
			t.Fatalf("secret stored in etcd at %s", kv.Key)
		}
	}

	keys, err := s.ListKeys(ctx, acct.ID)
	if err != nil || len(keys) != 1 || keys[0].ID != key.ID {
		t.Fatalf("ListKeys = %+v, %v", keys, err)
	}

	t.Run("bad keys", func(t *testing.T) {
		for _, bad := range []string{"", "x", adminKey + "x", secret[:len(secret)-1], strings.ToUpper(secret), secret + " "} {
			if _, err := s.Authenticate(ctx, bad); errs.KindOf(err) != errs.Unauthenticated {
				t.Errorf("Authenticate(%q) = %v, want Unauthenticated", bad, err)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		tests := []struct {
			name string
			err  error
			want errs.Kind
		}{
			{"empty name", second(s.CreateAccount(ctx, "")), errs.InvalidArgument},
			{"long name", second(s.CreateAccount(ctx, strings.Repeat("x", 129))), errs.InvalidArgument},
			{"control character in name", second(s.CreateAccount(ctx, "a\x1bb")), errs.InvalidArgument},
			{"key for missing account", third(s.CreateKey(ctx, "acct-missing")), errs.NotFound},
			{"key for traversal account", third(s.CreateKey(ctx, "../dev")), errs.NotFound},
			{"delete missing key", s.DeleteKey(ctx, acct.ID, "key-missing"), errs.NotFound},
			{"delete key of another account", s.DeleteKey(ctx, "dev", key.ID), errs.NotFound},
		}
		for _, tt := range tests {
			if got := errs.KindOf(tt.err); got != tt.want {
				t.Errorf("%s: kind %v (%v), want %v", tt.name, got, tt.err, tt.want)
			}
		}
	})

	// Revocation is immediate and only once.
	if err := s.DeleteKey(ctx, acct.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("revoked key: %v", err)
	}
	if err := s.DeleteKey(ctx, acct.ID, key.ID); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("second delete: %v", err)
	}

	// A second store over the same etcd (another router) sees the same
	// accounts, and restarting keeps the admin account as it was.
	s2, err := New(ctx, cli, adminKey, "dev")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s2.ListAccounts(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListAccounts = %+v, %v", list, err)
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// TestKeyCacheRevocation checks that a router's key cache never outlives a
// revocation: the revoking router refuses at once, another within the watch.
func TestKeyCacheRevocation(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	a, err := New(ctx, cli, adminKey, "dev")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, cli, adminKey, "dev")
	if err != nil {
		t.Fatal(err)
	}
	go a.Watch(ctx)
	go b.Watch(ctx)
	acct, err := a.CreateAccount(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	secret, key, err := a.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Warm both caches (once their watches run).
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range []*Store{a, b} {
			if _, err := s.Authenticate(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
		a.mu.Lock()
		b.mu.Lock()
		warm := len(a.cache) == 1 && len(b.cache) == 1
		b.mu.Unlock()
		a.mu.Unlock()
		if warm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("caches never warmed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.DeleteKey(ctx, acct.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, secret); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("revoking router: %v, want Unauthenticated at once", err)
	}
	for {
		_, err := b.Authenticate(ctx, secret)
		if errs.KindOf(err) == errs.Unauthenticated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("other router still accepts the revoked key: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
