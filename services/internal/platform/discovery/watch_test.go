package discovery

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// TestWatchFollowsInstances registers, changes and removes instances and
// checks that a watch of the service holds what a read from etcd would,
// metadata included, and nothing of another service.
func TestWatchFollowsInstances(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	first, err := Register(t.Context(), cli, "executor", "127.0.0.1:7101", RegisterOptions{Metadata: map[string]string{"max_sandboxes": "8"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Register(t.Context(), cli, "router", "127.0.0.1:7001", RegisterOptions{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	w, err := Watch(t.Context(), cli, "executor", quiet)
	if err != nil {
		t.Fatal(err)
	}
	// waitFor waits until the watch holds what etcd holds and that is want.
	waitFor := func(want []Instance) {
		t.Helper()
		live, err := Instances(t.Context(), cli, "executor")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(live, want) {
			t.Fatalf("etcd holds %v, want %v", live, want)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, ok := w.Instances()
			if ok && reflect.DeepEqual(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("watch holds %v (listed: %v), want %v", got, ok, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor([]Instance{{Addr: "127.0.0.1:7101", Metadata: map[string]string{"max_sandboxes": "8"}}})

	second, err := Register(t.Context(), cli, "executor", "127.0.0.1:7100", RegisterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	waitFor([]Instance{
		{Addr: "127.0.0.1:7100", Metadata: map[string]string{}},
		{Addr: "127.0.0.1:7101", Metadata: map[string]string{"max_sandboxes": "8"}},
	})

	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor([]Instance{{Addr: "127.0.0.1:7100", Metadata: map[string]string{}}})

	// A registration that is not an endpoint's is left out.
	if _, err := cli.Put(t.Context(), Target("executor")+"/junk", "not json"); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor([]Instance{})
}

func TestWatchInvalidService(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for _, service := range []string{"", "a/b"} {
		if _, err := Watch(ctx, cli, service, quiet); err == nil {
			t.Errorf("Watch(%q) = nil error, want one", service)
		}
	}
}
