package launch

import (
	"bytes"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/approval"
	approvalstore "github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/router/gateways"
)

// conch secrets rotate re-seals the gateways and the forwarding configs
// with the first key, says so, and has nothing to do the second time.
func TestSecretsRotate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	k1, _ := seal.GenerateKey("k1")
	k2, _ := seal.GenerateKey("k2")
	before, _ := seal.NewKeyring(k1)
	gws, err := gateways.New(cli, before, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gws.Create(ctx, "acme", &routerv1.Gateway{Name: "prod",
		Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_OPENAI, Model: "m", ApiKey: "sk-rotate-me"}}); err != nil {
		t.Fatal(err)
	}
	fwd, err := approvalstore.New(cli, approval.KeyPrefix, before)
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.PutForwarding(ctx, "acme", &approvalv1.ForwardingConfig{Channels: &approvalv1.ChannelSettings{SlackToken: "xoxb-rotate-me"}}); err != nil {
		t.Fatal(err)
	}

	cfg := SecretsRotateConfig{
		EtcdClientConfig: EtcdClientConfig{EtcdEndpoints: cli.Endpoints(), EtcdRequestTimeout: 5 * time.Second},
		KeyConfig:        seal.KeyConfig{SecretsKey: seal.FormatKey(k2) + "," + seal.FormatKey(k1)},
	}
	var out bytes.Buffer
	if err := RunSecretsRotate(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gateways: 1 stored, 1 re-sealed with key k2", "approval forwarding configs: 1 stored, 1 re-sealed with key k2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		for _, needle := range []string{"sealed:v1:k1:", "rotate-me"} {
			if bytes.Contains(kv.Value, []byte(needle)) {
				t.Errorf("etcd key %s holds %q after the rotation", kv.Key, needle)
			}
		}
	}
	out.Reset()
	if err := RunSecretsRotate(ctx, cfg, &out); err != nil || strings.Count(out.String(), " 0 re-sealed") != 2 {
		t.Fatalf("second rotation = %v:\n%s", err, out.String())
	}

	after, _ := seal.NewKeyring(k2)
	gws, _ = gateways.New(cli, after, nil, nil)
	if g, err := gws.Get(ctx, "acme", "prod"); err != nil || g.GetUpstream().GetApiKey() != "sk-rotate-me" {
		t.Fatalf("gateway with the new key alone = %v, %v", g, err)
	}
	fwd, _ = approvalstore.New(cli, approval.KeyPrefix, after)
	if f, err := fwd.Forwarding(ctx, "acme"); err != nil || f.GetChannels().GetSlackToken() != "xoxb-rotate-me" {
		t.Fatalf("forwarding config with the new key alone = %v, %v", f, err)
	}
}
