package discovery

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

func TestPinnedCalls(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	a := startInstance(t, cli.Endpoints(), "pinned")
	b := startInstance(t, cli.Endpoints(), "pinned")
	addrA, addrB := a.reg.endpoint.Addr, b.reg.endpoint.Addr

	conn, err := Dial(t.Context(), cli, "pinned")
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	health := healthpb.NewHealthClient(conn)
	// call returns the address of the instance that answered.
	call := func(ctx context.Context) (string, error) {
		var p peer.Peer
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		if err != nil {
			return "", err
		}
		return p.Addr.String(), nil
	}
	seen := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			addr, err := call(t.Context())
			if err != nil {
				t.Fatalf("unpinned call: %v", err)
			}
			got[addr]++
		}
		return got
	}
	eventually(t, 10*time.Second, func() error {
		if got := seen(10); len(got) != 2 {
			return status.Errorf(codes.Unavailable, "calls reached %v, want both instances", got)
		}
		return nil
	})

	for _, want := range []string{addrA, addrB} {
		for range 5 {
			got, err := call(Pin(t.Context(), want))
			if err != nil || got != want {
				t.Fatalf("call pinned to %s reached %q, %v", want, got, err)
			}
		}
	}

	_, err = call(Pin(t.Context(), "127.0.0.1:1"))
	if !Unreachable(err) {
		t.Fatalf("call pinned to an unknown instance: %v, want Unavailable at once", err)
	}
	if _, err := call(t.Context()); Unreachable(err) {
		t.Fatalf("an unpinned call's error is taken for a pinned one's: %v", err)
	}

	// An instance that stops reporting SERVING (it is draining) gets no
	// more unpinned calls.
	a.srv.Health().SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	eventually(t, 10*time.Second, func() error {
		if got := seen(10); got[addrA] != 0 {
			return status.Errorf(codes.Unavailable, "draining instance still reached: %v", got)
		}
		return nil
	})
	// Calls pinned to it fail unsent, and reach it over a connection of
	// their own.
	if _, err := call(Pin(t.Context(), addrA)); !Unreachable(err) {
		t.Fatalf("call pinned to a draining instance: %v, want it unsent", err)
	}
	direct, err := DialAddr(addrA)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(direct).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); status.Code(err) != codes.OK || p.Addr.String() != addrA {
		t.Fatalf("direct call: %v from %v, want the draining instance's answer", err, p.Addr)
	}
}
