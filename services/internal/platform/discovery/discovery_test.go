package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
)

// shortTTL keeps lease-expiry tests fast; etcd's minimum with default
// election settings is below it.
const shortTTL = 2 * time.Second

var quiet = slog.New(slog.DiscardHandler)

func TestRegisterAndList(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	regs := []struct{ service, addr string }{
		{"router", "127.0.0.1:7002"},
		{"router", "127.0.0.1:7001"},
		{"executor", "127.0.0.1:7100"},
	}
	var all []*Registration
	for _, r := range regs {
		reg, err := Register(t.Context(), cli, r.service, r.addr, RegisterOptions{
			Metadata: map[string]string{"zone": "local"},
			Logger:   quiet,
		})
		if err != nil {
			t.Fatalf("Register(%s, %s): %v", r.service, r.addr, err)
		}
		all = append(all, reg)
	}

	tests := []struct {
		service string
		want    []string
	}{
		{"router", []string{"127.0.0.1:7001", "127.0.0.1:7002"}},
		{"executor", []string{"127.0.0.1:7100"}},
		{"approval", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			got, err := Endpoints(t.Context(), cli, tt.service)
			if err != nil {
				t.Fatalf("Endpoints: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Endpoints(%s) = %v, want %v", tt.service, got, tt.want)
			}
		})
	}

	t.Run("metadata and key layout", func(t *testing.T) {
		em, err := endpoints.NewManager(cli, "conch/services/executor")
		if err != nil {
			t.Fatalf("NewManager: %v", err)
		}
		eps, err := em.List(t.Context())
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		ep, ok := eps["conch/services/executor/127.0.0.1:7100"]
		if !ok {
			t.Fatalf("endpoint key missing, have %v", eps)
		}
		if md, _ := ep.Metadata.(map[string]any); md["zone"] != "local" {
			t.Errorf("metadata = %v, want zone=local", ep.Metadata)
		}
	})

	t.Run("close deregisters", func(t *testing.T) {
		for _, reg := range all {
			if err := reg.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		for _, service := range []string{"router", "executor"} {
			if got, err := Endpoints(t.Context(), cli, service); err != nil || len(got) != 0 {
				t.Errorf("Endpoints(%s) after Close = %v, %v; want none", service, got, err)
			}
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"register empty service", func() error {
			_, err := Register(t.Context(), cli, "", "127.0.0.1:1", RegisterOptions{Logger: quiet})
			return err
		}},
		{"register service with slash", func() error {
			_, err := Register(t.Context(), cli, "a/b", "127.0.0.1:1", RegisterOptions{Logger: quiet})
			return err
		}},
		{"register empty address", func() error {
			_, err := Register(t.Context(), cli, "router", "", RegisterOptions{Logger: quiet})
			return err
		}},
		{"dial empty service", func() error {
			_, err := Dial(t.Context(), cli, "")
			return err
		}},
		{"list empty service", func() error {
			_, err := Endpoints(t.Context(), cli, "")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err == nil {
				t.Error("succeeded, want error")
			}
		})
	}
}

func TestKilledInstanceExpires(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	const addr = "127.0.0.1:7200"

	// The instance's own client stands for its process: closing it stops
	// the keepalives without revoking the lease, as a kill would.
	procCli, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: cli.Endpoints()})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	if _, err := Register(t.Context(), procCli, "workspace", addr, RegisterOptions{TTL: shortTTL, Logger: quiet}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if got, err := Endpoints(t.Context(), cli, "workspace"); err != nil || !slices.Equal(got, []string{addr}) {
		t.Fatalf("Endpoints = %v, %v; want [%s]", got, err, addr)
	}

	killed := time.Now()
	if err := procCli.Close(); err != nil {
		t.Fatalf("close instance client: %v", err)
	}
	eventually(t, 10*time.Second, func() error {
		got, err := Endpoints(t.Context(), cli, "workspace")
		if err == nil && len(got) != 0 {
			err = fmt.Errorf("still listed: %v", got)
		}
		return err
	})
	t.Logf("registration expired %v after the kill", time.Since(killed).Round(time.Millisecond))
}

func TestLostLeaseIsRegisteredAgain(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	reg, err := Register(t.Context(), cli, "approval", "127.0.0.1:7300", RegisterOptions{TTL: shortTTL, Logger: quiet})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() {
		if err := reg.Close(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	key := Target("approval") + "/127.0.0.1:7300"
	lost := leaseOf(t, cli, key)

	// Revoking the lease behind the registration's back deletes the key,
	// as an expiry during an etcd outage would.
	if _, err := cli.Revoke(t.Context(), lost); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	eventually(t, 10*time.Second, func() error {
		resp, err := cli.Get(t.Context(), key)
		switch {
		case err != nil:
			return err
		case len(resp.Kvs) == 0:
			return errors.New("not registered yet")
		case clientv3.LeaseID(resp.Kvs[0].Lease) == lost:
			return errors.New("still on the revoked lease")
		}
		return nil
	})
}

func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s = %v, %v; want one key", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// instance is a running gRPC server registered in discovery.
type instance struct {
	srv    *grpcserver.Server
	reg    *Registration
	cli    *clientv3.Client
	served chan error
}

func startInstance(t *testing.T, etcdEndpoints []string, service string) *instance {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	inst := &instance{
		srv:    grpcserver.New(grpcserver.Options{Name: service, Logger: quiet, StopTimeout: time.Second}),
		served: make(chan error, 1),
	}
	go func() { inst.served <- inst.srv.Serve(lis) }()
	t.Cleanup(func() { inst.stop(t) })

	inst.cli, err = etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: etcdEndpoints})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { inst.cli.Close() })
	inst.reg, err = Register(t.Context(), inst.cli, service, lis.Addr().String(), RegisterOptions{TTL: shortTTL, Logger: quiet})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return inst
}

func (inst *instance) stop(t *testing.T) {
	inst.srv.Shutdown(context.WithoutCancel(t.Context()))
	if err := <-inst.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	inst.served <- nil
}

func TestDialFollowsRestartedService(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	tests := []struct {
		name    string
		service string
		stop    func(t *testing.T, inst *instance)
	}{
		{"deregistered", "router", func(t *testing.T, inst *instance) {
			inst.stop(t)
			if err := inst.reg.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}},
		{"killed, lease expires", "executor", func(t *testing.T, inst *instance) {
			inst.stop(t)
			inst.cli.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := startInstance(t, cli.Endpoints(), tt.service)

			conn, err := Dial(t.Context(), cli, tt.service)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			t.Cleanup(func() { conn.Close() })
			eventually(t, 10*time.Second, func() error { return CheckReady(t.Context(), conn, tt.service) })

			tt.stop(t, first)
			eventually(t, 10*time.Second, func() error {
				got, err := Endpoints(t.Context(), cli, tt.service)
				if err == nil && len(got) != 0 {
					err = fmt.Errorf("stopped instance still listed: %v", got)
				}
				return err
			})
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := CheckReady(ctx, conn, tt.service); err == nil {
				t.Fatal("CheckReady succeeded with no instance running")
			}

			startInstance(t, cli.Endpoints(), tt.service)
			eventually(t, 10*time.Second, func() error { return CheckReady(t.Context(), conn, tt.service) })
		})
	}
}

// eventually polls cond every 20ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
	}
}
