package etcdx

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

func TestEmbeddedKeepsDataAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		run  func(t *testing.T, cli *clientv3.Client)
	}{
		{"write", func(t *testing.T, cli *clientv3.Client) {
			if _, err := cli.Put(t.Context(), "conch/test", "v1"); err != nil {
				t.Fatalf("put: %v", err)
			}
		}},
		{"read after restart on new ports", func(t *testing.T, cli *clientv3.Client) {
			resp, err := cli.Get(t.Context(), "conch/test")
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
				t.Fatalf("get = %v, want v1", resp.Kvs)
			}
		}},
	}
	for _, tt := range tests {
		ok := t.Run(tt.name, func(t *testing.T) {
			e, err := StartEmbedded(t.Context(), EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
			if err != nil {
				t.Fatalf("StartEmbedded: %v", err)
			}
			defer e.Close()
			if len(e.Endpoints()) != 1 || !strings.HasPrefix(e.Endpoints()[0], "http://127.0.0.1:") {
				t.Fatalf("Endpoints() = %v, want one loopback URL", e.Endpoints())
			}
			cli, err := NewClient(t.Context(), ClientOptions{Endpoints: e.Endpoints()})
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			defer cli.Close()
			tt.run(t, cli)
		})
		if !ok {
			return
		}
	}
}

func TestNewClientErrors(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	dead := lis.Addr().String()
	lis.Close()

	tests := []struct {
		name    string
		opts    ClientOptions
		wantMsg string
	}{
		{"no endpoints", ClientOptions{}, "no endpoints"},
		{"nothing listening", ClientOptions{Endpoints: []string{dead}, DialTimeout: 300 * time.Millisecond}, dead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			cli, err := NewClient(t.Context(), tt.opts)
			if err == nil {
				cli.Close()
				t.Fatal("NewClient succeeded, want error")
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("NewClient() = %q, want it to name %q", err, tt.wantMsg)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("NewClient took %v, want it bounded by DialTimeout", took)
			}
		})
	}
}

func TestZapBridge(t *testing.T) {
	tests := []struct {
		name    string
		logf    func(*zap.Logger)
		want    []string
		wantNil bool
	}{
		{
			name: "error forwarded with fields",
			logf: func(l *zap.Logger) {
				l.With(zap.String("member", "m1")).Error("request failed", zap.Int("attempt", 3))
			},
			want: []string{"level=ERROR", `msg="request failed"`, "component=etcd", "member=m1", "attempt=3"},
		},
		{
			name:    "warn dropped",
			logf:    func(l *zap.Logger) { l.Warn("retrying") },
			wantNil: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tt.logf(zapLogger(slog.New(slog.NewTextHandler(&buf, nil)), zap.ErrorLevel, new(atomic.Bool)))
			out := buf.String()
			if tt.wantNil && out != "" {
				t.Errorf("logged %q, want nothing", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("log %q lacks %q", out, w)
				}
			}
		})
	}
}

func TestMembersFormACluster(t *testing.T) {
	names := []string{"m0", "m1", "m2"}
	var clientURLs, peerURLs []string
	for range names {
		c, err := freeLoopbackURL()
		if err != nil {
			t.Fatal(err)
		}
		p, err := freeLoopbackURL()
		if err != nil {
			t.Fatal(err)
		}
		clientURLs, peerURLs = append(clientURLs, c.String()), append(peerURLs, p.String())
	}
	var initial []string
	for i, n := range names {
		initial = append(initial, n+"="+peerURLs[i])
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	members := make([]*Embedded, len(names))
	startMember := func(i int) {
		t.Helper()
		m, err := StartMember(t.Context(), MemberOptions{
			Name: names[i], Dir: dirs[i], ClientURL: clientURLs[i], PeerURL: peerURLs[i],
			InitialCluster: strings.Join(initial, ","), UnsafeNoFsync: true,
		})
		if err != nil {
			t.Fatalf("StartMember(%s): %v", names[i], err)
		}
		members[i] = m
	}
	for i := range names {
		startMember(i)
	}
	t.Cleanup(func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	})
	for i, m := range members {
		select {
		case <-m.Ready():
		case <-time.After(30 * time.Second):
			t.Fatalf("member %s not ready", names[i])
		}
	}
	connect := func(url string) *clientv3.Client {
		t.Helper()
		cli, err := NewClient(t.Context(), ClientOptions{Endpoints: []string{url}})
		if err != nil {
			t.Fatalf("NewClient(%s): %v", url, err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	if _, err := connect(clientURLs[0]).Put(t.Context(), "conch/k", "v"); err != nil {
		t.Fatalf("put through m0: %v", err)
	}
	// One member down: the other two still make a quorum, and the member
	// restarted on its data dir catches up.
	members[0].Close()
	members[0] = nil
	if _, err := connect(clientURLs[1]).Put(t.Context(), "conch/k", "v2"); err != nil {
		t.Fatalf("put with one member down: %v", err)
	}
	startMember(0)
	<-members[0].Ready()
	survivor := connect(clientURLs[0])
	resp, err := survivor.Get(t.Context(), "conch/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2" {
		t.Fatalf("get through the restarted member = %v, %v; want v2", resp, err)
	}

	// Two members down: no quorum. Calls fail with ErrNoAnswer, an
	// Unavailable error, instead of waiting for a leader that never comes.
	bounded, err := NewClient(t.Context(), ClientOptions{Endpoints: []string{clientURLs[0]}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bounded.Close()
	for _, i := range []int{1, 2} {
		members[i].Close()
		members[i] = nil
	}
	// The caller's own deadline is far longer than the request timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"get", func() error { _, err := bounded.Get(ctx, "conch/k"); return err }},
		{"put", func() error { _, err := bounded.Put(ctx, "conch/k", "v3"); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, ErrNoAnswer) || errs.KindOf(err) != errs.Unavailable {
			t.Errorf("%s without quorum = %v (kind %v), want ErrNoAnswer, unavailable", c.name, err, errs.KindOf(err))
		}
	}
}

func TestMemberOptionsValidate(t *testing.T) {
	ok := MemberOptions{Name: "a", Dir: "/d", ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2", InitialCluster: "a=http://127.0.0.1:2,b=http://127.0.0.1:3"}
	tests := []struct {
		name    string
		edit    func(*MemberOptions)
		wantMsg string
	}{
		{"valid", func(*MemberOptions) {}, ""},
		{"no name", func(o *MemberOptions) { o.Name = "" }, "Name: required"},
		{"client URL without port", func(o *MemberOptions) { o.ClientURL = "http://127.0.0.1" }, "ClientURL"},
		{"peer URL not http", func(o *MemberOptions) { o.PeerURL = "127.0.0.1:2" }, "PeerURL"},
		{"not in the initial cluster", func(o *MemberOptions) { o.Name = "c" }, `no member named "c"`},
		{"peer URL differs", func(o *MemberOptions) { o.PeerURL = "http://127.0.0.1:4" }, "not at the peer URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.edit(&o)
			err := o.Validate()
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Validate() = %v, want it to mention %q", err, tt.wantMsg)
			}
		})
	}
}
