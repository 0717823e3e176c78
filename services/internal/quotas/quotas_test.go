package quotas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// TestDefaultsMatchTags: Defaults is what a Config no one set loads as.
func TestDefaultsMatchTags(t *testing.T) {
	var c Config
	configtest.Defaults(t, &c)
	if c != Defaults {
		t.Errorf("loaded %+v, Defaults %+v", c, Defaults)
	}
	if len(c.Limits()) != len(Kinds) {
		t.Errorf("Limits has %d quotas, Kinds %d", len(c.Limits()), len(Kinds))
	}
}

func TestOverrides(t *testing.T) {
	l := Defaults.With(map[string]int64{"sandboxes": 3, "nonsense": 9})
	if l[Sandboxes] != 3 || l[Gateways] != Defaults.Gateways {
		t.Errorf("With: %v", l)
	}
	for _, tc := range []struct {
		o    map[string]int64
		want string
	}{
		{map[string]int64{"sandboxes": 0}, ""},
		{map[string]int64{"sandboxes": -1}, "quotas.sandboxes: must not be negative, got -1"},
		{map[string]int64{"sandbox": 1}, `quotas: unknown quota "sandbox"`},
	} {
		err := CheckOverrides(tc.o)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckOverrides(%v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestClaimRaceForTheLastUnit: of many creates racing for the last two
// units of a quota, exactly two win; the others get the quota's 429, and
// what one releases another may claim.
func TestClaimRaceForTheLastUnit(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	limits := Limits{Sandboxes: 5, SandboxMemoryBytes: 1 << 40}
	for i := range 3 {
		if err := Claim(ctx, cli, Sandboxes, "acme", fmt.Sprint("held-", i), Usage{Sandboxes: 1}, limits, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Another account's claims are its own.
	if err := Claim(ctx, cli, Sandboxes, "other", "x", Usage{Sandboxes: 1}, Limits{Sandboxes: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var won, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			err := Claim(ctx, cli, Sandboxes, "acme", fmt.Sprint("race-", i), Usage{Sandboxes: 1}, limits, nil)
			switch {
			case err == nil:
				won.Add(1)
			case errs.KindOf(err) == errs.ResourceExhausted && strings.Contains(err.Error(), "quota sandboxes exceeded (5 of 5)"):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 2 || refused.Load() != 18 {
		t.Fatalf("%d won, %d refused; want 2 and 18", won.Load(), refused.Load())
	}
	used, _, err := Read(ctx, cli, Sandboxes, "acme")
	if err != nil || used[Sandboxes] != 5 {
		t.Fatalf("usage %v %v, want 5", used, err)
	}
	if err := Release(ctx, cli, Sandboxes, "acme", "held-0"); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, Sandboxes, "acme", "after", Usage{Sandboxes: 1}, limits, nil); err != nil {
		t.Fatalf("claim after a release: %v", err)
	}
}

// TestClaimTotals: a claim counts against every quota it names; the first
// it would pass refuses it.
func TestClaimTotals(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	limits := Limits{Sandboxes: 10, SandboxMemoryBytes: 1 << 30}
	if err := Claim(ctx, cli, Sandboxes, "acme", "a", Usage{Sandboxes: 1, SandboxMemoryBytes: 768 << 20}, limits, nil); err != nil {
		t.Fatal(err)
	}
	err := Claim(ctx, cli, Sandboxes, "acme", "b", Usage{Sandboxes: 1, SandboxMemoryBytes: 512 << 20}, limits, nil)
	if err == nil || err.Error() != "quota sandbox_memory_bytes exceeded (805306368 of 1073741824)" {
		t.Fatalf("claim beyond the memory total: %v", err)
	}
	if err := Check(ctx, cli, Sandboxes, "acme", Usage{Sandboxes: 1, SandboxMemoryBytes: 256 << 20}, limits); err != nil {
		t.Fatalf("check within: %v", err)
	}
}

// TestClaimEndsWithItsLease: a claim on a lease is gone when the lease
// ends, as what it counts is.
func TestClaimEndsWithItsLease(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	limits := Limits{StoredResponses: 1, StoredResponseBytes: 100}
	if err := Claim(ctx, cli, StoredResponses, "acme", "r1", Usage{StoredResponses: 1, StoredResponseBytes: 10}, limits, []clientv3.OpOption{clientv3.WithLease(lease.ID)}); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, StoredResponses, "acme", "r2", Usage{StoredResponses: 1}, limits, nil); err == nil {
		t.Fatalf("second claim: %v, want refused", err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if err := Claim(ctx, cli, StoredResponses, "acme", "r2", Usage{StoredResponses: 1}, limits, nil); err != nil {
		t.Fatalf("claim after the lease ended: %v", err)
	}
}

// TestCount: things kept one key each are counted under their prefix, and
// the compare Count returns fails a create that raced another.
func TestCount(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := "conch/gateways/acme/"
	create := func(name string) error {
		cmp, err := Count(ctx, cli, Gateways, prefix, 2)
		if err != nil {
			return err
		}
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(prefix+name, "g")).Commit()
		if err == nil && !resp.Succeeded {
			return errors.New("raced")
		}
		return err
	}
	if err := create("a"); err != nil {
		t.Fatal(err)
	}
	cmp, err := Count(ctx, cli, Gateways, prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := create("b"); err != nil { // made between the count and its create
		t.Fatal(err)
	}
	if resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(prefix+"c", "g")).Commit(); err != nil || resp.Succeeded {
		t.Fatalf("a create that raced another went through: %v %v", resp, err)
	}
	if err := create("c"); err == nil || err.Error() != "quota gateways exceeded (2 of 2)" {
		t.Fatalf("third gateway: %v", err)
	}
}

// TestGrow: a shared claim grows and shrinks with what it counts, goes
// when its count of kind does, and refuses growth beyond the limits;
// growth racing for the last unit wins once.
func TestGrow(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	limits := Limits{StoredResponses: 4, StoredResponseBytes: 1000}
	read := func() Usage {
		t.Helper()
		u, _, err := Read(ctx, cli, StoredResponses, "acme")
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name     string
		amounts  Usage
		existing bool
		want     Usage
		err      string
	}{
		{"must exist", Usage{StoredResponses: 1}, true, Usage{}, "quotas: no claim tree of acme"},
		{"made", Usage{StoredResponses: 1, StoredResponseBytes: 100}, false, Usage{StoredResponses: 1, StoredResponseBytes: 100}, ""},
		{"grown", Usage{StoredResponses: 1, StoredResponseBytes: 300}, true, Usage{StoredResponses: 2, StoredResponseBytes: 400}, ""},
		{"beyond the bytes", Usage{StoredResponses: 1, StoredResponseBytes: 601}, true, Usage{StoredResponses: 2, StoredResponseBytes: 400}, "quota stored_response_bytes exceeded (400 of 1000)"},
		{"shrunk, bytes kept", Usage{StoredResponses: -1}, true, Usage{StoredResponses: 1, StoredResponseBytes: 400}, ""},
		{"gone with its count", Usage{StoredResponses: -1}, true, Usage{}, ""},
	} {
		err := Grow(ctx, cli, StoredResponses, "acme", "tree", tc.amounts, limits, tc.existing, nil)
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Fatalf("%s: %v, want %q", tc.name, err, tc.err)
		}
		if got := read(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("%s: usage %v, want %v", tc.name, got, tc.want)
		}
	}

	if err := Grow(ctx, cli, StoredResponses, "acme", "tree", Usage{StoredResponses: 3}, limits, false, nil); err != nil {
		t.Fatal(err)
	}
	var won, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			// Half grow the shared claim, half make their own.
			id := "tree"
			if i%2 == 1 {
				id = fmt.Sprint("own-", i)
			}
			err := Grow(ctx, cli, StoredResponses, "acme", id, Usage{StoredResponses: 1}, limits, false, nil)
			switch {
			case err == nil:
				won.Add(1)
			case errs.KindOf(err) == errs.ResourceExhausted:
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || refused.Load() != 9 || read()[StoredResponses] != 4 {
		t.Fatalf("%d won, %d refused, usage %v; want 1, 9 and 4", won.Load(), refused.Load(), read())
	}
}
