package responsestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/router/upstream"
)

func fsBackend(tb testing.TB) store.Store {
	st, err := fsstore.New(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// backends are the object stores a Store runs on: the dev directory and
// MinIO.
func backends(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"fs": func(t *testing.T) store.Store { return fsBackend(t) },
		"minio": func(t *testing.T) store.Store {
			m := miniotest.Start(t)
			st, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

type fixture struct {
	*Store
	etcd    *clientv3.Client
	objects store.Store
	limits  quotas.Limits
}

func newFixture(t testing.TB, objects store.Store) *fixture {
	f := &fixture{etcd: etcdxtest.StartForTest(t), objects: objects, limits: quotas.Defaults.Limits()}
	s, err := New(Options{Etcd: f.etcd, Objects: objects, Limits: func(context.Context, string) (quotas.Limits, error) { return f.limits, nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.Store = s
	return f
}

// turn stores response id continuing prev ("" for none) with one user
// and one assistant message, and returns its thread.
func (f *fixture) turn(t testing.TB, account, id, prev string) error {
	ctx := context.Background()
	var th *Thread
	if prev != "" {
		var err error
		if th, err = f.Thread(ctx, account, prev); err != nil {
			return err
		}
	}
	added := []upstream.StoredMessage{{Role: "user", Content: "q " + id}, {Role: "assistant", Content: "a " + id}}
	return f.Put(ctx, account, id, th, &Response{Response: map[string]any{"id": id}, Input: []map[string]any{{"content": "q " + id}}}, Turn{Messages: added, Container: "sb-" + id})
}

func contents(th *Thread) string {
	var s []string
	for _, m := range th.Messages {
		s = append(s, m.Content)
	}
	return strings.Join(s, ",")
}

func (f *fixture) objectCount(t *testing.T, prefix string) int {
	n := 0
	for info, err := range f.objects.List(t.Context(), prefix, true) {
		if err != nil {
			t.Fatal(err)
		}
		if !info.IsDir() {
			n++
		}
	}
	return n
}

// TestConversations: a continuation reads every segment before it in
// order, branches keep their own, GET reads the response, and another
// account finds nothing.
func TestConversations(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, open(t))
			for i, prev := range []string{"", "r0", "r1", "r2"} {
				if err := f.turn(t, "acct", fmt.Sprintf("r%d", i), prev); err != nil {
					t.Fatal(err)
				}
			}
			// A branch from r1.
			if err := f.turn(t, "acct", "b2", "r1"); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]string{
				"r0": "q r0,a r0",
				"r3": "q r0,a r0,q r1,a r1,q r2,a r2,q r3,a r3",
				"b2": "q r0,a r0,q r1,a r1,q b2,a b2",
			} {
				th, err := f.Thread(t.Context(), "acct", id)
				if err != nil {
					t.Fatal(err)
				}
				if got := contents(th); got != want || th.Root != "r0" || th.Chain[len(th.Chain)-1] != id || th.Container != "sb-"+id {
					t.Errorf("thread of %s: %q root %s chain %v container %s, want %q", id, got, th.Root, th.Chain, th.Container, want)
				}
			}
			r, err := f.Get(t.Context(), "acct", "r2")
			if err != nil || r.Response["id"] != "r2" || r.Input[0]["content"] != "q r2" {
				t.Fatalf("Get r2: %+v %v", r, err)
			}
			for _, op := range []func() error{
				func() error { _, err := f.Get(t.Context(), "other", "r2"); return err },
				func() error { _, err := f.Thread(t.Context(), "other", "r2"); return err },
				func() error { return f.turn(t, "other", "x", "r2") },
			} {
				if err := op(); !IsNotFound(err) {
					t.Errorf("another account's response: %v, want not found", err)
				}
			}
			if found, err := f.Delete(t.Context(), "other", "r2"); found || err != nil {
				t.Errorf("another account deletes r2: %v %v", found, err)
			}
			used, _, err := quotas.Read(t.Context(), f.etcd, quotas.StoredResponses, "acct")
			if err != nil || used[quotas.StoredResponses] != 5 || used[quotas.StoredResponseBytes] <= 0 {
				t.Errorf("usage %v %v, want 5 responses", used, err)
			}
		})
	}
}

// TestDelete: a deleted response is not found, but the conversations
// continued from it are whole; deleting the last response of a
// conversation removes its objects and its claim, once.
func TestDelete(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, open(t))
			for i, prev := range []string{"", "r0", "r1"} {
				if err := f.turn(t, "acct", fmt.Sprintf("r%d", i), prev); err != nil {
					t.Fatal(err)
				}
			}
			if found, err := f.Delete(t.Context(), "acct", "r1"); !found || err != nil {
				t.Fatalf("delete r1: %v %v", found, err)
			}
			if _, err := f.Get(t.Context(), "acct", "r1"); !IsNotFound(err) {
				t.Errorf("GET a deleted response: %v", err)
			}
			if err := f.turn(t, "acct", "x", "r1"); !IsNotFound(err) {
				t.Errorf("continue a deleted response: %v", err)
			}
			th, err := f.Thread(t.Context(), "acct", "r2")
			if err != nil || contents(th) != "q r0,a r0,q r1,a r1,q r2,a r2" {
				t.Fatalf("the conversation after it: %v %v", th, err)
			}
			// Two deletes race for each of the others: each is counted once.
			for _, id := range []string{"r0", "r2"} {
				var wg sync.WaitGroup
				founds := make([]bool, 2)
				for i := range founds {
					wg.Go(func() {
						var err error
						if founds[i], err = f.Delete(t.Context(), "acct", id); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				if founds[0] == founds[1] {
					t.Errorf("two deletes of %s found it: %v", id, founds)
				}
			}
			used, _, _ := quotas.Read(t.Context(), f.etcd, quotas.StoredResponses, "acct")
			if len(used) != 0 {
				t.Errorf("usage after every response was deleted: %v", used)
			}
			if n := f.objectCount(t, ""); n != 0 {
				t.Errorf("%d objects left after every response was deleted", n)
			}
		})
	}
}

// TestQuotas: a conversation counts its responses and bytes; the last
// slot goes to one of two racing accounts' responses, and a refused one
// leaves no object.
func TestQuotas(t *testing.T) {
	f := newFixture(t, fsBackend(t))
	f.limits[quotas.StoredResponses] = 3
	for i, prev := range []string{"", "r0"} {
		if err := f.turn(t, "acct", fmt.Sprintf("r%d", i), prev); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Check(t.Context(), "acct", nil); err != nil {
		t.Fatalf("Check with room for one: %v", err)
	}
	errsOf := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errsOf {
		wg.Go(func() { errsOf[i] = f.turn(t, "acct", fmt.Sprintf("last%d", i), "r1") })
	}
	wg.Wait()
	var qe *QuotaError
	if (errsOf[0] == nil) == (errsOf[1] == nil) || !(errors.As(errsOf[0], &qe) || errors.As(errsOf[1], &qe)) ||
		!strings.Contains(qe.Error(), "quota stored_responses exceeded (3 of 3)") {
		t.Fatalf("two responses for the last slot: %v", errsOf)
	}
	if err := f.Check(t.Context(), "acct", nil); errs.KindOf(err) != errs.ResourceExhausted {
		t.Errorf("Check when full: %v", err)
	}
	if n := f.objectCount(t, ""); n != 6 {
		t.Errorf("%d objects, want those of the 3 responses stored", n)
	}

	f.limits[quotas.StoredResponses] = 100
	used, _, _ := quotas.Read(t.Context(), f.etcd, quotas.StoredResponses, "acct")
	f.limits[quotas.StoredResponseBytes] = used[quotas.StoredResponseBytes]
	if err := f.turn(t, "acct", "big", ""); !errors.As(err, &qe) || !strings.Contains(err.Error(), "quota stored_response_bytes exceeded") {
		t.Errorf("a response beyond the bytes: %v", err)
	}
}

// TestContinueWhileDeleted: a continuation whose conversation was
// deleted while it ran is not stored, and leaves nothing.
func TestContinueWhileDeleted(t *testing.T) {
	f := newFixture(t, fsBackend(t))
	if err := f.turn(t, "acct", "r0", ""); err != nil {
		t.Fatal(err)
	}
	th, err := f.Thread(t.Context(), "acct", "r0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Delete(t.Context(), "acct", "r0"); err != nil {
		t.Fatal(err)
	}
	err = f.Put(t.Context(), "acct", "r1", th, &Response{}, Turn{Messages: []upstream.StoredMessage{{Role: "user", Content: "late"}}})
	if errs.KindOf(err) != errs.FailedPrecondition || !strings.Contains(err.Error(), "was deleted or expired while it ran") {
		t.Fatalf("Put after the conversation went: %v", err)
	}
	if n := f.objectCount(t, ""); n != 0 {
		t.Errorf("%d objects left", n)
	}
}

// TestSweep: a conversation whose claim expired, and the objects of a
// response whose claim was never made (a crash), are removed by the
// second sweep that finds them so; a live one stays.
func TestSweep(t *testing.T) {
	f := newFixture(t, fsBackend(t))
	for _, id := range []string{"live", "expired"} {
		if err := f.turn(t, "acct", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	// What expiry of the conversation's lease does.
	if _, err := f.etcd.Delete(t.Context(), quotas.ClaimKey(quotas.StoredResponses, "acct", "expired")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.etcd.Delete(t.Context(), recordKey("acct", "expired")); err != nil {
		t.Fatal(err)
	}
	// What a crash between the objects and the claim leaves.
	if _, err := f.objects.Put(t.Context(), objectKey("acct", "crashed", "crashed", "conversation"), strings.NewReader("x"), store.PutOptions{Size: 1, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	// Two kept turns, one expired.
	for _, key := range []string{"live", "expired"} {
		if err := f.KeepTurn(t.Context(), "acct", key, map[string]string{"turn": key}); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := f.liveClaims(t.Context(), "acct")
	if err != nil {
		t.Fatal(err)
	}
	var expiredTurn string
	vs := []any{&map[string]string{}}
	if found, err := f.FindTurns(t.Context(), "acct", []string{"expired"}, vs); err != nil || !found[0] {
		t.Fatalf("FindTurns: %v %v", found, err)
	}
	for id := range claims {
		obj := strings.TrimPrefix(id, turnClaim)
		if obj != id {
			var got map[string]string
			if err := f.getObject(t.Context(), turnObjectKey("acct", obj), obj, &got); err == nil && got["turn"] == "expired" {
				expiredTurn = id
			}
		}
	}
	if _, err := f.etcd.Delete(t.Context(), quotas.ClaimKey(quotas.StoredResponses, "acct", expiredTurn)); err != nil || expiredTurn == "" {
		t.Fatal(expiredTurn, err)
	}
	if n, err := f.Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("first sweep removed %d: %v", n, err)
	}
	if n, err := f.Sweep(t.Context()); n != 3 || err != nil {
		t.Fatalf("second sweep removed %d, want 3: %v", n, err)
	}
	if n := f.objectCount(t, ""); n != 3 || f.objectCount(t, treePrefix("acct", "live")) != 2 || f.objectCount(t, turnsPrefix) != 1 {
		t.Errorf("%d objects left, want the live conversation's 2 and the live turn", n)
	}
	vs = []any{&map[string]string{}, &map[string]string{}}
	if found, err := f.FindTurns(t.Context(), "acct", []string{"live", "expired"}, vs); err != nil || !found[0] || found[1] {
		t.Errorf("FindTurns after the sweep: %v %v", found, err)
	}
	if _, err := f.Get(t.Context(), "acct", "live"); err != nil {
		t.Error(err)
	}
}

// TestTurnQuota: kept turns count against the account's stored bytes.
func TestTurnQuota(t *testing.T) {
	f := newFixture(t, fsBackend(t))
	f.limits[quotas.StoredResponseBytes] = 100
	err := f.KeepTurn(t.Context(), "acct", "k", map[string]string{"big": strings.Repeat("x", 4096) + fmt.Sprint(rand.Int())})
	if err != nil {
		t.Fatalf("a turn within the bytes: %v", err)
	}
	used, _, _ := quotas.Read(t.Context(), f.etcd, quotas.StoredResponses, "acct")
	if used[quotas.StoredResponses] != 0 || used[quotas.StoredResponseBytes] == 0 {
		t.Fatalf("usage %v", used)
	}
	f.limits[quotas.StoredResponseBytes] = used[quotas.StoredResponseBytes]
	err = f.KeepTurn(t.Context(), "acct", "k2", map[string]string{"x": "y"})
	if errs.KindOf(err) != errs.ResourceExhausted || f.objectCount(t, turnsPrefix) != 1 {
		t.Fatalf("a turn beyond the bytes: %v", err)
	}
}

// TestSegmentNames: accounts and ids that are not plain names stay
// within their own keys.
func TestSegmentNames(t *testing.T) {
	for _, s := range []string{".", "..", "a/b", "a%2Fb", "é", "..."} {
		k := objectKey(s, s, s, "response")
		if err := store.CheckKey(k); err != nil {
			t.Errorf("%q: %v", s, err)
		}
		if strings.Count(k, "/") != 4 {
			t.Errorf("%q: key %q", s, k)
		}
	}
}
