package gateways

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

func newStore(t *testing.T, cli *clientv3.Client, keys *seal.Keyring) *Store {
	t.Helper()
	s, err := New(cli, keys, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newKey(t *testing.T, id string) seal.Key {
	t.Helper()
	k, err := seal.GenerateKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newRing(t *testing.T, active seal.Key, older ...seal.Key) *seal.Keyring {
	t.Helper()
	r, err := seal.NewKeyring(active, older...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// withSecrets is a gateway with a secret of every kind, each value holding
// mark so that a dump of etcd can be searched for it.
func withSecrets(name, mark string) *routerv1.Gateway {
	g := valid()
	g.Name = name
	g.Upstream.ApiKey = "sk-" + mark + "-upstream"
	g.Tools.Webhooks[0].Headers = map[string]string{"Authorization": "Bearer " + mark + "-webhook", "X-Tenant": mark + "-tenant"}
	g.Tools.McpServers = []*routerv1.McpServer{{Name: "docs", Url: "https://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer " + mark + "-mcp"}}}
	g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.github.com"},
		Secrets: []*executorv1.NetworkSecret{{Env: "GH_TOKEN", Value: "ghp-" + mark + "-egress", Domains: []string{"api.github.com"}, Header: "Authorization"}}}
	return g
}

// secretsOf lists the plain secret values of g, by field.
func secretsOf(t *testing.T, g *routerv1.Gateway) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = eachSecret(proto.Clone(g).(*routerv1.Gateway), func(field, v string) (string, error) {
		out[field] = v
		return v, nil
	})
	return out
}

// valuesOf lists the secret values withSecrets gives a gateway for each
// mark: whole values, which a sealed value's base64 does not hold by
// chance as it might a short mark.
func valuesOf(t *testing.T, marks ...string) []string {
	t.Helper()
	var out []string
	for _, m := range marks {
		for _, v := range secretsOf(t, withSecrets("any", m)) {
			out = append(out, v)
		}
	}
	return out
}

// dump is every key and value in etcd.
func dump(t *testing.T, cli *clientv3.Client) map[string][]byte {
	t.Helper()
	resp, err := cli.Get(t.Context(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

// assertNowhere fails if any of needles is in any key or value of etcd.
func assertNowhere(t *testing.T, cli *clientv3.Client, needles ...string) {
	t.Helper()
	for k, v := range dump(t, cli) {
		for _, n := range needles {
			if strings.Contains(k, n) || bytes.Contains(v, []byte(n)) {
				t.Errorf("etcd key %s holds %q", k, n)
			}
		}
	}
}

// Every secret a gateway holds reaches etcd sealed, by every way of
// writing one, and reads back plain.
func TestSecretsAreSealedInEtcd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	s := newStore(t, cli, newRing(t, newKey(t, "k1")))

	if _, err := s.Create(ctx, "acme", withSecrets("prod", "m1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "other", withSecrets("prod", "m2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(ctx, "acme", withSecrets("ensured", "m3")); err != nil {
		t.Fatal(err)
	}
	// A replace that keeps the stored secrets, and a patch that sets a new
	// API key.
	got, err := s.Get(ctx, "acme", "prod")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "acme", "prod", Redact(got), nil); err != nil {
		t.Fatal(err)
	}
	patch := &routerv1.Gateway{Upstream: &routerv1.Upstream{ApiKey: "sk-m4-patched"}}
	if _, err := s.Update(ctx, "acme", "ensured", patch, &fieldmaskpb.FieldMask{Paths: []string{"upstream.api_key"}}); err != nil {
		t.Fatal(err)
	}

	assertNowhere(t, cli, append(valuesOf(t, "m1", "m2", "m3"), "sk-m4-patched")...)
	for k, v := range dump(t, cli) {
		if strings.HasPrefix(k, prefix) && !bytes.Contains(v, []byte("sealed:v1:k1:")) {
			t.Errorf("gateway %s has no value sealed with k1", k)
		}
	}

	// Reads give the plain values: from etcd, listed, and from the cache.
	want := map[string]map[string]string{
		"acme/prod":    secretsOf(t, withSecrets("prod", "m1")),
		"other/prod":   secretsOf(t, withSecrets("prod", "m2")),
		"acme/ensured": secretsOf(t, withSecrets("ensured", "m3")),
	}
	want["acme/ensured"]["upstream.api_key"] = "sk-m4-patched"
	check := func(how string, read func(account, name string) (*routerv1.Gateway, error)) {
		t.Helper()
		for an, secrets := range want {
			account, name, _ := strings.Cut(an, "/")
			g, err := read(account, name)
			if err != nil {
				t.Fatalf("%s %s: %v", how, an, err)
			}
			for field, v := range secretsOf(t, g) {
				if secrets[field] != v {
					t.Errorf("%s %s: %s = %q, want %q", how, an, field, v, secrets[field])
				}
			}
		}
	}
	check("get", func(account, name string) (*routerv1.Gateway, error) {
		g, _, err := s.get(ctx, account, name)
		return g, err
	})
	check("list", func(account, name string) (*routerv1.Gateway, error) {
		list, err := s.List(ctx, account)
		for _, g := range list {
			if g.GetName() == name {
				return g, err
			}
		}
		return nil, errors.Join(err, errors.New("not listed"))
	})
	go s.Watch(ctx)
	waitSynced(t, s)
	check("cache", func(account, name string) (*routerv1.Gateway, error) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if g := s.cache[key(account, name)]; g != nil {
			return g, nil
		}
		return nil, errors.New("not cached")
	})
}

func waitSynced(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.RLock()
		synced := s.synced
		s.mu.RUnlock()
		if synced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A sealed value copied to another account's gateway, or to another field,
// does not open there.
func TestSealedSecretsDoNotMove(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	s := newStore(t, cli, newRing(t, newKey(t, "k1")))
	for _, account := range []string{"acme", "other"} {
		if _, err := s.Create(ctx, account, withSecrets("prod", account)); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(account string) *routerv1.Gateway {
		g := &routerv1.Gateway{}
		if err := proto.Unmarshal(dump(t, cli)[key(account, "prod")], g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	put := func(account string, g *routerv1.Gateway) {
		b, _ := proto.Marshal(g)
		if _, err := cli.Put(ctx, key(account, "prod"), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	acme := stored("acme")
	tests := []struct {
		name   string
		mutate func(g *routerv1.Gateway)
	}{
		{"api key from another account", func(g *routerv1.Gateway) { g.Upstream.ApiKey = acme.GetUpstream().GetApiKey() }},
		{"egress secret from another account", func(g *routerv1.Gateway) {
			g.Shell.Network.Secrets[0].Value = acme.GetShell().GetNetwork().GetSecrets()[0].GetValue()
		}},
		{"api key into a header", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].Headers["Authorization"] = g.GetUpstream().GetApiKey() }},
		{"one header's value into another", func(g *routerv1.Gateway) {
			g.Tools.Webhooks[0].Headers["Authorization"] = g.Tools.Webhooks[0].Headers["X-Tenant"]
		}},
		{"a whole record from another account", func(g *routerv1.Gateway) { proto.Reset(g); proto.Merge(g, acme) }},
	}
	original := stored("other")
	for _, tt := range tests {
		g := proto.Clone(original).(*routerv1.Gateway)
		tt.mutate(g)
		put("other", g)
		_, _, err := s.get(ctx, "other", "prod")
		if !errors.Is(err, seal.ErrNoOpen) {
			t.Errorf("%s: get = %v, want %v", tt.name, err, seal.ErrNoOpen)
		}
	}
}

// A gateway stored before secrets were sealed reads as it is, and is
// sealed by its next write.
func TestUnsealedGatewaysAreSealedOnWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	s := newStore(t, cli, newRing(t, newKey(t, "k1")))
	old := withSecrets("prod", "legacy")
	b, _ := proto.Marshal(old)
	if _, err := cli.Put(ctx, key("acme", "prod"), string(b)); err != nil {
		t.Fatal(err)
	}
	g, err := s.Get(ctx, "acme", "prod")
	if err != nil || g.GetUpstream().GetApiKey() != "sk-legacy-upstream" {
		t.Fatalf("Get of an unsealed gateway = %v, %v", g, err)
	}
	if _, err := s.Update(ctx, "acme", "prod", &routerv1.Gateway{Shell: &routerv1.ShellSettings{Enabled: false}},
		&fieldmaskpb.FieldMask{Paths: []string{"shell.enabled"}}); err != nil {
		t.Fatal(err)
	}
	assertNowhere(t, cli, valuesOf(t, "legacy")...)
	after, err := s.Get(ctx, "acme", "prod")
	if err != nil {
		t.Fatal(err)
	}
	for field, v := range secretsOf(t, old) {
		if got := secretsOf(t, after)[field]; got != v {
			t.Errorf("after the update %s = %q, want %q", field, got, v)
		}
	}
}

// Rotation: with a new key first and the old one still held, Reseal
// rewrites everything under the new key; then the old key can go.
func TestResealRotates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	before := newStore(t, cli, newRing(t, k1))
	for _, an := range [][2]string{{"acme", "prod"}, {"acme", "staging"}, {"other", "prod"}} {
		if _, err := before.Create(ctx, an[0], withSecrets(an[1], an[0]+"-"+an[1])); err != nil {
			t.Fatal(err)
		}
	}
	legacy, _ := proto.Marshal(withSecrets("legacy", "plain"))
	if _, err := cli.Put(ctx, key("acme", "legacy"), string(legacy)); err != nil {
		t.Fatal(err)
	}

	rotated := newStore(t, cli, newRing(t, k2, k1))
	pass, err := rotated.Reseal(ctx)
	if err != nil || pass != (seal.Pass{Records: 4, Resealed: 4}) {
		t.Fatalf("Reseal = %+v, %v; want 4 of 4", pass, err)
	}
	assertNowhere(t, cli, append(valuesOf(t, "acme-prod", "acme-staging", "other-prod", "plain"), "sealed:v1:k1:")...)
	if pass, err := rotated.Reseal(ctx); err != nil || pass.Resealed != 0 {
		t.Fatalf("second Reseal = %+v, %v; want nothing rewritten", pass, err)
	}

	// Without k1, every gateway still reads, with its secrets.
	after := newStore(t, cli, newRing(t, k2))
	for _, an := range [][3]string{{"acme", "prod", "acme-prod"}, {"acme", "staging", "acme-staging"}, {"other", "prod", "other-prod"}, {"acme", "legacy", "plain"}} {
		g, err := after.Get(ctx, an[0], an[1])
		if err != nil {
			t.Fatalf("get %s/%s with k2 alone: %v", an[0], an[1], err)
		}
		for field, v := range secretsOf(t, withSecrets(an[1], an[2])) {
			if got := secretsOf(t, g)[field]; got != v {
				t.Errorf("%s/%s %s = %q, want %q", an[0], an[1], field, got, v)
			}
		}
	}
}

// Reseal never loses a concurrent update: a gateway another replica
// changed between Reseal's read and its write is judged again as it is
// then.
func TestResealKeepsConcurrentUpdates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	old := newStore(t, cli, newRing(t, k1))
	rotated := newStore(t, cli, newRing(t, k2, k1))
	tests := []struct {
		name      string
		writer    *Store
		wantWrote int
	}{
		// A replica still sealing with k1 wrote meanwhile: resealed again,
		// its change kept.
		{"changed by an old replica", old, 1},
		// A replica sealing with k2 wrote meanwhile: nothing left to do.
		{"changed by a new replica", rotated, 0},
	}
	for i, tt := range tests {
		name := []string{"a", "b"}[i]
		if _, err := old.Create(ctx, "acme", withSecrets(name, "x")); err != nil {
			t.Fatal(err)
		}
		raced := false
		_, wrote, err := etcdx.Rewrite(ctx, cli, key("acme", name), func(k string, b []byte) ([]byte, bool, error) {
			if !raced {
				raced = true
				if _, err := tt.writer.Update(ctx, "acme", name, &routerv1.Gateway{Shell: &routerv1.ShellSettings{TimeoutSeconds: 77}},
					&fieldmaskpb.FieldMask{Paths: []string{"shell.timeout_seconds"}}); err != nil {
					t.Fatal(err)
				}
			}
			return rotated.resealed(k, b)
		})
		if err != nil || wrote != tt.wantWrote {
			t.Fatalf("%s: rewrote %d, %v; want %d", tt.name, wrote, err, tt.wantWrote)
		}
		if id, _ := seal.KeyID(firstSealed(t, dump(t, cli)[key("acme", name)])); id != "k2" {
			t.Errorf("%s: sealed with %q after reseal, want k2", tt.name, id)
		}
		g, err := rotated.Get(ctx, "acme", name)
		if err != nil || g.GetShell().GetTimeoutSeconds() != 77 || g.GetUpstream().GetApiKey() != "sk-x-upstream" {
			t.Errorf("%s: the concurrent update was lost: %v, %v", tt.name, g, err)
		}
	}
}

// firstSealed is the stored API key of a gateway record.
func firstSealed(t *testing.T, b []byte) []byte {
	t.Helper()
	g := &routerv1.Gateway{}
	if err := proto.Unmarshal(b, g); err != nil {
		t.Fatal(err)
	}
	return []byte(g.GetUpstream().GetApiKey())
}

// A gateway whose key is gone does not take the cache down: the others are
// served, a read of it says why, and Reseal reports it and does the rest.
func TestGatewayWithAMissingKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cli := etcdxtest.StartForTest(t)
	k0, k1 := newKey(t, "k0"), newKey(t, "k1")
	if _, err := newStore(t, cli, newRing(t, k0)).Create(ctx, "acme", withSecrets("lost", "lost")); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, cli, newRing(t, k1))
	if _, err := s.Create(ctx, "acme", withSecrets("prod", "prod")); err != nil {
		t.Fatal(err)
	}
	go s.Watch(ctx)
	waitSynced(t, s)
	if g, err := s.Get(ctx, "acme", "prod"); err != nil || g.GetUpstream().GetApiKey() != "sk-prod-upstream" {
		t.Fatalf("Get prod = %v, %v", g, err)
	}
	if _, err := s.Get(ctx, "acme", "lost"); !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("Get of a gateway sealed with a missing key = %v, want %v", err, seal.ErrUnknownKey)
	}
	pass, err := s.Reseal(ctx)
	if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), key("acme", "lost")) || pass != (seal.Pass{Records: 2}) {
		t.Fatalf("Reseal = %+v, %v; want the lost gateway reported", pass, err)
	}
}
