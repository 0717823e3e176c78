package approval

import (
	"bytes"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// Every channel setting the API treats as write-only (the response leaves
// it out) is sealed in etcd, and still used: whatever secret field is
// added to ChannelSettings, the store must seal it too.
func TestWriteOnlyForwardingSettingsAreSealed(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	ch := &approvalv1.ChannelSettings{}
	fields := ch.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.StringKind {
			continue
		}
		v := "mark-" + string(fd.Name())
		if strings.HasSuffix(string(fd.Name()), "_url") {
			v = "https://chat.example/" + v
		}
		ch.ProtoReflect().Set(fd, protoreflect.ValueOfString(v))
	}
	put, err := s.PutForwarding(ctx, &approvalv1.PutForwardingRequest{Config: &approvalv1.ForwardingConfig{Channels: ch}})
	if err != nil {
		t.Fatal(err)
	}
	var writeOnly []string
	shown := put.GetConfig().GetChannels().ProtoReflect()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.StringKind && shown.Get(fd).String() == "" {
			writeOnly = append(writeOnly, ch.ProtoReflect().Get(fd).String())
		}
	}
	if len(writeOnly) < 3 {
		t.Fatalf("only %v are write-only; the Slack and Telegram tokens and the webhook secret must be", writeOnly)
	}
	resp, err := s.store.Client().Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		for _, secret := range writeOnly {
			if bytes.Contains(kv.Value, []byte(secret)) {
				t.Errorf("etcd key %s holds the write-only %s in plain text", kv.Key, secret)
			}
		}
	}
	stored, err := s.store.Forwarding(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range writeOnly {
		if !strings.Contains(stored.GetChannels().String(), secret) {
			t.Errorf("the stored config lost %s", secret)
		}
	}
}

// The approval service refuses a store that cannot seal the forwarding
// configs' secrets.
func TestServiceNeedsAStoreThatSeals(t *testing.T) {
	t.Parallel()
	st, err := store.New(etcdxtest.StartForTest(t), KeyPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(st, Options{}); err == nil {
		t.Fatal("approval.New accepted a store without keys")
	}
}
