package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

func ring(t *testing.T, ids ...string) (*seal.Keyring, []seal.Key) {
	t.Helper()
	var keys []seal.Key
	for _, id := range ids {
		k, err := seal.GenerateKey(id)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	r, err := seal.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return r, keys
}

func forwardingStore(t *testing.T, cli *clientv3.Client, keys *seal.Keyring) *Store {
	t.Helper()
	s, err := New(cli, "/fwd/", keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forwarding is a config with every chat secret set, each holding mark.
func forwarding(mark string) *approvalv1.ForwardingConfig {
	return &approvalv1.ForwardingConfig{
		Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS,
		Targets: []*approvalv1.ForwardTarget{{Channel: approvalv1.Channel_CHANNEL_SLACK, To: "C123"}},
		Channels: &approvalv1.ChannelSettings{
			SlackToken: "xoxb-" + mark + "-slack", TelegramToken: "123:" + mark + "-telegram", WebhookSecret: mark + "-webhook",
			SlackBaseUrl: "https://slack.example/api",
		},
	}
}

// tokensOf lists the secrets forwarding gives a config for each mark.
func tokensOf(marks ...string) []string {
	var out []string
	for _, m := range marks {
		ch := forwarding(m).GetChannels()
		out = append(out, ch.GetSlackToken(), ch.GetTelegramToken(), ch.GetWebhookSecret())
	}
	return out
}

func dumpEtcd(t *testing.T, cli *clientv3.Client) map[string][]byte {
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

func assertNotInEtcd(t *testing.T, cli *clientv3.Client, needles ...string) {
	t.Helper()
	for k, v := range dumpEtcd(t, cli) {
		for _, n := range needles {
			if strings.Contains(k, n) || bytes.Contains(v, []byte(n)) {
				t.Errorf("etcd key %s holds %q", k, n)
			}
		}
	}
}

// The chat tokens and the webhook secret reach etcd sealed and read back
// plain; sealed for one account, they do not open in another's config.
func TestForwardingSecretsAreSealed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	keys, _ := ring(t, "k1")
	s := forwardingStore(t, cli, keys)
	for _, account := range []string{"acme", "other"} {
		if err := s.PutForwarding(ctx, account, forwarding(account)); err != nil {
			t.Fatal(err)
		}
	}
	assertNotInEtcd(t, cli, tokensOf("acme", "other")...)
	for _, account := range []string{"acme", "other"} {
		got, err := s.Forwarding(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(forwarding(account), got, protocmp.Transform()); diff != "" {
			t.Errorf("Forwarding(%s) (-want +got):\n%s", account, diff)
		}
	}

	// acme's sealed Slack token, put in other's config, does not open.
	stored := func(account string) *approvalv1.ForwardingConfig {
		cfg := &approvalv1.ForwardingConfig{}
		if err := protojson.Unmarshal(dumpEtcd(t, cli)[s.fwdKey(account)], cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	moved := stored("other")
	moved.Channels.SlackToken = stored("acme").GetChannels().GetSlackToken()
	b, _ := protojson.Marshal(moved)
	if _, err := cli.Put(ctx, s.fwdKey("other"), string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forwarding(ctx, "other"); !errors.Is(err, seal.ErrNoOpen) {
		t.Fatalf("Forwarding with another account's token = %v, want %v", err, seal.ErrNoOpen)
	}
	// Nor does the Telegram token in the Slack token's field.
	moved = stored("acme")
	moved.Channels.SlackToken = moved.GetChannels().GetTelegramToken()
	b, _ = protojson.Marshal(moved)
	if _, err := cli.Put(ctx, s.fwdKey("acme"), string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forwarding(ctx, "acme"); !errors.Is(err, seal.ErrNoOpen) {
		t.Fatalf("Forwarding with a token in another field = %v, want %v", err, seal.ErrNoOpen)
	}
}

// Rotation: configs stored before sealing and under the old key are all
// re-sealed with the new one, and then read without the old key.
func TestResealForwarding(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	before, keys := ring(t, "k1")
	old := forwardingStore(t, cli, before)
	for _, account := range []string{"acme", "other"} {
		if err := old.PutForwarding(ctx, account, forwarding(account)); err != nil {
			t.Fatal(err)
		}
	}
	// A config stored before secrets were sealed reads as it is.
	plain, _ := protojson.Marshal(forwarding("legacy"))
	if _, err := cli.Put(ctx, old.fwdKey("legacy"), string(plain)); err != nil {
		t.Fatal(err)
	}
	if got, err := old.Forwarding(ctx, "legacy"); err != nil || got.GetChannels().GetSlackToken() != "xoxb-legacy-slack" {
		t.Fatalf("Forwarding of an unsealed config = %v, %v", got, err)
	}
	// So does a config without secrets, which needs no re-sealing.
	if err := old.PutForwarding(ctx, "quiet", &approvalv1.ForwardingConfig{Enabled: true}); err != nil {
		t.Fatal(err)
	}

	k2, err := seal.GenerateKey("k2")
	if err != nil {
		t.Fatal(err)
	}
	rotated, _ := seal.NewKeyring(k2, keys[0])
	pass, err := forwardingStore(t, cli, rotated).ResealForwarding(ctx)
	if err != nil || pass != (seal.Pass{Records: 4, Resealed: 3}) {
		t.Fatalf("ResealForwarding = %+v, %v; want 3 of 4 rewritten", pass, err)
	}
	assertNotInEtcd(t, cli, append(tokensOf("acme", "other", "legacy"), "sealed:v1:k1:")...)

	only2, _ := seal.NewKeyring(k2)
	after := forwardingStore(t, cli, only2)
	for _, account := range []string{"acme", "other", "legacy"} {
		got, err := after.Forwarding(ctx, account)
		if err != nil {
			t.Fatalf("Forwarding(%s) with k2 alone: %v", account, err)
		}
		if diff := cmp.Diff(forwarding(account), got, protocmp.Transform()); diff != "" {
			t.Errorf("Forwarding(%s) (-want +got):\n%s", account, diff)
		}
	}
	if pass, err := after.ResealForwarding(ctx); err != nil || pass.Resealed != 0 {
		t.Fatalf("second ResealForwarding = %+v, %v; want nothing rewritten", pass, err)
	}
}

// A store without keys, as an executor builds to read documents, neither
// reads nor writes forwarding configs.
func TestForwardingNeedsKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	keys, _ := ring(t, "k1")
	if err := forwardingStore(t, cli, keys).PutForwarding(ctx, "acme", forwarding("acme")); err != nil {
		t.Fatal(err)
	}
	s, err := New(cli, "/fwd/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Seals() {
		t.Fatal("a store without keys says it seals")
	}
	if got, err := s.Forwarding(ctx, "acme"); err == nil || !strings.Contains(err.Error(), "no keyring") {
		t.Fatalf("Forwarding without keys = %v, %v; want an error", got, err)
	}
	if err := s.PutForwarding(ctx, "acme", forwarding("acme")); err == nil {
		t.Fatal("PutForwarding without keys succeeded")
	}
	if _, err := s.ResealForwarding(ctx); err == nil {
		t.Fatal("ResealForwarding without keys succeeded")
	}
}
